"""The searches a server compiles are the operator's choice, not the clients': beam sizes
outside `serve --beam-sizes`, and sampling unless `--sampling`, are 400s naming what is
allowed; what is allowed is compiled at warm-up, and no request compiles anything after it
(sampling's values are inputs of one compiled search)."""

import shutil

import keras
import pytest
from starlette.testclient import TestClient

from keras_transformer.cli import main
from keras_transformer.serving import SearchPolicy, ServedModel, ServerState, Settings, create_app
from keras_transformer.serving.models import ModelSpec
from keras_transformer.translation import SearchOptions


class Engine:
    beam_size = 4


def test_the_policy_allows_the_models_beam_the_named_ones_and_sampling_when_on():
    engine = Engine()
    policy = SearchPolicy()
    policy.check(engine, SearchOptions())
    policy.check(engine, SearchOptions(beam_size=4, num_hypotheses=3))
    with pytest.raises(ValueError, match=r"beam_size must be one of 4 .*Received: beam_size=5"):
        policy.check(engine, SearchOptions(beam_size=5))
    with pytest.raises(ValueError, match=r"sampling .* is off .*Received: sampling_topk=3"):
        policy.check(engine, SearchOptions(sampling_topk=3))
    policy = SearchPolicy(beam_sizes=(1, 8), sampling=True)
    assert policy.allowed_beam_sizes(engine) == (1, 4, 8)
    for options in (
        SearchOptions(beam_size=1),
        SearchOptions(beam_size=8),
        SearchOptions(sampling_temperature=0.3),
        SearchOptions(sampling_topp=0.9, beam_size=1),
    ):
        policy.check(engine, options)
    with pytest.raises(ValueError, match=r"one of 1, 4, 8 .*Received: beam_size=2"):
        policy.check(engine, SearchOptions(beam_size=2))
    # Sampling with a wider beam is the engine's refusal (it samples with beam size 1).
    policy.check(engine, SearchOptions(sampling_topk=2, beam_size=8))


def test_serve_reads_beam_sizes_and_sampling(monkeypatch):
    seen = {}

    def serve(models, settings, host, port, poll_seconds):
        seen["policy"] = models[0].policy
        return 0

    monkeypatch.setattr("keras_transformer.serving.serve", serve)
    assert main(["serve", "--model", "x.keras", "--beam-sizes", "8,1,8", "--sampling"]) == 0
    assert seen["policy"] == SearchPolicy(beam_sizes=(1, 8), sampling=True)
    assert main(["serve", "--model", "x.keras"]) == 0
    assert seen["policy"] == SearchPolicy()
    for bad in ("0", "1,x", "65", ""):
        with pytest.raises(SystemExit):
            main(["serve", "--model", "x.keras", "--beam-sizes", bad])


def test_hostile_search_options_compile_nothing_after_the_warm_up(number_translator, tmp_path):
    translator, _, keras_path = number_translator
    shutil.copy(keras_path, tmp_path / "translator.keras")
    policy = SearchPolicy(beam_sizes=(1,), sampling=True)
    model = ServedModel(ModelSpec(str(tmp_path)), max_batch_sentences=1, policy=policy)
    model.load()
    calls = model.warm_up()
    compiled = keras.backend.backend() == "tensorflow"  # (The fixture's JAX search is eager.)
    # Buckets 16 and 32 × (beam 4, beam 1, sampling by temperature, sampling with a cut) and
    # the n-best call; where nothing compiles per shape, one call of each search.
    assert calls == (9 if compiled else 4)
    traces = model.engine.generator.trace_count
    state = ServerState([model], Settings())
    state.set_status("ready")
    statuses = []
    with TestClient(create_app(state)) as client:

        def post(**fields):
            body = {"q": "dos mil", "source": "es", "target": "en", **fields}
            answer = client.post("/translate", json=body)
            statuses.append(answer.status_code)
            return answer

        # 100 option sets a hostile client might cycle through.
        for beam_size in range(2, 40):
            if beam_size != translator.beam_size:
                answer = post(beam_size=beam_size)
                assert answer.status_code == 400
                allowed = f"beam_size must be one of 1, {translator.beam_size} on this server"
                assert allowed in answer.json()["error"]
        for step in range(30):
            post(sampling_temperature=0.2 + step / 10, seed=step)
        for step in range(30):
            post(sampling_topk=1 + step, sampling_topp=0.5 + step / 100, seed=step)
        for beam_size in (1, translator.beam_size):
            answer = post(beam_size=beam_size, alternatives=0)
            assert answer.json()["translatedText"] == translator("dos mil", beam_size=beam_size)
    state.close(10)
    assert statuses.count(400) == 37 and statuses.count(200) == 62, statuses
    if compiled:
        assert model.engine.generator.trace_count == traces  # Nothing compiled after warm-up.
