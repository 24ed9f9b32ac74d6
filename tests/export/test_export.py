"""Tests for `keras_transformer.export`: a SavedModel that serves strings, and `model.export()`.

Everything here runs on the TensorFlow backend, except `test_export_from_another_backend`,
which runs on JAX and PyTorch (it trains and saves there, and exports in a
`KERAS_BACKEND=tensorflow` subprocess).

The SavedModel comes from the `exported` fixture of `tests/conftest.py`, built once per test
run (also for `tests/cli/`): a tiny Transformer trained for a few seconds on
Spanish -> English number words, wrapped in a `Translator` with `max_source_length=32`, saved and exported.
"""

import concurrent.futures
import json
import os
import random
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest

from keras_transformer import Transformer
from keras_transformer.export import export_saved_model, read_metadata
from keras_transformer.translator import Translator
from tests.export_helpers import (
    BAD_INPUTS,
    MAX_SOURCE_LENGTH,
    SENTENCES,
    TRUNCATED,
)

BACKEND = keras.backend.backend()
tensorflow_only = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="SavedModel export runs on the TensorFlow backend"
)
BIN = os.path.dirname(sys.executable)
# Loads a SavedModel where `keras` and `keras_transformer` cannot be imported, with only the
# tensorflow-text op libraries (importing the `tensorflow_text` package imports Keras itself),
# translates the JSON list on stdin and prints the results and the Keras modules loaded.
FRESH_PROCESS_SCRIPT = r"""
import glob, importlib.util, json, os, sys
for name in ("keras", "keras_transformer", "tf_keras"):
    sys.modules[name] = None  # `import keras` now fails.
import tensorflow as tf
text_package = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
for library in sorted(glob.glob(os.path.join(text_package, "python", "ops", "*.so"))):
    tf.load_op_library(library)
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
outputs = serve(inputs=tf.constant(json.load(sys.stdin), tf.string))
print(json.dumps({
    "translations": [t.decode("utf-8") for t in outputs["translations"].numpy()],
    "scores": outputs["scores"].numpy().tolist(),
    "modules": sorted(
        m for m, module in sys.modules.items()
        if module is not None and m.split(".")[0] in ("keras", "keras_transformer", "tf_keras")
    ),
}))
"""


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def serving_signature(exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    _, _, saved_model_path = exported
    loaded = tf.saved_model.load(str(saved_model_path))
    return loaded, loaded.signatures["serving_default"]


@pytest.fixture(scope="module")
def expected(exported):
    """The in-process Translator's translations of SENTENCES and BAD_INPUTS."""
    translator, _, _ = exported
    return translator(SENTENCES), translator(BAD_INPUTS)


def serve(signature, strings):
    import tensorflow as tf

    outputs = signature(inputs=tf.constant(strings, tf.string))
    texts = [text.decode("utf-8") for text in outputs["translations"].numpy()]
    return texts, outputs["scores"].numpy(), outputs["truncated"].numpy()


# --------------------------------------------------------------------------- the signature


@tensorflow_only
def test_signature_takes_and_returns_strings(serving_signature, expected):
    import tensorflow as tf

    _, signature = serving_signature
    _, inputs = signature.structured_input_signature
    assert inputs["inputs"].dtype == tf.string and inputs["inputs"].shape.as_list() == [None]
    assert set(signature.structured_outputs) == {"translations", "scores", "truncated"}
    texts, scores, truncated = serve(signature, SENTENCES)
    assert texts == expected[0]
    assert scores.dtype == np.float32 and np.all(scores <= 0) and not truncated.any()
    # One sentence at a time gives the same strings as the whole batch.
    assert [serve(signature, [sentence])[0][0] for sentence in SENTENCES[:3]] == texts[:3]


@tensorflow_only
def test_metadata_is_stored_next_to_the_saved_model(exported):
    translator, _, saved_model_path = exported
    metadata = read_metadata(saved_model_path)
    assert metadata["max_source_length"] == MAX_SOURCE_LENGTH
    assert metadata["beam_size"] == translator.beam_size == 4
    assert metadata["bucket_boundaries"] == [16, 32]


@tensorflow_only
@pytest.mark.slow
def test_loads_in_a_fresh_process_with_only_tensorflow(exported, expected):
    _, _, saved_model_path = exported
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, str(saved_model_path)],
        input=json.dumps(SENTENCES),
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    assert outputs["modules"] == []  # Neither keras nor keras_transformer was imported.
    assert outputs["translations"] == expected[0]


@tensorflow_only
@pytest.mark.slow
def test_saved_model_cli_show_and_run(exported, expected):
    _, _, saved_model_path = exported
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    show = subprocess.run(
        [os.path.join(BIN, "saved_model_cli"), "show", "--dir", str(saved_model_path), "--all"],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert show.returncode == 0, show.stderr[-3000:]
    signature = show.stdout.split("signature_def['serving_default']")[1]
    for text in ("inputs['inputs']", "DT_STRING", "shape: (-1)", "outputs['translations']"):
        assert text in signature
    # `saved_model_cli run` needs the tensorflow-text ops registered: run its `main` after
    # `import tensorflow_text` (see docs/serving.md).
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tensorflow_text\n"
            "from tensorflow.python.tools.saved_model_cli import main\n"
            "sys.argv[0] = 'saved_model_cli'\n"
            "sys.exit(main())",
            "run",
            "--dir",
            str(saved_model_path),
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--input_exprs",
            f"inputs={json.dumps(SENTENCES[:2])}",
        ],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    translations = run.stdout.split("Result for output key translations:")[1]
    assert repr(expected[0][0].encode("utf-8")) in translations


@tensorflow_only
@pytest.mark.slow
def test_concurrent_requests_match_serial_outputs(serving_signature, capsys):
    _, signature = serving_signature
    # Mixed lengths: every source bucket, empty and odd inputs.
    requests = SENTENCES + BAD_INPUTS + [" ".join(SENTENCES[:3]), " y ".join(SENTENCES)]
    serial = {request: serve(signature, [request])[0][0] for request in requests}
    num_threads, requests_per_thread = 8, 500
    latencies, errors, mismatches = [], [], []
    lock = threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        for _ in range(requests_per_thread):
            request = rng.choice(requests)
            start = time.perf_counter()
            try:
                text = serve(signature, [request])[0][0]
            except Exception as error:  # Counted, never raised in the thread.
                with lock:
                    errors.append(repr(error))
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if text != serial[request]:
                    mismatches.append((request, text))

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
        list(pool.map(client, range(num_threads)))
    wall = time.perf_counter() - start
    assert errors == [] and mismatches == []
    assert len(latencies) == num_threads * requests_per_thread
    p50, p99 = np.percentile(np.array(latencies) * 1000, [50, 99])
    with capsys.disabled():
        print(
            f"\n[serving] {len(latencies)} requests, {num_threads} threads: "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(latencies) / wall:.0f} requests/s"
        )


@tensorflow_only
def test_bad_inputs_give_strings_or_clear_errors(serving_signature, expected):
    import tensorflow as tf

    _, signature = serving_signature
    texts, scores, truncated = serve(signature, BAD_INPUTS)
    assert texts == expected[1]
    assert texts[0] == "" and texts[1] == "" and scores[0] == scores[1] == 0.0
    assert truncated.tolist() == TRUNCATED
    assert np.all(np.isfinite(scores))
    # An empty batch gives empty outputs.
    texts, scores, truncated = serve(signature, [])
    assert texts == [] and scores.shape == (0,) and truncated.shape == (0,)
    # Wrong dtypes and shapes are refused with an error naming the problem...
    refused = (TypeError, ValueError, tf.errors.InvalidArgumentError)
    with pytest.raises(refused, match="expected to be a string tensor but is a int32"):
        signature(inputs=tf.constant([1, 2]))
    with pytest.raises(refused, match=r"is not compatible with expected shape \[\?\]"):
        signature(inputs=tf.constant("a scalar"))
    with pytest.raises(refused, match=r"is not compatible with expected shape \[\?\]"):
        signature(inputs=tf.constant([["a"], ["matrix"]]))
    # ...and the model still serves afterwards.
    assert serve(signature, SENTENCES[:1])[0] == expected[0][:1]


def small_translator(directory):
    """An untrained one-layer Translator with one source bucket (quick to export)."""
    from keras_transformer.text import train_tokenizer

    tokenizer = train_tokenizer(SENTENCES, vocabulary_size=100)
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), num_layers=1)
    translator = Translator(
        model, tokenizer, max_source_length=8, extra_length=4, jit_compile=False
    )
    translator.save(directory / "small.keras")
    return translator


@tensorflow_only
def test_export_from_a_keras_file_writes_atomically(tmp_path, monkeypatch):
    import tensorflow as tf

    translator = small_translator(tmp_path)
    path = tmp_path / "exported"
    assert export_saved_model(tmp_path / "small.keras", path, beam_size=1) == str(path)
    outputs = tf.saved_model.load(str(path)).signatures["serving_default"](
        inputs=tf.constant(SENTENCES)
    )
    texts = [text.decode() for text in outputs["translations"].numpy()]
    assert texts == translator(SENTENCES, beam_size=1)
    assert read_metadata(path)["beam_size"] == 1
    with pytest.raises(ValueError, match="overwrite=False"):
        export_saved_model(translator, path, overwrite=False)

    # A failure half-way leaves the previous SavedModel in place and no temporary directory.
    def fail(obj, export_dir, *args, **kwargs):
        os.makedirs(export_dir, exist_ok=True)
        with open(os.path.join(export_dir, "saved_model.pb"), "w") as file:
            file.write("half written")
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", fail)
    before = (path / "saved_model.pb").read_bytes()
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(translator, path, beam_size=1)
    assert (path / "saved_model.pb").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["exported", "small.keras"]


@pytest.mark.parametrize(
    "kwargs, message",
    [({"beam_size": 0}, "beam_size=0"), ({"alpha": -1}, "alpha=-1")],
)
def test_export_bad_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        export_saved_model("translator.keras", tmp_path / "out", **kwargs)


def test_export_rejects_what_is_not_a_translator(tmp_path):
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    with pytest.raises(ValueError, match="translator="):
        export_saved_model(model, tmp_path / "out")


@tensorflow_only
def test_model_export_of_the_token_model(tmp_path):
    import tensorflow as tf

    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    inputs = {
        "encoder_inputs": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32"),
        "decoder_inputs": np.array([[1, 5, 6], [1, 8, 0]], "int32"),
    }
    model.export(str(tmp_path / "tokens"), format="tf_saved_model", verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "tokens"))
    np.testing.assert_allclose(
        np.asarray(loaded.serve(inputs)),
        keras.ops.convert_to_numpy(model(inputs)),
        atol=1e-5,
    )


@pytest.mark.slow
# The path off TensorFlow (a `.keras` file exported in a TensorFlow subprocess) is the same
# code for JAX and PyTorch: JAX runs it.
@pytest.mark.skipif(BACKEND != "jax", reason="exports from a backend other than TensorFlow")
def test_export_from_another_backend(number_translator, tmp_path):
    # Trained and saved under this backend; exported in a KERAS_BACKEND=tensorflow subprocess.
    shared = number_translator[0]
    translator = Translator(
        shared.model, shared.tokenizer, max_source_length=MAX_SOURCE_LENGTH,
        bucket_boundaries=shared.bucket_boundaries, extra_length=10, jit_compile=False,
    )
    expected = translator(SENTENCES)
    path = export_saved_model(translator, tmp_path / "exported")
    assert read_metadata(path)["max_source_length"] == MAX_SOURCE_LENGTH
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, str(path)],
        input=json.dumps(SENTENCES),
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["translations"] == expected
