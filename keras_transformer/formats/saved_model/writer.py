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
`KERAS_BACKEND=tensorflow` subprocess (`keras-transformer export translator.keras DIR` does the
same by hand).
"""

import contextlib
import errno
import json
import os
import subprocess
import sys
import tempfile

import keras

from keras_transformer import _backend
from keras_transformer._checks import check_int, check_number
from keras_transformer.files import TEMPORARY_PREFIX, atomic_directory
from keras_transformer.formats.checks import check_translator
from keras_transformer.formats.saved_model.layout import (
    INPUT_NAME,
    MAX_REQUEST_SIZE,
    METADATA_PATH,
    N_BEST_SIGNATURE_NAME,
    PREFIX_INPUT_NAME,
    PREFIX_SIGNATURE_NAME,
    SIGNATURE_NAME,
    WARMUP_PATH,
    read_metadata,  # noqa: F401 (`keras_transformer.export.saved_model` is this module)
    read_warmup_requests,  # noqa: F401 (as read_metadata)
    write_warmup_requests,
)
from keras_transformer.formats.versions import version_directory
from keras_transformer.models.lora import merged_translator
from keras_transformer.translation import warmup_plan
from keras_transformer.translator import KERAS_FILE, load_keras_translator


def export_saved_model(
    translator,
    path,
    beam_size=None,
    alpha=None,
    jit_compile=True,
    overwrite=None,
    version=None,
    num_hypotheses=None,
    warmup_batch_size=None,
    max_request_size=MAX_REQUEST_SIZE,
):
    """Writes `translator` as a TensorFlow SavedModel serving strings.

    The `serving_default` signature takes `inputs`: `tf.string` of shape `[None]` (any batch
    size, `0` included) and returns a dict of:

    - `translations`: `tf.string` `[batch]`, UTF-8.
    - `scores`: `tf.float32` `[batch]`, the beam score (log probability / length penalty;
      with `beam_size=1`, the greedy log probability); `0.0` for an empty input.
    - `truncated`: `tf.bool` `[batch]`, the input was truncated to `max_source_length`.

    The `translate_n_best` signature takes the same `inputs` and returns the `num_hypotheses`
    best hypotheses of the same search, best first: `translations` `tf.string` and `scores`
    `tf.float32` of shape `[batch, num_hypotheses]`, and `truncated` `[batch]`. Its first
    column equals `serving_default`'s outputs. An empty input gives `""` and `0.0` in every
    column; a hypothesis is the beam search's, so two columns can hold the same string when
    their token ids differ only past the end token or in pieces that detokenize alike.

    The `translate_with_prefix` signature takes `inputs` and `target_prefix` (`tf.string`
    `[batch]`, one prefix per input, `""` for none) and returns what `serving_default` does,
    each translation starting with its prefix's word pieces and continuing from them (the
    same compiled search, forced; as `Translator.translate(target_prefix=...)`). A prefix
    longer than the largest bucket is an error (`InvalidArgumentError`).

    The `Translator` rules hold: an input of more than `max_source_length - 2` word pieces
    keeps its first `max_source_length - 2`; an input without any token translates to `""`;
    invalid UTF-8 becomes U+FFFD. A request batch is padded to the bucket of its longest
    sentence and to a power-of-two number of rows (repeating a row), so XLA compiles a
    bounded set of shapes, each once, on first use. A translation has at most `extra_length`
    tokens more than its own source padded to its bucket, whatever the request holds (as in
    `Translator`).

    For TensorFlow Serving, `version=N` writes the SavedModel to `path/N/` (the layout a model
    server watches: `path` is the model's base path). Every export also writes
    `assets.extra/tf_serving_warmup_requests`: one `PredictionLog` per compiled shape (each
    source bucket × each power-of-two batch size up to `warmup_batch_size`), one for
    `translate_n_best` and the same shapes for `translate_with_prefix` (see
    `make_warmup_requests`), which a model server replays when it loads the version, so that no user request pays an XLA compile.
    Writing it needs the `tensorflow-serving-api` package (in the `tensorflow` extra).

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
        overwrite: bool. Replace an existing SavedModel directory. Defaults to `None`: `True`
            without `version`; with `version`, `False` (an existing `path/N/` may be the
            version a model server is serving).
        version: int `>= 1`. Write to `path/<version>/`. Defaults to `None`: to `path`.
        num_hypotheses: int, `1 <= num_hypotheses <= beam_size`. Columns of the
            `translate_n_best` signature. Defaults to `None`: `beam_size`.
        warmup_batch_size: int `>= 1`. The largest request batch the warm-up requests cover
            (rounded up to a power of two). Defaults to `None`: the translator's `batch_size`.
        max_request_size: int `>= 1`. Most sentences one request may hold: the signatures
            search a request as one batch, so a larger one is refused with an
            `InvalidArgumentError` naming the limit (instead of exhausting memory); split
            larger ones (`keras_transformer.engines.SavedModelTranslator` does). Defaults to
            `MAX_REQUEST_SIZE` (1,024).

    Returns:
        The SavedModel directory (`path`, or `path/<version>`), as a str.

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
    path = os.fspath(path)
    for name, value in (
        ("beam_size", beam_size),
        ("num_hypotheses", num_hypotheses),
        ("warmup_batch_size", warmup_batch_size),
    ):
        check_int(name, value, minimum=1, allow_none=True)
    check_int("max_request_size", max_request_size, minimum=1)
    if num_hypotheses is not None and beam_size is not None and num_hypotheses > beam_size:
        raise ValueError(
            "`num_hypotheses` must be at most `beam_size`. "
            f"Received: num_hypotheses={num_hypotheses}, beam_size={beam_size}"
        )
    path = version_directory(path, version, overwrite)
    check_number("alpha", alpha, minimum=0, allow_none=True)
    if not isinstance(translator, (str, os.PathLike)):
        check_translator(translator)
    if not _backend.is_tensorflow():
        options = {
            "beam_size": beam_size,
            "alpha": alpha,
            "num_hypotheses": num_hypotheses,
            "warmup_batch_size": warmup_batch_size,
            "max_request_size": max_request_size,
        }
        return _export_in_subprocess(translator, path, jit_compile, options)
    if isinstance(translator, (str, os.PathLike)):
        translator = load_keras_translator(translator)
    translator = merged_translator(translator)  # LoRA merged: the served model pays nothing
    beam_size = translator.beam_size if beam_size is None else beam_size
    alpha = translator.alpha if alpha is None else alpha
    num_hypotheses = beam_size if num_hypotheses is None else num_hypotheses
    if num_hypotheses > beam_size:
        raise ValueError(
            "`num_hypotheses` must be at most `beam_size`. "
            f"Received: num_hypotheses={num_hypotheses}, beam_size={beam_size}"
        )
    warmup_batch_size = warmup_batch_size or translator.batch_size
    warmup = make_warmup_requests(translator.preprocessor, warmup_batch_size)

    import tensorflow as tf

    input_signature = [tf.TensorSpec([None], tf.string, name=INPUT_NAME)]
    archive = keras.export.ExportArchive()
    archive.track(translator.model)
    for tokenizer in (translator.tokenizer, translator.target_tokenizer):
        if tokenizer is not None:
            archive.track(tokenizer)  # The resources of its ops (the SentencePiece model).
    # One generator: both signatures call the same compiled search functions, so the warm-up
    # requests (to `serving_default`) also compile what `translate_n_best` runs.
    generator = translator.make_generator(jit_compile)
    prefix_signature = [*input_signature, tf.TensorSpec([None], tf.string, name=PREFIX_INPUT_NAME)]
    # `serving_default` first: the archive also makes its first endpoint the default.
    endpoints = (
        (SIGNATURE_NAME, {}, input_signature),
        (N_BEST_SIGNATURE_NAME, {"num_hypotheses": num_hypotheses}, input_signature),
        (PREFIX_SIGNATURE_NAME, {"with_prefix": True}, prefix_signature),
    )
    searches = {}  # The signatures' searches, each traced once (see `make_serving_function`).
    for name, options, signature in endpoints:
        serve = make_serving_function(
            translator,
            beam_size,
            float(alpha),
            generator=generator,
            max_request_size=max_request_size,
            searches=searches,
            **options,
        )
        archive.add_endpoint(name=name, fn=serve, input_signature=signature)
    metadata = {
        "max_source_length": translator.max_source_length,
        "extra_length": translator.extra_length,
        "beam_size": beam_size,
        "alpha": float(alpha),
        "bucket_boundaries": list(translator.bucket_boundaries),
        "jit_compile": bool(jit_compile),
        "num_hypotheses": num_hypotheses,
        "warmup_batch_size": warmup_batch_size,
        "max_request_size": max_request_size,
    }

    with atomic_directory(path) as temporary, _file_errors_as_oserror():
        archive.write_out(temporary, verbose=False)
        os.makedirs(os.path.join(temporary, "assets.extra"), exist_ok=True)
        with open(os.path.join(temporary, METADATA_PATH), "w", encoding="utf-8") as file:
            json.dump(metadata, file, indent=2)
        write_warmup_requests(os.path.join(temporary, WARMUP_PATH), warmup)
    return path


def make_serving_function(
    translator,
    beam_size,
    alpha,
    jit_compile=True,
    num_hypotheses=None,
    generator=None,
    max_request_size=None,
    with_prefix=False,
    searches=None,
):
    """The `tf.string [batch] -> {"translations", "scores", "truncated"}` function exported.

    Works eagerly and inside `tf.function`; only TensorFlow and tensorflow-text ops (the
    search itself in a nested `tf.function(jit_compile=True)`, one per source bucket).

    Args:
        translator: `keras_transformer.Translator` (TensorFlow backend).
        beam_size: int. `1` runs greedy search.
        alpha: float. Length penalty.
        jit_compile: bool. Compile the search with XLA. Defaults to `True`.
        num_hypotheses: int, at most `beam_size`. Return the best `num_hypotheses` of the
            search, best first: `translations` and `scores` of shape `(batch,
            num_hypotheses)`. Defaults to `None`: the best one, shape `(batch,)`.
        generator: `keras_transformer.generation.Generator` running the search (functions
            that share it share their compiled searches). Defaults to `None`: a new one
            (`translator.make_generator(jit_compile)`).
        max_request_size: int. A request of more sentences fails with an
            `InvalidArgumentError` naming the limit. Defaults to `None`: no limit.
        with_prefix: bool. The function takes a second string tensor `(batch,)`, the target
            prefixes (`translate_with_prefix`). Defaults to `False`.
        searches: dict. Where traces of the returned function keep the concrete search
            functions they call, keyed by function and input shapes; functions given the same
            dict (and `generator`) trace each search once between them. Defaults to `None`:
            a new dict.

    Returns:
        A Python function of one string tensor of shape `(batch,)` (two `with_prefix`).
    """
    import tensorflow as tf

    preprocessor = translator.preprocessor
    if generator is None:
        generator = translator.make_generator(jit_compile)
    searches = {} if searches is None else searches
    columns = 1 if num_hypotheses is None else num_hypotheses
    patience = translator.patience  # The translator's stop, as its `translate` searches.

    def search(function, *arguments):
        """Runs the compiled search `function`. Inside a trace, through the concrete function
        of its first trace with these shapes: a `tf.function` retraces whenever its cache key
        changes (and `tf.saved_model.save` traces every exported function again under its
        save context), while a concrete function is traced once, so each search is traced
        once per export whatever retraces `serve`."""
        if tf.executing_eagerly():
            return function(*arguments)
        key = (id(function), *(tuple(argument.shape.as_list()) for argument in arguments))
        if key not in searches:
            searches[key] = function.get_concrete_function(*arguments)
        return searches[key](*arguments)

    def translate_rows(source, prefix=None):
        """Translates the non-empty `source` rows (ragged int32, >= 1 row), each continuing
        its `prefix` row (ragged int32 target pieces) when given."""
        num_rows = source.nrows(out_type=tf.int32)
        bucket_index = preprocessor.bucket_index(source.bounding_shape(1))
        # Each source's own bucket + extra_length; the rows padding the batch stop at once.
        own_buckets = tf.gather(
            preprocessor.bucket_boundaries, preprocessor.bucket_index(source.row_lengths())
        )
        limits = own_buckets + translator.extra_length
        if prefix is not None:
            # One bucket for both: the source and the prefix are padded to the larger.
            width = prefix.bounding_shape(1, out_type=tf.int32)
            longest = max(preprocessor.bucket_boundaries)
            check = tf.debugging.assert_less_equal(
                width, longest, message=f"a target prefix has more than {longest} word pieces"
            )
            with tf.control_dependencies([check]):
                bucket_index = tf.maximum(bucket_index, preprocessor.bucket_index(width))
            limits += tf.cast(prefix.row_lengths(), tf.int32)

        def branch(bucket):
            def run():
                encoder_inputs = preprocessor.pad_batch(source, bucket)
                padding_rows = tf.shape(encoder_inputs)[0] - num_rows
                max_lengths = tf.concat([limits, tf.ones([padding_rows], tf.int32)], 0)
                extras = []
                if prefix is None:
                    function = generator.function(
                        bucket + translator.extra_length, beam_size, alpha, patience=patience
                    )
                else:
                    function = generator.function(
                        2 * bucket + translator.extra_length,
                        beam_size,
                        alpha,
                        prefix=True,
                        patience=patience,
                    )
                    rows = tf.minimum(tf.range(tf.shape(encoder_inputs)[0]), num_rows - 1)
                    padded = tf.gather(prefix, rows).to_tensor(-1, shape=[None, bucket])
                    extras.append(tf.cast(padded, tf.int32))
                # (rows, beam_size, ...), best first
                sequences, scores = search(function, encoder_inputs, max_lengths, *extras)
                sequences, scores = sequences[:, :columns], scores[:, :columns]
                rows, length = tf.shape(sequences)[0], tf.shape(sequences)[2]
                texts = preprocessor.generate_postprocess(tf.reshape(sequences, [-1, length]))
                return tf.reshape(texts, [rows, columns]), scores  # (rows, columns)

            return run

        branches = [branch(bucket) for bucket in preprocessor.bucket_boundaries]
        texts, scores = tf.switch_case(bucket_index, branches)
        return texts[:num_rows], scores[:num_rows]

    def serve(inputs, target_prefix=None):
        # The signature's shape is not enforced at call time: check it with a runtime op.
        inputs = tf.ensure_shape(tf.convert_to_tensor(inputs, tf.string), [None])  # (batch,)
        if max_request_size is not None:
            check = tf.debugging.assert_less_equal(
                tf.size(inputs),
                max_request_size,
                message=f"A request may hold at most {max_request_size} sentences (the "
                "export's max_request_size): split it into smaller requests. Received",
            )
            with tf.control_dependencies([check]):
                inputs = tf.identity(inputs)
        features = preprocessor.generate_preprocess(inputs)
        # Inputs without a token translate to "" without running the model.
        nonempty = tf.logical_not(features["empty"])
        rows = tf.cast(tf.where(nonempty)[:, 0], tf.int32)  # (num_nonempty,)
        count = tf.size(rows)
        prefix = None
        if target_prefix is not None:
            target_prefix = tf.ensure_shape(tf.convert_to_tensor(target_prefix, tf.string), [None])
            check = tf.debugging.assert_equal(
                tf.size(target_prefix), tf.size(inputs), message="one target prefix per input"
            )
            with tf.control_dependencies([check]):
                pieces = preprocessor.targets.tokenize(target_prefix)
            prefix = tf.gather(tf.cast(pieces, tf.int32), rows)
        texts, scores = tf.cond(
            count > 0,
            lambda: translate_rows(tf.gather(features["encoder_inputs"], rows), prefix),
            lambda: (tf.zeros([0, columns], tf.string), tf.zeros([0, columns], tf.float32)),
        )
        # Row i of the batch is row `position[i]` of the non-empty rows.
        position = tf.maximum(tf.cumsum(tf.cast(nonempty, tf.int32)) - 1, 0)
        safe = tf.minimum(position, tf.maximum(count - 1, 0))
        # One extra row: gather never fails.
        texts = tf.concat([texts, tf.fill([1, columns], "")], axis=0)
        scores = tf.concat([scores, tf.zeros([1, columns])], axis=0)
        texts = tf.where(nonempty[:, None], tf.gather(texts, safe), "")  # (batch, columns)
        scores = tf.where(nonempty[:, None], tf.gather(scores, safe), 0.0)
        if num_hypotheses is None:
            texts, scores = texts[:, 0], scores[:, 0]  # (batch,)
        return {"translations": texts, "scores": scores, "truncated": features["truncated"]}

    if with_prefix:
        return serve

    def serve_sentences(inputs):
        return serve(inputs)

    return serve_sentences


def make_warmup_requests(preprocessor, max_batch_size):
    """The warm-up requests: one per shape the export compiles, and one per other signature
    (`keras_transformer.translation.warmup_plan`, named by the signatures that answer them).

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        max_batch_size: int. The largest batch covered, rounded up to a power of two.

    Returns:
        A list of `(signature_name, sentences)`, `sentences` a list of `bytes`: for each bucket
        (shortest first), batches of 1, 2, 4, ..., `padded_batch_size(max_batch_size)` copies
        of one sentence in that bucket; then the `translate_n_best` request; then the
        `translate_with_prefix` requests, as `(signature_name, sentences, prefixes)`.
    """
    names = {"default": SIGNATURE_NAME, "n_best": N_BEST_SIGNATURE_NAME}
    requests = []
    for kind, sentences, prefixes in warmup_plan(preprocessor, max_batch_size):
        if prefixes is None:
            requests.append((names[kind], sentences))
        else:
            requests.append((PREFIX_SIGNATURE_NAME, sentences, prefixes))
    return requests


# The errors TensorFlow's file system reports by their C library message (a full disk, a file
# size limit, a read-only or forbidden directory, a device error).
_FILE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO)


@contextlib.contextmanager
def _file_errors_as_oserror():
    """TensorFlow's errors of a failed file write (`OutOfRangeError: ...; File too large`,
    `ResourceExhaustedError: ...; No space left on device`) raised as the `OSError` that a
    Python write would raise: the caller's (and the command line's) "disk" error."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as error:
        for number in _FILE_ERRNOS:
            if os.strerror(number) in error.message:
                raise OSError(number, error.message) from error
        raise


# The subprocess of `_export_in_subprocess`: `export_saved_model(KERAS_PATH, PATH, **OPTIONS)`;
# a user's error (`OSError`, `ValueError`) comes back as
# one JSON line on standard error and exit status 3, and is raised again in the parent.
_CHILD_ERROR_STATUS = 3
_CHILD = f"""
import json, sys
from keras_transformer.formats.saved_model.writer import export_saved_model
try:
    export_saved_model(sys.argv[1], sys.argv[2], **json.loads(sys.argv[3]))
except (OSError, ValueError) as error:
    fields = {{"type": type(error).__name__, "errno": getattr(error, "errno", None)}}
    fields["message"] = getattr(error, "strerror", None) or str(error)
    print(json.dumps(fields), file=sys.stderr)
    sys.exit({_CHILD_ERROR_STATUS})
"""


def _export_in_subprocess(translator, path, jit_compile, options):
    """Runs `export_saved_model` on a `.keras` file under `KERAS_BACKEND=tensorflow`."""
    # The scratch `.keras` file goes next to the destination, under a temporary name that
    # `remove_temporaries` clears if this process is killed.
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX, dir=parent) as directory:
        if isinstance(translator, (str, os.PathLike)):
            keras_path = os.fspath(translator)
        else:
            keras_path = os.path.join(directory, KERAS_FILE)
            translator.save(keras_path)
        # `path` is already the version directory: the child writes it without `version`
        # (and may replace it: the parent checked `overwrite`).
        options = {**options, "jit_compile": jit_compile}
        command = [sys.executable, "-c", _CHILD, keras_path, path, json.dumps(options)]
        environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
        result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode == _CHILD_ERROR_STATUS:
        raise _child_error(result.stderr)
    if result.returncode != 0:
        raise RuntimeError(
            "Exporting under the TensorFlow backend failed (exit status "
            f"{result.returncode}) running {' '.join(command)}:\n{result.stderr[-4000:]}"
        )
    return path


def _child_error(stderr):
    """The `OSError` or `ValueError` that `_CHILD` reported on its line of `stderr` (the last
    one that holds it: TensorFlow may log more as the process ends)."""
    for line in reversed(stderr.strip().splitlines()):
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and {"type", "errno", "message"} <= set(fields):
            break
    else:
        return RuntimeError(f"Exporting under the TensorFlow backend failed:\n{stderr[-4000:]}")
    if fields["type"] == "ValueError":
        return ValueError(fields["message"])
    if fields["errno"] is not None:
        return OSError(fields["errno"], fields["message"])
    return OSError(fields["message"])
