"""Export a `Translator` as a TensorFlow SavedModel that serves strings.

`export_saved_model(translator, path)` writes a SavedModel whose `serving_default` signature
takes a batch of sentences (`tf.string`, shape `[None]`) and returns their translations, with
the tokenizer, the bucketing and the beam search (compiled with XLA) inside the graph. It loads
with `tf.saved_model.load` in a process that imports only `tensorflow` and `tensorflow_text`
(for the tokenizer ops), and serves with `saved_model_cli` or TensorFlow Serving (with the
tensorflow-text ops linked in).

TensorFlow is imported lazily. A SavedModel is built by tracing TensorFlow functions, so the
export itself runs on the TensorFlow backend; from a JAX or PyTorch process,
`export_saved_model` saves the translator to a `.keras` file and runs the export in a
`KERAS_BACKEND=tensorflow` subprocess (`keras-transformer export translator.keras DIR`), which
is also what you can do by hand.
"""

import json
import os
import subprocess
import sys
import tempfile

METADATA_PATH = os.path.join("assets.extra", "keras_transformer.json")
SIGNATURE_NAME = "serving_default"
INPUT_NAME = "inputs"


def export_saved_model(
    translator,
    path,
    beam_size=None,
    alpha=None,
    jit_compile=True,
    overwrite=True,
):
    """Writes `translator` as a TensorFlow SavedModel serving strings.

    The `serving_default` signature takes `inputs`: `tf.string` of shape `[None]` (any batch
    size, `0` included) and returns a dict of:

    - `translations`: `tf.string` `[batch]`, UTF-8.
    - `scores`: `tf.float32` `[batch]`, the beam score (log probability / length penalty;
      with `beam_size=1`, the greedy log probability); `0.0` for an empty input.
    - `truncated`: `tf.bool` `[batch]`, the input was truncated to `max_source_length`.

    The `Translator` rules hold: an input of more than `max_source_length - 2` word pieces
    keeps its first `max_source_length - 2`; an input without any token translates to `""`;
    invalid UTF-8 becomes U+FFFD. A request batch is padded to the bucket of its longest
    sentence and to a power-of-two number of rows (repeating a row), so XLA compiles a
    bounded set of shapes, each once, on first use. At most `padded_source_length +
    extra_length` tokens are generated.

    The SavedModel is written to a temporary directory next to `path` (named `.tmp-*`, like
    every temporary of the package, so `keras_transformer.training.train` clears what a
    killed export leaves) and renamed into place, so `path` never holds a half-written model. The translator's settings are stored in
    `path/assets.extra/keras_transformer.json` (read by `keras-transformer translate`).

    On the JAX and PyTorch backends the translator is saved to a temporary `.keras` file (in
    a `.tmp-*` directory next to `path`) and exported by `keras-transformer export` in a `KERAS_BACKEND=tensorflow` subprocess.

    Args:
        translator: `keras_transformer.Translator`, or the path of a `.keras` file (as
            written by `translator.save`) or of a preset directory (`save_to_preset`).
        path: str or `os.PathLike`. Directory of the SavedModel.
        beam_size: int. Defaults to `None`: the translator's.
        alpha: float. Defaults to `None`: the translator's.
        jit_compile: bool. Compile the search with XLA. Defaults to `True`.
        overwrite: bool. Replace an existing `path`. Defaults to `True`.

    Returns:
        `path`, as a str.

    Example:

    ```python
    translator.save("translator.keras")
    export_saved_model(translator, "exported")

    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

    serve = tf.saved_model.load("exported").signatures["serving_default"]
    serve(inputs=tf.constant(["¿Dónde está?"]))["translations"]
    ```
    """
    import keras

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"`path` already exists and `overwrite=False`. Received: path={path!r}")
    if beam_size is not None and (
        isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1
    ):
        raise ValueError(f"`beam_size` must be an int >= 1. Received: beam_size={beam_size!r}")
    if alpha is not None and (
        isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0
    ):
        raise ValueError(f"`alpha` must be a number >= 0. Received: alpha={alpha!r}")
    if not isinstance(translator, (str, os.PathLike)):
        _check_translator(translator)
    if keras.backend.backend() != "tensorflow":
        return _export_in_subprocess(translator, path, beam_size, alpha, jit_compile)
    if isinstance(translator, (str, os.PathLike)):
        from keras_transformer.presets import load_saved_translator

        translator = load_saved_translator(translator)
    beam_size = translator.beam_size if beam_size is None else beam_size
    alpha = translator.alpha if alpha is None else alpha

    import tensorflow as tf

    serve = make_serving_function(translator, beam_size, float(alpha), jit_compile)
    archive = keras.export.ExportArchive()
    archive.track(translator.model)
    for tokenizer in (translator.tokenizer, translator.target_tokenizer):
        if tokenizer is not None:
            archive.track(tokenizer)  # The resources of its ops (the SentencePiece model).
    archive.add_endpoint(
        name=SIGNATURE_NAME,
        fn=serve,
        input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)],
    )
    metadata = {
        "max_source_length": translator.max_source_length,
        "extra_length": translator.extra_length,
        "beam_size": beam_size,
        "alpha": float(alpha),
        "bucket_boundaries": list(translator.bucket_boundaries),
        "jit_compile": bool(jit_compile),
    }

    from keras_transformer.training.files import atomic_directory

    with atomic_directory(path) as temporary:
        archive.write_out(temporary, verbose=False)
        os.makedirs(os.path.join(temporary, "assets.extra"), exist_ok=True)
        with open(os.path.join(temporary, METADATA_PATH), "w", encoding="utf-8") as file:
            json.dump(metadata, file, indent=2)
    return path


def make_serving_function(translator, beam_size, alpha, jit_compile=True):
    """The `tf.string [batch] -> {"translations", "scores", "truncated"}` function exported.

    Works eagerly and inside `tf.function`; only TensorFlow and tensorflow-text ops (the
    search itself in a nested `tf.function(jit_compile=True)`, one per source bucket).

    Args:
        translator: `keras_transformer.Translator` (TensorFlow backend).
        beam_size: int. `1` runs greedy search.
        alpha: float. Length penalty.
        jit_compile: bool. Compile the search with XLA. Defaults to `True`.

    Returns:
        A Python function of one string tensor of shape `(batch,)`.
    """
    import tensorflow as tf

    preprocessor = translator.preprocessor
    generator = translator.make_generator(jit_compile)

    def translate_rows(source):
        """Translates the non-empty `source` rows (ragged int32, >= 1 row)."""
        num_rows = source.nrows(out_type=tf.int32)
        bucket_index = preprocessor.bucket_index(source.bounding_shape(1))

        def branch(bucket):
            def run():
                encoder_inputs = preprocessor.pad_batch(source, bucket)
                function = generator.function(bucket + translator.extra_length, beam_size, alpha)
                sequences, scores = function(encoder_inputs)  # (batch, beam_size, ...), best first
                sequences, scores = sequences[:, 0], scores[:, 0]
                return preprocessor.generate_postprocess(sequences), scores

            return run

        branches = [branch(bucket) for bucket in preprocessor.bucket_boundaries]
        texts, scores = tf.switch_case(bucket_index, branches)
        return texts[:num_rows], scores[:num_rows]

    def serve(inputs):
        # The signature's shape is not enforced at call time: check it with a runtime op.
        inputs = tf.ensure_shape(tf.convert_to_tensor(inputs, tf.string), [None])  # (batch,)
        features = preprocessor.generate_preprocess(inputs)
        # Inputs without a token translate to "" without running the model.
        nonempty = tf.logical_not(features["empty"])
        rows = tf.cast(tf.where(nonempty)[:, 0], tf.int32)  # (num_nonempty,)
        count = tf.size(rows)
        texts, scores = tf.cond(
            count > 0,
            lambda: translate_rows(tf.gather(features["encoder_inputs"], rows)),
            lambda: (tf.zeros([0], tf.string), tf.zeros([0], tf.float32)),
        )
        # Row i of the batch is row `position[i]` of the non-empty rows.
        position = tf.maximum(tf.cumsum(tf.cast(nonempty, tf.int32)) - 1, 0)
        safe = tf.minimum(position, tf.maximum(count - 1, 0))
        texts = tf.concat([texts, [""]], axis=0)  # One extra row: gather never fails.
        scores = tf.concat([scores, [0.0]], axis=0)
        texts = tf.where(nonempty, tf.gather(texts, safe), "")
        scores = tf.where(nonempty, tf.gather(scores, safe), 0.0)
        return {"translations": texts, "scores": scores, "truncated": features["truncated"]}

    return serve


def read_metadata(path):
    """The translator settings stored with a SavedModel by `export_saved_model` (or `{}`)."""
    try:
        with open(os.path.join(os.fspath(path), METADATA_PATH), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def _check_translator(translator):
    from keras_transformer.translator import Translator

    if not isinstance(translator, Translator):
        raise ValueError(
            "`translator` must be a `keras_transformer.Translator` or the path of a `.keras` "
            f"file or preset directory holding one. Received: translator={translator!r}"
        )


def _export_in_subprocess(translator, path, beam_size, alpha, jit_compile):
    """Runs `keras-transformer export` under `KERAS_BACKEND=tensorflow`."""
    from keras_transformer.training.files import TEMPORARY_PREFIX

    # The scratch `.keras` file goes next to the destination, under a temporary name that
    # `remove_temporaries` clears if this process is killed.
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX, dir=parent) as directory:
        if isinstance(translator, (str, os.PathLike)):
            keras_path = os.fspath(translator)
        else:
            keras_path = os.path.join(directory, "translator.keras")
            translator.save(keras_path)
        command = [sys.executable, "-m", "keras_transformer.cli", "export", keras_path, path]
        if beam_size is not None:
            command += ["--beam-size", str(beam_size)]
        if alpha is not None:
            command += ["--alpha", str(alpha)]
        if not jit_compile:
            command.append("--no-jit-compile")
        environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
        result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            "Exporting under the TensorFlow backend failed (exit status "
            f"{result.returncode}) running {' '.join(command)}:\n{result.stderr[-4000:]}"
        )
    return path


def export_ctranslate2(translator, directory, quantization=None, **kwargs):
    """Writes `translator` as a CTranslate2 model; see `keras_transformer.ctranslate2`."""
    from keras_transformer.ctranslate2 import export_ctranslate2 as export

    return export(translator, directory, quantization=quantization, **kwargs)
