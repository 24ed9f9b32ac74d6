"""Tests for the TensorFlow Serving side of `keras_transformer.export`: the `<base>/<version>/`
layout, the warm-up requests (`assets.extra/tf_serving_warmup_requests`) and the
`translate_n_best` signature.

TensorFlow backend only (a SavedModel is traced there). Latencies with and without the warm-up
replay are measured by `benchmarks/serving_warmup.py`, not asserted here.
"""

import os

import keras
import numpy as np
import pytest

from keras_transformer import Transformer
from keras_transformer.cli import main
from keras_transformer.documents.texts import translate_texts
from keras_transformer.engines import load_translator
from keras_transformer.export import (
    N_BEST_SIGNATURE_NAME,
    PREFIX_SIGNATURE_NAME,
    SIGNATURE_NAME,
    WARMUP_PATH,
    export_saved_model,
    read_metadata,
    read_warmup_requests,
)
from keras_transformer.translator import Translator
from tests.export_helpers import BAD_INPUTS, SENTENCES

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="SavedModel export runs on the TensorFlow backend",
)


def two_bucket_translator(directory):
    """An untrained one-layer Translator with source buckets 4 and 8, saved to a file."""
    from keras_transformer.text import train_tokenizer

    tokenizer = train_tokenizer(SENTENCES, vocabulary_size=100)
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), num_layers=1)
    translator = Translator(
        model,
        tokenizer,
        max_source_length=8,
        bucket_boundaries=(4,),
        extra_length=4,
        beam_size=1,
        jit_compile=False,
    )
    translator.save(directory / "small.keras")
    return translator


def serve(signature, strings):
    import tensorflow as tf

    outputs = signature(inputs=tf.constant(strings, tf.string))
    texts = np.vectorize(lambda text: text.decode("utf-8"), otypes=[object])(
        outputs["translations"].numpy()
    )
    return texts.tolist(), outputs["scores"].numpy()


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    """`(translator, base)`: the two-bucket translator exported as version 1 of `base`, with
    warm-up requests for batches of up to 2 rows."""
    directory = tmp_path_factory.mktemp("versioned")
    translator = two_bucket_translator(directory)
    base = directory / "models" / "numbers"
    make_generator = translator.make_generator
    translator.make_generator = lambda *args: GENERATORS.append(make_generator(*args)) or GENERATORS[-1]
    # Not compiled: replaying checks the requests, not XLA (benchmarks/serving_warmup.py times it).
    path = export_saved_model(translator, base, version=1, warmup_batch_size=2, jit_compile=False)
    del translator.make_generator
    assert path == os.path.join(str(base), "1")
    return translator, base


GENERATORS = []  # The generator that `versioned`'s export made.


@pytest.mark.slow
def test_an_export_traces_each_search_once(versioned):
    # Three signatures share two searches per bucket (beam; beam continuing a prefix). Each is
    # traced once, although the archive traces every signature once to list its variables
    # and `tf.saved_model.save` once more under its save context.
    translator, _ = versioned
    [generator] = GENERATORS
    assert len(translator.bucket_boundaries) == 2
    assert generator.trace_count == 2 * 2


@pytest.mark.slow
def test_version_layout_and_refusing_an_existing_version(
    versioned, tmp_path, monkeypatch, capsysbinary
):
    translator, base = versioned
    assert sorted(os.listdir(base)) == ["1"]  # Nothing else: no temporary left behind.
    assert (base / "1" / "saved_model.pb").is_file()
    assert (base / "1" / WARMUP_PATH).is_file()
    assert read_metadata(base / "1")["warmup_batch_size"] == 2
    before = (base / "1" / "saved_model.pb").read_bytes()
    with pytest.raises(ValueError, match=r"Version 1 already exists.*Received: version=1"):
        export_saved_model(translator, base, version=1)
    assert (base / "1" / "saved_model.pb").read_bytes() == before
    for version in (0, -1, "2", 1.0, True):
        with pytest.raises(ValueError, match=r"`version` must be an int >= 1"):
            export_saved_model(translator, base, version=version)
    # The command refuses it too (before loading anything)...
    keras_path = str(base.parent.parent / "small.keras")
    assert main(["export", keras_path, str(base), "--version", "1"]) == 2  # one line, exit 2
    assert sorted(os.listdir(base)) == ["1"]
    assert main(["export", keras_path, str(tmp_path), "--format", "ctranslate2",
                 "--num-hypotheses", "2"]) == 2  # fmt: skip
    # `translate` given the base path serves its highest version, as a model server does:
    # with `--no-segment` one line is one call, as the Keras translator's; by default whole
    # texts (the parts the engine truncated past its 8 pieces cut and sent again), as the
    # library's `translate_texts` of that version.
    capsysbinary.readouterr()
    assert main(["translate", "--model", str(base), "--no-segment", *SENTENCES[:2]]) == 0
    lines = capsysbinary.readouterr().out.decode("utf-8").splitlines()
    assert lines == translator(SENTENCES[:2])
    assert main(["translate", "--model", str(base), *SENTENCES[:2]]) == 0
    lines = capsysbinary.readouterr().out.decode("utf-8").splitlines()
    engine = load_translator(str(base / "1"))
    assert lines == [result.text for result in translate_texts(engine, SENTENCES[:2])]
    assert not any(result.truncated for result in translate_texts(engine, SENTENCES[:2]))
    # ...and passes its options on (the export itself is the one tested above).
    calls = []
    monkeypatch.setattr(
        "keras_transformer.export.export_saved_model",
        lambda *args, **kwargs: calls.append((args, kwargs)) or "written",
    )
    options = ["--version", "3", "--overwrite", "--num-hypotheses", "2", "--warmup-batch-size", "4"]
    options += ["--max-request-size", "64"]
    assert main(["export", keras_path, str(base), *options]) == 0
    assert calls[0][0] == (keras_path, str(base))
    expected = {"version": 3, "overwrite": True, "num_hypotheses": 2, "warmup_batch_size": 4}
    assert {**expected, "max_request_size": 64}.items() <= calls[0][1].items()
    # Without the flag the exporter's default stands (not passed as `None`).
    assert main(["export", keras_path, str(base), "--version", "4"]) == 0
    assert "max_request_size" not in calls[1][1]
    capsysbinary.readouterr()
    for refused in (["--format", "ctranslate2"], ["--format", "marian"]):
        assert main(["export", keras_path, str(tmp_path / "x"), *refused,
                     "--max-request-size", "8"]) == 2  # fmt: skip
        assert b"--max-request-size` applies to `--format saved_model` only" in (
            capsysbinary.readouterr().err
        )


@pytest.mark.slow
def test_warmup_requests_cover_every_shape_and_replay(versioned):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

    translator, base = versioned
    requests = read_warmup_requests(base / "1")
    preprocessor = translator.preprocessor
    shapes = []
    for name, inputs in requests:
        prefixed = name == PREFIX_SIGNATURE_NAME
        assert sorted(inputs) == (["inputs", "target_prefix"] if prefixed else ["inputs"])
        strings = inputs["inputs"].tolist()
        encoded, truncated = preprocessor.encode_source(strings)
        assert not truncated.numpy().any()
        shapes.append(tuple(preprocessor.pad_batch(encoded).shape))
        if prefixed:  # One word piece: the source's bucket is the search's.
            pieces = preprocessor.targets.tokenize(inputs["target_prefix"].tolist()).to_list()
            assert [len(row) for row in pieces] == [1] * len(strings)
    # One request per (batch rows, bucket) that a request of at most 2 rows compiles, one
    # that sets up the n-best signature, and the same shapes for the prefixed search.
    every_shape = [(1, 4), (2, 4), (1, 8), (2, 8)]
    assert shapes == [*every_shape, (1, 4), *every_shape]
    assert [name for name, _ in requests] == (
        [SIGNATURE_NAME] * 4 + [N_BEST_SIGNATURE_NAME] + [PREFIX_SIGNATURE_NAME] * 4
    )

    signatures = tf.saved_model.load(str(base / "1")).signatures
    for name, inputs in requests:
        if name == PREFIX_SIGNATURE_NAME:
            outputs = signatures[name](**{key: tf.constant(value) for key, value in inputs.items()})
            texts = [text.decode() for text in outputs["translations"].numpy()]
            expected = translator.translate(
                [text.decode() for text in inputs["inputs"]],
                target_prefix=[text.decode() for text in inputs["target_prefix"]],
            )
            assert texts == [translation.text for translation in expected]
            continue
        texts, _ = serve(signatures[name], inputs["inputs"])
        if name == N_BEST_SIGNATURE_NAME:  # Beam 1: one column.
            texts = [row[0] for row in texts]
        assert texts == translator([text.decode() for text in inputs["inputs"]])


@pytest.mark.slow
def test_n_best_signature_is_the_beam_ranking(exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    translator, _, saved_model_path = exported
    loaded = tf.saved_model.load(str(saved_model_path))
    default, n_best = loaded.signatures[SIGNATURE_NAME], loaded.signatures[N_BEST_SIGNATURE_NAME]
    assert set(default.structured_outputs) == {"translations", "scores", "truncated"}
    assert default.structured_input_signature == n_best.structured_input_signature
    beam_size = read_metadata(saved_model_path)["num_hypotheses"]
    assert beam_size == translator.beam_size == 4

    sentences = SENTENCES[:2]
    texts, scores = serve(n_best, sentences)
    assert np.array(texts).shape == scores.shape == (2, beam_size)
    # Column 0 is `serving_default`'s output.
    best_texts, best_scores = serve(default, sentences)
    assert [row[0] for row in texts] == best_texts
    np.testing.assert_allclose(scores[:, 0], best_scores, atol=1e-4)
    # Every column is the beam search's hypothesis of that rank, best first.
    preprocessor = translator.preprocessor
    encoded, _ = preprocessor.encode_source(sentences)
    for row, sentence in enumerate(sentences):
        sequences, beam_scores = translator.generator(
            preprocessor.pad_batch(encoded[row : row + 1]).numpy(),
            beam_size=beam_size,
            alpha=translator.alpha,
        )
        expected = preprocessor.generate_postprocess(sequences[0]).numpy()
        assert texts[row] == [text.decode() for text in expected], sentence
        np.testing.assert_allclose(scores[row], beam_scores[0], atol=1e-4)
        assert np.all(np.diff(scores[row]) <= 0)
    # Inputs without a token give "" and 0.0 in every column.
    texts, scores = serve(n_best, BAD_INPUTS[:2])
    assert texts == [[""] * beam_size] * 2 and not scores.any()


def test_n_best_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="num_hypotheses=5, beam_size=4"):
        export_saved_model("translator.keras", tmp_path / "out", beam_size=4, num_hypotheses=5)
    with pytest.raises(ValueError, match="warmup_batch_size=0"):
        export_saved_model("translator.keras", tmp_path / "out", warmup_batch_size=0)
