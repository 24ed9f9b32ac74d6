"""The batcher of `keras-transformer serve`: requests merged by options, in order, a bounded
queue, requests that gave up skipped, errors to every request of a batch, a drain that
answers what is queued."""

import threading
import time

import pytest

from keras_transformer.serving.batching import (
    Batcher,
    Job,
    QueueClosed,
    QueueFull,
    SearchOptions,
)

pytestmark = pytest.mark.one_backend


class BlockingEngine:
    """Records each batch; the first call waits until `release` is set."""

    def __init__(self):
        self.batches = []
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, sentences, prefixes, options):
        self.batches.append((list(sentences), prefixes, options))
        self.running.set()
        self.release.wait(10)
        return [f"{sentence}/{options.beam_size}" for sentence in sentences]


def test_waiting_requests_with_equal_options_are_merged_in_order():
    engine = BlockingEngine()
    batcher = Batcher(engine, max_batch_sentences=4)
    first = batcher.submit(Job(["a"], None, SearchOptions()))
    assert engine.running.wait(5)
    # While the engine runs, four requests wait: two of the default search, one of beam 2,
    # one more of the default search that would overflow the batch.
    b = batcher.submit(Job(["b1", "b2"], None, SearchOptions()))
    c = batcher.submit(Job(["c"], None, SearchOptions(beam_size=2)))
    d = batcher.submit(Job(["d"], None, SearchOptions()))
    e = batcher.submit(Job(["e1", "e2"], None, SearchOptions()))
    assert batcher.depth == 6
    engine.release.set()
    assert first.result(5) == ["a/None"]
    assert b.result(5) == ["b1/None", "b2/None"]
    assert d.result(5) == ["d/None"]
    assert c.result(5) == ["c/2"]
    assert e.result(5) == ["e1/None", "e2/None"]
    sent = [batch[0] for batch in engine.batches]
    assert sent == [["a"], ["b1", "b2", "d"], ["c"], ["e1", "e2"]]
    batcher.close(5)


def test_full_queue_refuses_and_a_request_that_gave_up_is_skipped():
    engine = BlockingEngine()
    batcher = Batcher(engine, max_queue_sentences=3)
    batcher.submit(Job(["a"], None, SearchOptions()))
    assert engine.running.wait(5)
    gave_up = batcher.submit(Job(["b", "c"], None, SearchOptions()))
    with pytest.raises(QueueFull, match="2 sentences waiting, at most 3"):
        batcher.submit(Job(["d", "e"], None, SearchOptions()))
    assert gave_up.cancel()  # Its caller's time limit passed while it waited.
    kept = batcher.submit(Job(["f"], None, SearchOptions()))
    engine.release.set()
    assert kept.result(5) == ["f/None"]
    assert [batch[0] for batch in engine.batches] == [["a"], ["f"]]
    batcher.close(5)


def test_engine_error_reaches_every_request_of_its_batch_only():
    calls = []

    def translate(sentences, prefixes, options):
        calls.append(sentences)
        if "bad" in sentences:
            raise ValueError("the engine refused")
        return sentences

    gate = threading.Event()
    batcher = Batcher(lambda *args: gate.wait(5) and translate(*args), max_batch_sentences=8)
    held = batcher.submit(Job(["first"], None, SearchOptions()))
    time.sleep(0.1)
    jobs = [batcher.submit(Job([text], None, SearchOptions())) for text in ("ok", "bad")]
    later = batcher.submit(Job(["other"], None, SearchOptions(num_hypotheses=2)))
    gate.set()
    assert held.result(5) == ["first"]
    for job in jobs:
        with pytest.raises(ValueError, match="refused"):
            job.result(5)
    assert later.result(5) == ["other"]
    batcher.close(5)


def test_prefixes_travel_with_their_sentences():
    seen = []

    def translate(sentences, prefixes, options):
        seen.append(prefixes)
        return [
            f"{prefix}+{sentence}" for sentence, prefix in zip(sentences, prefixes, strict=True)
        ]

    gate = threading.Event()
    batcher = Batcher(lambda *args: gate.wait(5) and translate(*args))
    options = SearchOptions(prefixed=True)
    one = batcher.submit(Job(["x", "y"], ["p", ""], options))
    two = batcher.submit(Job(["z"], ["q"], options))
    gate.set()
    assert one.result(5) == ["p+x", "+y"]
    assert two.result(5) == ["q+z"]
    batcher.close(5)


def test_close_answers_what_is_queued_then_refuses():
    engine = BlockingEngine()
    batcher = Batcher(engine)
    first = batcher.submit(Job(["a"], None, SearchOptions()))
    assert engine.running.wait(5)
    queued = batcher.submit(Job(["b"], None, SearchOptions(beam_size=3)))
    closer = threading.Thread(target=batcher.close, args=(10,))
    closer.start()
    time.sleep(0.1)
    with pytest.raises(QueueClosed):
        batcher.submit(Job(["c"], None, SearchOptions()))
    engine.release.set()
    closer.join(10)
    assert first.result(0) == ["a/None"] and queued.result(0) == ["b/3"]


def test_batch_wait_gathers_requests_that_arrive_soon_after():
    batches = []
    batcher = Batcher(
        lambda sentences, prefixes, options: batches.append(sentences) or sentences,
        max_batch_sentences=3,
        max_wait=0.3,
    )
    futures = []
    for text in ("a", "b", "c"):
        futures.append(batcher.submit(Job([text], None, SearchOptions())))
        time.sleep(0.02)
    assert [future.result(5) for future in futures] == [["a"], ["b"], ["c"]]
    assert batches == [["a", "b", "c"]]
    batcher.close(5)


def test_a_free_thread_waits_for_announced_requests_only():
    batches = []
    batcher = Batcher(
        lambda sentences, prefixes, options: batches.append(sentences) or sentences,
        max_batch_sentences=3,
        announced_wait=5.0,
    )
    # Nothing announced: a lone request runs at once (no wait).
    started = time.monotonic()
    assert batcher.submit(Job(["lone"], None, SearchOptions())).result(5) == ["lone"]
    assert time.monotonic() - started < 2.0
    # Two requests on their way: the first queued waits for the second, one batch.
    batcher.announce()
    batcher.announce()
    first = batcher.submit(Job(["a"], None, SearchOptions()))
    batcher.withdraw()
    time.sleep(0.2)
    assert not first.done()  # Waiting for the announced one.
    second = batcher.submit(Job(["b"], None, SearchOptions()))
    batcher.withdraw()
    assert first.result(5) == ["a"] and second.result(5) == ["b"]
    assert batches == [["lone"], ["a", "b"]]
    # A full batch does not wait, whatever is announced; the wait is bounded.
    batcher.announce()
    full = batcher.submit(Job(["c", "d", "e"], None, SearchOptions()))
    assert full.result(2) == ["c", "d", "e"]
    batcher.announced_wait = 0.3
    started = time.monotonic()
    assert batcher.submit(Job(["f"], None, SearchOptions())).result(5) == ["f"]
    assert 0.25 < time.monotonic() - started < 3.0
    batcher.withdraw()
    batcher.close(5)


def test_search_options_arguments_leave_unset_options_out():
    assert SearchOptions().arguments() == {}
    assert SearchOptions(beam_size=2, num_hypotheses=2).arguments() == {
        "beam_size": 2,
        "num_hypotheses": 2,
    }
    assert SearchOptions(sampling_topk=5, seed=3).arguments() == {"sampling_topk": 5, "seed": 3}


def test_two_workers_run_two_batches_at_once():
    running, release = threading.Semaphore(0), threading.Event()
    batches = []

    def translate(sentences, prefixes, options):
        batches.append(sentences)
        running.release()
        release.wait(10)
        return sentences

    batcher = Batcher(translate, max_batch_sentences=2, workers=2)
    futures = [batcher.submit(Job([text], None, SearchOptions())) for text in "abcde"]
    assert running.acquire(timeout=5) and running.acquire(timeout=5)  # Two calls at once.
    release.set()
    assert [future.result(5) for future in futures] == [[text] for text in "abcde"]
    assert sorted(map(len, batches)) in ([1, 2, 2], [1, 1, 1, 2], [1, 1, 1, 1, 1])
    batcher.close(5)
