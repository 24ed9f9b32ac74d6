"""Batching across requests: the sentences of concurrent requests that ask for the same search
are merged into one engine call, which cuts them into the engine's length buckets
(`keras_transformer.translation.run_translation`).

One `Batcher` per served model owns a bounded queue and `workers` threads, each running one
engine call at a time. While the engines run, new requests wait in the queue; a free thread
takes the oldest waiting request and every later one with the same `SearchOptions`, up to
`max_batch_sentences` sentences, and translates them in one call. Two threads keep two cores
busy with a compiled search (XLA, `jax.jit`: about one core each), as the `Translator` does
with the batches of one call (`concurrent_batches`). A full queue refuses a request at once
(`QueueFull`, the server's 503), and a request whose caller stopped waiting (its time limit)
is skipped if it has not started. Pure Python: the engine call is handed in. `SearchOptions`
(the options that must be equal) is the translation contract's
(`keras_transformer.translation`).
"""

import collections
import concurrent.futures
import dataclasses
import threading
import time

from keras_transformer.serving.settings import DEFAULT_ANNOUNCED_WAIT, DEFAULT_BATCH_SENTENCES
from keras_transformer.translation import SearchOptions  # noqa: F401 (its old home)


class QueueFull(Exception):
    """The queue holds too many sentences to take a request (the server answers 503)."""


class QueueClosed(Exception):
    """The batcher is draining or stopped: it takes no new request."""


@dataclasses.dataclass
class Job:
    """One request's sentences (and prefixes, or `None`), its options and the future its
    results go to: a list of one result per sentence (a `Translation`, or a list of them for
    an n-best request)."""

    sentences: list
    prefixes: list
    options: SearchOptions
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)
    enqueued: float = dataclasses.field(default_factory=time.monotonic)


class Batcher:
    """Merges queued jobs with equal options into batches for one engine, on its own thread.

    Args:
        translate: callable `(sentences, prefixes, options) -> results`: one result per
            sentence (`prefixes` is `None` unless `options.prefixed`).
        max_batch_sentences: int. Most sentences merged into one call (a single larger
            request is still taken whole). Defaults to `DEFAULT_BATCH_SENTENCES` (32, the
            server's `--max-batch-sentences` default).
        max_queue_sentences: int. Most sentences waiting; `submit` raises `QueueFull` beyond.
            Defaults to `1024`.
        max_wait: float. Seconds the thread waits for more requests after the first one
            before it runs a batch that is not full. Defaults to `0.0`: it runs at once, and
            requests that arrive meanwhile make up the next batch.
        on_batch: callable `(sentences, jobs, seconds)` called after each batch (metrics).
            Defaults to `None`.
        name: str. The threads' name. Defaults to `"batcher"`.
        workers: int. Engine calls run at once, each by its own thread. Defaults to `1`.
        announced_wait: float. Seconds a free thread waits for the requests `announce`d
            (being cut into sentences) before it runs a batch that is not full. Defaults to
            `DEFAULT_ANNOUNCED_WAIT` (`0.0`, the server's `--announced-wait-ms` default: run
            at once).
    """

    def __init__(
        self,
        translate,
        max_batch_sentences=DEFAULT_BATCH_SENTENCES,
        max_queue_sentences=1024,
        max_wait=0.0,
        on_batch=None,
        name="batcher",
        workers=1,
        announced_wait=DEFAULT_ANNOUNCED_WAIT,
    ):
        self.translate = translate
        self.max_batch_sentences = max_batch_sentences
        self.max_queue_sentences = max_queue_sentences
        self.max_wait = max_wait
        self.on_batch = on_batch
        self._queue = collections.deque()
        self._queued_sentences = 0
        self._announced = 0
        self.announced_wait = announced_wait
        self._closing = False
        self._condition = threading.Condition()
        self._threads = [
            threading.Thread(target=self._run, name=f"{name} {number}", daemon=True)
            for number in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def depth(self):
        """The number of sentences waiting."""
        return self._queued_sentences

    def submit(self, job):
        """Queues `job` and returns its future. Raises `QueueFull` or `QueueClosed`."""
        with self._condition:
            if self._closing:
                raise QueueClosed("the server is shutting down")
            if self._queued_sentences + len(job.sentences) > self.max_queue_sentences:
                raise QueueFull(
                    f"the queue is full ({self._queued_sentences} sentences waiting, at most "
                    f"{self.max_queue_sentences}): try again later"
                )
            self._queue.append(job)
            self._queued_sentences += len(job.sentences)
            self._condition.notify()
        return job.future

    def announce(self):
        """Says a request for this batcher is on its way (being read or cut into sentences):
        a free thread waits for it (at most `announced_wait`) to batch it with the waiting
        ones. Each `announce` is followed by one `withdraw`, once the request was submitted
        or refused."""
        with self._condition:
            self._announced += 1

    def withdraw(self):
        """The announced request was submitted (or will not be)."""
        with self._condition:
            self._announced -= 1
            if self.announced_wait > 0:  # Else no thread waits for announced requests.
                self._condition.notify_all()

    def close(self, timeout=None):
        """Takes no new job, answers the queued ones, then stops the threads."""
        with self._condition:
            self._closing = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout)

    def _run(self):
        while True:
            with self._condition:
                while not self._queue and not self._closing:
                    self._condition.wait()
                if not self._queue:
                    return  # Closing, and nothing left to answer.
                if self.max_wait > 0 and not self._closing:
                    self._wait_while(self._queue[0].enqueued + self.max_wait, lambda: True)
                if self.announced_wait > 0 and not self._closing:
                    deadline = time.monotonic() + self.announced_wait
                    self._wait_while(deadline, lambda: self._announced > 0)
                jobs = self._take()
            if jobs:
                self._process(jobs)

    def _wait_while(self, deadline, waiting):
        """Waits (under the lock) while the batch is not full and `waiting()`, until the
        `time.monotonic()` `deadline`."""
        while self._queued_sentences < self.max_batch_sentences and waiting():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._condition.wait(left)

    def _take(self):
        """The oldest job and the later ones with its options, up to `max_batch_sentences`
        (under the lock); jobs whose caller gave up are dropped."""
        jobs, kept, options, count = [], collections.deque(), None, 0
        while self._queue:
            job = self._queue.popleft()
            if options is None or (
                job.options == options and count + len(job.sentences) <= self.max_batch_sentences
            ):
                self._queued_sentences -= len(job.sentences)
                if not job.future.set_running_or_notify_cancel():
                    continue  # Cancelled: its request timed out while it waited.
                options = job.options
                jobs.append(job)
                count += len(job.sentences)
            else:
                kept.append(job)
        self._queue = kept
        return jobs

    def _process(self, jobs):
        sentences = [sentence for job in jobs for sentence in job.sentences]
        prefixes = None
        if jobs[0].options.prefixed:
            prefixes = [prefix for job in jobs for prefix in job.prefixes]
        start = time.perf_counter()
        try:
            results = self.translate(sentences, prefixes, jobs[0].options)
        except Exception as error:  # Every request of the batch gets the engine's error.
            for job in jobs:
                job.future.set_exception(error)
            return
        finally:
            if self.on_batch is not None:
                self.on_batch(len(sentences), len(jobs), time.perf_counter() - start)
        offset = 0
        for job in jobs:
            job.future.set_result(results[offset : offset + len(job.sentences)])
            offset += len(job.sentences)
