"""A served model on every backend: the warm-up runs the searches the backend compiles, the
batcher's merged calls give the translator's own translations, and a version that fails to
load is logged once while the served one stays (tests/serving/test_hostile.py: one copied in
two halves)."""

import shutil
import threading

import keras
import pytest

from keras_transformer.serving import Batcher, Job, SearchOptions, ServedModel
from keras_transformer.serving.models import ModelSpec, served_version, warm
from tests.export_helpers import SENTENCES


def test_warm_up_then_merged_batches_translate_as_the_translator(number_translator, tmp_path):
    translator, _, keras_path = number_translator
    shutil.copy(keras_path, tmp_path / "translator.keras")
    model = ServedModel(ModelSpec(str(tmp_path)), max_batch_sentences=2)
    model.load()
    assert model.version is None and model.directory == str(tmp_path)
    calls = model.warm_up()
    backend = keras.backend.backend()
    # TensorFlow traces a search per (bucket, rows): buckets 16 and 32, 1 and 2 rows, and
    # the n-best request; JAX without jit_compile and PyTorch compile nothing.
    assert calls == (5 if backend == "tensorflow" else 1)
    gate, entered = threading.Event(), threading.Event()
    batches = []

    def translate(sentences, prefixes, options):
        entered.set()
        gate.wait(10)
        batches.append(len(sentences))
        return model.translate(sentences, prefixes, options)

    batcher = Batcher(translate, max_batch_sentences=8)
    held = batcher.submit(Job(["tres"], None, SearchOptions()))
    assert entered.wait(10)  # The first batch runs; the next requests wait behind it.
    futures = [batcher.submit(Job([sentence], None, SearchOptions())) for sentence in SENTENCES]
    n_best = batcher.submit(Job(SENTENCES[:2], None, SearchOptions(num_hypotheses=2)))
    gate.set()
    assert [t.text for t in held.result(60)] == [translator("tres")]
    assert [future.result(60)[0].text for future in futures] == translator(SENTENCES)
    assert [[h.text for h in row] for row in n_best.result(60)] == [
        [h.text for h in row] for row in translator.translate(SENTENCES[:2], num_hypotheses=2)
    ]
    assert batches == [1, len(SENTENCES), 2]
    batcher.close(10)


class _Recording:
    """An engine that records the number of sentences of each `run`."""

    def __init__(self, engine):
        self.engine, self.runs = engine, []

    def run(self, sentences, options=None, prefixes=None):
        self.runs.append(len(sentences))
        return self.engine.run(sentences, options, prefixes)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_a_background_warm_up_serves_in_warm_sizes_and_no_request_compiles(
    number_translator, tmp_path
):
    translator, _, keras_path = number_translator
    shutil.copy(keras_path, tmp_path / "translator.keras")
    model = ServedModel(ModelSpec(str(tmp_path)), max_batch_sentences=4, background_warmup=True)
    model.load()
    model.engine = engine = _Recording(model.engine)
    expected = translator(SENTENCES[:5])
    calls = model.warm_up()
    if not engine.capabilities.compiles_shapes:  # One call loads what is lazy: nothing left.
        assert calls == 1 and model.warm_sentences is None and model.warm_rest() == 0
        return
    # Buckets 16 and 32 (the number model's), one sentence each, and the n-best call; the
    # batches of 2 and 4 wait for the background.
    assert (calls, engine.runs, model.warm_sentences) == (3, [1, 1, 1], 1)
    traced = engine.generator.trace_count
    engine.runs.clear()
    texts = [t.text for t in model.translate(SENTENCES[:5], None, SearchOptions())]
    assert (texts, engine.runs) == (expected, [1] * 5)
    assert engine.generator.trace_count == traced  # No request compiled a search.
    lines = []
    assert model.warm_rest(lines.append) == 4  # 2 and 4 sentences, in both buckets.
    assert [line.split(": ")[1] for line in lines] == [
        "warm for 2 sentences per call",
        "warm for 4 sentences per call",
    ]
    assert model.warm_sentences is None and engine.generator.trace_count > traced
    traced = engine.generator.trace_count
    engine.runs.clear()
    # More sentences than the warm-up's largest batch: one call, searched in batches of 4
    # (`batch_size` bounded by `max_batch_sentences`), not a larger shape compiled.
    texts = [t.text for t in model.translate(SENTENCES[:5], None, SearchOptions())]
    assert (texts, engine.runs, engine.generator.trace_count) == (expected, [5], traced)
    assert engine.batch_size == 4 and translator.batch_size > 4


@pytest.mark.one_backend
def test_a_version_that_fails_to_load_is_logged_once_and_the_served_one_stays(
    number_translator, tmp_path
):
    _, _, keras_path = number_translator
    (tmp_path / "1").mkdir()
    shutil.copy(keras_path, tmp_path / "1" / "translator.keras")
    lines = []
    model = ServedModel(ModelSpec(str(tmp_path)), log=lines.append, warmup="none")
    model.load()
    assert (model.directory, model.version) == (str(tmp_path / "1"), 1)
    assert model.update() is None  # Nothing newer.
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "translator.keras").write_bytes(b"not a zip archive")
    engine = model.engine
    # Seen once (its files may still be arriving), then tried and failed, then left alone.
    assert [model.update() for _ in range(4)] == [None] * 4
    assert model.engine is engine and model.version == 1
    assert len(lines) == 1 and "version 2" in lines[0] and "still serving version 1" in lines[0]
    (tmp_path / "3").mkdir()
    shutil.copy(keras_path, tmp_path / "3" / "translator.keras")
    assert model.update() is None  # Tried once its files stayed the same for a poll.
    assert model.update() == 3 and model.directory == str(tmp_path / "3")
    assert "serving version 3" in lines[-1]
    assert warm(model.engine, 4, "none") == 0
    assert served_version("hf://user/model") == ("hf://user/model", None)


@pytest.mark.one_backend
def test_a_saved_model_replays_its_warm_up_requests_and_ctranslate2_warms_with_one(
    exported, tmp_path
):
    from keras_transformer.export import export_ctranslate2, read_warmup_requests

    translator, _, saved_model_path = exported
    model = ServedModel(ModelSpec(str(saved_model_path)), warmup="none")
    model.load()
    records = read_warmup_requests(saved_model_path)
    calls = model.engine.warmup_requests(32)
    assert len(calls) == len(records)  # The export's own requests, prefixed ones included.
    assert sum(call.prefixes is not None for call in calls) == len(records) // 2
    expected = translator(SENTENCES)
    options = SearchOptions(num_hypotheses=2)
    assert [row[0].text for row in model.translate(SENTENCES, None, options)] == expected
    export_ctranslate2(translator, tmp_path / "ct2")
    model = ServedModel(ModelSpec(str(tmp_path / "ct2")))
    model.load()
    assert model.warm_up() == 1  # CTranslate2 compiles nothing.
    assert [t.text for t in model.translate(SENTENCES, None, SearchOptions())] == expected
