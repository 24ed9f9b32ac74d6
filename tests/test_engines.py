"""`keras_transformer.engines`: one way from a path to something that translates.

The Keras engine is tested on the committed 0.1.0 fixture (a tiny trained Translator), copied
into each layout a user has: a `.keras` file, a training run's directory, a preset directory
and a model server's base path. The SavedModel engine runs on the `exported` fixture
(TensorFlow); the CTranslate2 engine has its own tests (`tests/export/test_ctranslate2.py`).
"""

import os
import shutil

import keras
import pytest

from keras_transformer import Translator, engines
from keras_transformer.export import latest_version
from keras_transformer.translation import (
    Capabilities,
    Engine,
    EngineBase,
    SearchOptions,
    Translation,
)

# Choosing and opening an engine is backend-independent: one_backend. A Translator loaded
# under each backend is tested in tests/test_translator.py and tests/saving/.
pytestmark = pytest.mark.one_backend

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "translator_v0_1.keras")
SOURCES = ["dos mil trescientos ochenta y tres", "cuarenta y dos", ""]


@pytest.fixture(scope="module")
def reference():
    translator = Translator.load(FIXTURE)
    return translator, translator(SOURCES)


def test_every_keras_layout_opens_the_same_translator(reference, tmp_path):
    translator, expected = reference
    run = tmp_path / "run"  # A training run's output directory (and its `best/`).
    run.mkdir()
    shutil.copy(FIXTURE, run / "translator.keras")
    preset = translator.save_to_preset(tmp_path / "preset")
    base = tmp_path / "served"  # A model server's base path: the highest version opens.
    translator.save_to_preset(base / "2")
    (base / "10").mkdir()
    shutil.copy(FIXTURE, base / "10" / "translator.keras")
    for path in (FIXTURE, run, preset, base):
        assert engines.detect_engine(latest_version(path)) == "keras"
        loaded = engines.load_translator(path)
        assert isinstance(loaded, Translator), path
        assert loaded(SOURCES) == expected, path
        assert engines.load_translator(path, engine="keras")(SOURCES) == expected


def test_files_name_their_engine(tmp_path):
    for name, engine in (
        ("saved_model.pb", "saved_model"),
        ("keras_transformer.json", "ctranslate2"),
        ("translator.keras", "keras"),
        ("metadata.json", "keras"),
    ):
        directory = tmp_path / name.replace(".", "_")
        directory.mkdir()
        (directory / name).write_text("{}")
        assert engines.detect_engine(directory) == engine


def test_what_holds_no_translator_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        engines.load_translator(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holding no translator.*Received: path=.*empty"):
        engines.load_translator(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"`engine` must be.*Received: engine='onnx'"):
        engines.load_translator(FIXTURE, engine="onnx")
    # A forced engine reads its own files only.
    with pytest.raises(ValueError, match="a directory with neither"):
        engines.load_translator(tmp_path / "empty", engine="keras")


def test_search_options_are_checked_against_the_engine(reference):
    translator, _ = reference  # beam_size=3
    engines.check_options(translator, None, 3)
    with pytest.raises(ValueError, match="Received: num_hypotheses=4"):
        engines.check_options(translator, None, 4)
    with pytest.raises(ValueError, match="Received: beam_size=0"):
        engines.check_options(translator, 0, None)
    # A sampling option alone samples with beam size 1 on every engine (before: "needs
    # beam_size=1"); a beam size above 1 with it is refused.
    # An engine of the protocol with the default checks (values and capabilities only).
    ctranslate2_like = type(
        "Minimal", (EngineBase,), dict(beam_size=4, alpha=0.6, capabilities=Capabilities())
    )()
    for engine in (translator, ctranslate2_like):
        engines.check_options(engine, sampling_topk=3)
        with pytest.raises(ValueError, match=r"Received: beam_size=2"):
            engines.check_options(engine, 2, sampling_topk=3)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the SavedModel is exported on TensorFlow"
)
def test_a_saved_model_translates_as_its_translator(exported):
    translator, _, saved_model_path = exported
    sentences = ["dos mil", "", "cuarenta y dos"]
    served = engines.load_translator(saved_model_path)
    assert isinstance(served, engines.SavedModelTranslator)
    assert served(sentences) == translator(sentences)
    assert served("dos mil") == translator("dos mil")
    assert served.max_request_size == 1024  # The export's default, recorded in its metadata.
    served.max_request_size = 2  # A longer list goes in requests the export accepts.
    assert served(sentences * 2) == translator(sentences * 2)
    expected = translator.translate(sentences, num_hypotheses=2)
    for hypotheses, wanted in zip(served.translate(sentences, num_hypotheses=2), expected, strict=True):
        assert [h.text for h in hypotheses] == [w.text for w in wanted]
        assert [h.score for h in hypotheses] == pytest.approx([w.score for w in wanted], abs=1e-4)
        assert all(isinstance(h, Translation) and h.tokens is None for h in hypotheses)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the SavedModel is exported on TensorFlow"
)
def test_a_saved_models_prefix_signature_continues_as_its_translator(exported):
    translator, _, saved_model_path = exported
    sentences = ["dos mil trescientos", "", "cuarenta y dos", "tres"]
    prefixes = ["two thousand", "x", "", "four"]
    served = engines.load_translator(saved_model_path)
    expected = translator.translate(sentences, target_prefix=prefixes)
    received = served.translate(sentences, target_prefix=prefixes)
    assert [r.text for r in received] == [e.text for e in expected]
    assert [r.score for r in received] == pytest.approx([e.score for e in expected], abs=1e-4)
    assert received[0].text.startswith("two thousand") and received[1].text == ""
    with pytest.raises(ValueError, match="cannot sample"):
        engines.check_options(served, sampling_topk=3)


def test_every_engine_follows_the_protocol(reference, tmp_path):
    from keras_transformer.export import export_ctranslate2

    translator, expected = reference
    export_ctranslate2(translator, tmp_path / "ct2")
    ctranslate2 = engines.load_translator(tmp_path / "ct2")
    for engine in (translator, ctranslate2):
        assert isinstance(engine, Engine), type(engine)
        # `run` with options is `translate` with their arguments.
        options = SearchOptions(beam_size=2, num_hypotheses=2)
        found = engine.run(SOURCES, options)
        wanted = engine.translate(SOURCES, beam_size=2, num_hypotheses=2)
        assert [[h.text for h in row] for row in found] == [[h.text for h in row] for row in wanted]
        assert [row.text for row in engine.run(SOURCES)] == expected
        prefixed = engine.run(SOURCES[:1], SearchOptions(prefixed=True), ["two"])
        assert prefixed[0].text.startswith("two")
        # Declared, not probed: both search everything and score.
        assert engine.capabilities.sampling and engine.capabilities.scoring
        assert engine.concurrency >= 1
        assert engine.count_tokens(["dos mil", ""])[1] == 0
        assert engine.max_source_pieces == engine.max_source_length - 2
        with pytest.raises(ValueError, match="Received: beam_size=0"):
            engine.check(SearchOptions(beam_size=0))
        requests = engine.warmup_requests(4)
        assert requests and all(len(request.sentences) <= 4 for request in requests)
    assert not ctranslate2.capabilities.compiles_shapes and len(ctranslate2.warmup_requests(4)) == 1


def test_the_default_checks_follow_the_declared_capabilities():
    engine = type(
        "Fixed",
        (EngineBase,),
        dict(
            beam_size=4,
            alpha=0.6,
            capabilities=Capabilities(
                fixed_beam_size=4, max_hypotheses=2, sampling=False, prefixes=False,
                alignments=False, scoring=False,
            ),
        ),
    )()
    engine.check(SearchOptions(beam_size=4, num_hypotheses=2))
    for options, message in (
        (SearchOptions(beam_size=3), r"beam size 4 only. Received: beam_size=3"),
        (SearchOptions(num_hypotheses=3), r"at most 2 hypotheses .*Received: num_hypotheses=3"),
        (SearchOptions(sampling_topk=5), r"no sampling. Received: sampling asked"),
        (SearchOptions(prefixed=True, alignments=True), r"target_prefix, alignments\."),
    ):
        with pytest.raises(ValueError, match=message):
            engine.check(options)


def test_a_path_is_resolved_once(tmp_path, monkeypatch):
    from keras_transformer.engines import location

    base = tmp_path / "served"
    (base / "3").mkdir(parents=True)
    shutil.copy(FIXTURE, base / "3" / "translator.keras")
    looked = []
    resolve = location.latest_version
    monkeypatch.setattr(location, "latest_version", lambda path: looked.append(path) or resolve(path))
    found = engines.locate(base)
    assert found == engines.Location(str(base / "3"), "keras", 3) and looked == [str(base)]
    assert isinstance(engines.open_engine(found), Translator) and len(looked) == 1
    with pytest.raises(ValueError, match="Received: location='served'"):
        engines.open_engine("served")


@pytest.mark.all_backends
def test_a_long_text_comes_back_whole_on_every_engine(reference, tmp_path, request):
    # A 5,000-character line of number sentences: far more than the fixture's 32-token
    # sources. Every sentence is translated (the pieces counted in and out), none truncated.
    from keras_transformer.documents.texts import plan_texts, translate_texts
    from keras_transformer.export import export_ctranslate2

    translator, _ = reference
    sentence = "Dos mil trescientos ochenta y tres. Cuarenta y dos."
    line = " ".join([sentence] * 100)[:5000].rsplit(".", 1)[0] + "."
    found = [translator]
    if keras.backend.backend() == "tensorflow":
        export_ctranslate2(translator, tmp_path / "ct2")
        found.append(engines.load_translator(tmp_path / "ct2"))
        _, _, saved_model_path = request.getfixturevalue("exported")
        found.append(engines.load_translator(saved_model_path))
    for engine in found:
        translation = translate_texts(engine, line, language="es")
        assert not translation.truncated, type(engine)
        plan = plan_texts([line], "es")
        assert len(plan.sentences) == line.count(".")  # Every sentence sent.
        pieces = engine.translate(plan.sentences[:2])
        assert translation.text.startswith(" ".join(piece.text for piece in pieces))
        # As many sentences out as in: each sentence's translation, in order.
        expected = [piece.text for piece in engine.translate(plan.sentences)]
        assert translation.text.split() == " ".join(expected).split()
