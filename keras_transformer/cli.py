"""The `keras-transformer` command.

```
keras-transformer translate --model exported/ "¿Dónde está?" "Hola."
printf 'Hola.\\n¿Dónde está?\\n' | keras-transformer translate --model exported/
keras-transformer export translator.keras exported/
keras-transformer train --config configs/demo.toml
```

`translate` reads an exported SavedModel (`keras_transformer.export`) with TensorFlow and
tensorflow-text only, a `.keras` file written by `Translator.save`, or a preset directory
written by `Translator.save_to_preset`; `export` reads a `.keras` file or a preset directory.
Given a model server's base path (what `export --version N` writes into: one directory per
version, named by its number), `translate` uses its highest version, as TensorFlow Serving
does, with `--engine ctranslate2` too. Without sentences on the command line it reads
standard input, one sentence per line, and writes one translation per line, flushing after
each batch. Inputs longer than the model's maximum source length are
truncated (a note on standard error says which); a batch that fails prints empty lines and an
error on standard error, and the exit status is then 1.

`translate --n-best N` prints the N best hypotheses of each sentence instead (a SavedModel
through its `translate_n_best` signature: N at most its columns, the search it was exported
with), best first, one line each in the Moses / fairseq n-best format
`INDEX ||| TRANSLATION ||| SCORE`: INDEX counts the sentences from 0, SCORE is the
beam score (log probability / length penalty) with 6 decimals. Split a line at the first
and the last ` ||| `. An empty sentence has one hypothesis, `""` with score 0; a sentence of
a failed batch has none. `--beam-size 1` asks for greedy search.

A user error (a bad config file or setting, a malformed or missing data file, an unreadable
model) ends with one line on standard error, `keras-transformer: error: ...`, and the exit
status 2; `--debug` shows the traceback instead. TensorFlow's start-up logs (CUDA probes, CPU
feature banners) are silenced unless `--verbose` is given or `TF_CPP_MIN_LOG_LEVEL` is set.

Each subcommand is a `_add_<name>_parser(subparsers)` function that registers its arguments and
its handler `_<name>(args) -> exit status`; imports are lazy, so `--help` loads no framework.
"""

import argparse
import contextlib
import importlib.util
import logging
import os
import sys

PROGRAM = "keras-transformer"


def main(argv=None):
    """Runs the `keras-transformer` command.

    Args:
        argv: list of str. The arguments, without the program name. Defaults to `None`:
            `sys.argv[1:]`.

    Returns:
        int, the exit status.
    """
    args = build_parser().parse_args(argv)
    return run_handler(args.handler, args, debug=args.debug, verbose=args.framework_logs)


def run_handler(handler, args, debug=False, verbose=False):
    """Runs a subcommand's `handler(args)`; a user error becomes one line and the status 2.

    Args:
        handler: callable, `args -> exit status`.
        args: the parsed `argparse.Namespace`.
        debug: bool. Let user errors raise (with their traceback). Defaults to `False`.
        verbose: bool. Keep TensorFlow's start-up logs. Defaults to `False`.

    Returns:
        int, the exit status.
    """
    if not verbose:
        quiet_framework_logs()
    try:
        return handler(args)
    except user_errors() as error:
        if debug:
            raise
        _error(" ".join(str(error).split()) or type(error).__name__)
        return 2


def user_errors():
    """The exception types that are the user's to fix: printed as one line, without traceback.

    `ConfigError` (settings and config files), `TsvFormatError` (a malformed data file) and
    `OSError` (a missing or unreadable file; its message names the file).
    """
    from keras_transformer.datasets.tsv import TsvFormatError
    from keras_transformer.training.config import ConfigError

    return (ConfigError, TsvFormatError, OSError)


def quiet_framework_logs():
    """Silences TensorFlow's start-up logs (CUDA probes, CPU feature banners, absl notices).

    Sets `TF_CPP_MIN_LOG_LEVEL=3` unless it is set, and imports TensorFlow (when installed and
    not yet imported) with the process's standard error pointing at `/dev/null`, since some
    of its libraries log while loading, before any log level applies. Every subcommand
    imports TensorFlow anyway (the tokenizers are tensorflow-text's). A user who sets
    `TF_CPP_MIN_LOG_LEVEL` sees the logs that level lets through.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    with _stderr_to_devnull():
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            return  # Reported when a subcommand needs it, with the standard error back.
    # absl (TensorFlow's logging library) logs through the standard `absl` logger.
    logging.getLogger("absl").setLevel(logging.ERROR)


@contextlib.contextmanager
def _stderr_to_devnull():
    """Points file descriptor 2 (what C++ libraries write to) at `/dev/null` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def build_parser():
    """The `argparse.ArgumentParser` of the command, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description='The Transformer of "Attention Is All You Need" for Keras 3.',
    )
    add_common_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_translate_parser(subparsers)
    _add_export_parser(subparsers)
    # === train: keras_transformer.training (arguments and handler in training/cli.py) ===
    from keras_transformer.training.cli import add_train_parser

    add_train_parser(subparsers)
    return parser


def add_common_arguments(parser, verbose=True, default=False):
    """Adds `--debug` (and `--verbose`) to `parser`.

    Args:
        parser: `argparse.ArgumentParser`.
        verbose: bool. Also add `--verbose` (TensorFlow's start-up logs). Defaults to `True`.
        default: the options' default; `argparse.SUPPRESS` on a subcommand's parser, so that
            `--debug` works before and after the subcommand. Defaults to `False`.
    """
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show the traceback of a user error"
    )
    if verbose:
        parser.add_argument(
            "--verbose",
            action="store_true",
            dest="framework_logs",
            default=default,
            help="keep TensorFlow's start-up logs (CUDA probes, CPU feature banners)",
        )


# === translate ===


def _add_translate_parser(subparsers):
    parser = subparsers.add_parser(
        "translate",
        help="translate sentences with an exported SavedModel or a saved Translator",
        description=(
            "Translates the SENTENCEs, or the lines of standard input (one sentence per line) "
            "when none is given or SENTENCE is '-'. Prints one translation per line."
        ),
    )
    parser.add_argument(
        "--model",
        required=True,
        help="SavedModel directory (keras_transformer.export), Translator .keras file or "
        "preset directory (Translator.save_to_preset); a base path of numbered versions "
        "(export --version) uses the highest",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=32,
        help="lines of standard input translated together (default: 32)",
    )
    parser.add_argument("--scores", action="store_true", help="print 'score<TAB>translation' lines")
    parser.add_argument(
        "--n-best",
        type=_positive_int,
        default=None,
        metavar="N",
        help="print the N best hypotheses of each sentence, best first, one per line as "
        "'INDEX ||| TRANSLATION ||| SCORE' (INDEX counts sentences from 0; N <= beam size; "
        "a SavedModel: N <= its translate_n_best columns)",
    )
    parser.add_argument(
        "--beam-size",
        type=_positive_int,
        default=None,
        help="beam size, 1 for greedy search (default: the model's; a SavedModel takes only "
        "the beam size it was exported with)",
    )
    parser.add_argument(
        "--engine",
        choices=("keras", "ctranslate2"),
        default="keras",
        help="'ctranslate2': MODEL is a directory written by `export --format ctranslate2` "
        "(default: keras, a SavedModel or .keras file)",
    )
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="text to translate")
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=_translate)


def _translate(args):
    from keras_transformer.export import latest_version

    try:
        # A model server's base path (`export --version N`) translates with its highest version.
        model = latest_version(args.model)
        if args.engine == "ctranslate2":
            backend = _CTranslate2Backend(model)
        else:
            backend = _load_translation_backend(model)
    except Exception as error:  # Any load failure is reported, not a traceback.
        _error(f"cannot load the model {args.model!r}: {type(error).__name__}: {error}")
        return 2
    if args.beam_size is not None or args.n_best is not None:
        try:
            backend.check_search_options(args.beam_size, args.n_best)
        except ValueError as error:
            _error(" ".join(str(error).split()))
            return 2
    if args.sentences and args.sentences != ["-"]:
        # argv was decoded with the file system encoding (surrogateescape): recover the bytes.
        batches = [[os.fsencode(sentence) for sentence in args.sentences]]
    else:
        batches = _stdin_batches(args.batch_size)

    status = 0
    offset = 0
    output = sys.stdout.buffer
    for batch in batches:
        try:
            hypotheses, truncated = backend.translate(batch, args.beam_size, args.n_best)
        except Exception as error:
            _error(
                f"sentences {offset + 1}-{offset + len(batch)} failed: "
                f"{type(error).__name__}: {error}"
            )
            # A failed sentence prints an empty line (no line at all with --n-best).
            hypotheses = [[] if args.n_best else [("", 0.0)] for _ in batch]
            truncated = [False] * len(batch)
            status = 1
        for index, flag in enumerate(truncated):
            if flag:
                _note(
                    f"sentence {offset + index + 1} is longer than the model's maximum source "
                    f"length{backend.limit}; only its beginning was translated"
                )
        for index, options in enumerate(hypotheses):
            for text, score in options:
                line = " ".join(text.split("\n"))
                if args.n_best:
                    line = f"{offset + index} ||| {line} ||| {float(score):.6f}"
                elif args.scores:
                    line = f"{float(score):.4f}\t{line}"
                output.write(line.encode("utf-8", errors="replace") + b"\n")
        output.flush()
        offset += len(batch)
    return status


class _SavedModelBackend:
    """Calls the signatures of an exported SavedModel: `serving_default`, and
    `translate_n_best` for n-best lists.

    Its search is fixed at export: `--beam-size` must be the exported beam size, and
    `--n-best N` at most the columns of `translate_n_best` (its first N are printed).
    """

    def __init__(self, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

        from keras_transformer.export import (
            INPUT_NAME,
            N_BEST_SIGNATURE_NAME,
            SIGNATURE_NAME,
            read_metadata,
        )

        self._tf = tf
        self._input_name = INPUT_NAME
        self._loaded = tf.saved_model.load(path)
        self._signature = self._loaded.signatures[SIGNATURE_NAME]
        self._n_best_signature = self._loaded.signatures.get(N_BEST_SIGNATURE_NAME)
        self._n_best_name = N_BEST_SIGNATURE_NAME
        metadata = read_metadata(path)
        self._beam_size = metadata.get("beam_size")
        self._columns = None
        if self._n_best_signature is not None:
            # (batch, num_hypotheses): static in the signature; the metadata says it too.
            columns = self._n_best_signature.structured_outputs["translations"].shape[-1]
            self._columns = columns if columns is not None else metadata.get("num_hypotheses")
        length = metadata.get("max_source_length")
        self.limit = (
            f" ({length} tokens, i.e. {length - 2} word pieces)" if length is not None else ""
        )

    def check_search_options(self, beam_size, num_hypotheses):
        if beam_size is not None and beam_size != self._beam_size:
            raise ValueError(
                "A SavedModel searches with the beam size it was exported with "
                f"({self._beam_size}): export another one for another `--beam-size`, or "
                "translate with a .keras Translator or `--engine ctranslate2`. "
                f"Received: beam_size={beam_size}"
            )
        if num_hypotheses is None:
            return
        if self._n_best_signature is None:
            raise ValueError(
                f"This SavedModel has no `{self._n_best_name}` signature (exported before "
                "n-best lists were): export it again for `--n-best`. "
                f"Received: n_best={num_hypotheses}"
            )
        if self._columns is not None and num_hypotheses > self._columns:
            raise ValueError(
                f"This SavedModel's `{self._n_best_name}` signature returns "
                f"{self._columns} hypotheses per sentence: `--n-best` must be at most "
                f"{self._columns} (export with a larger `--num-hypotheses` and `--beam-size` "
                f"for more). Received: n_best={num_hypotheses}"
            )

    def translate(self, batch, beam_size=None, num_hypotheses=None):
        """`(hypotheses, truncated)`: a list of `(text, score)` per sentence, and flags."""
        self.check_search_options(beam_size, num_hypotheses)
        inputs = {self._input_name: self._tf.constant(batch, self._tf.string)}
        if num_hypotheses is None:
            outputs = self._signature(**inputs)
            texts = [[text] for text in outputs["translations"].numpy()]
            scores = [[score] for score in outputs["scores"].numpy().tolist()]
        else:
            outputs = self._n_best_signature(**inputs)
            texts = outputs["translations"].numpy().tolist()  # (batch, columns), best first
            scores = outputs["scores"].numpy().tolist()
        hypotheses = []
        for row_texts, row_scores in zip(texts, scores, strict=True):
            if num_hypotheses is not None and not any(row_texts) and not any(row_scores):
                # An input without a token fills every column with "" and 0.0; as with the
                # other engines, it has one hypothesis. (Distinct hypotheses of a search
                # cannot all have the log probability 0.)
                row_texts, row_scores = row_texts[:1], row_scores[:1]
            options = zip(row_texts[: num_hypotheses or 1], row_scores, strict=False)
            hypotheses.append(
                [(text.decode("utf-8", errors="replace"), score) for text, score in options]
            )
        return hypotheses, outputs["truncated"].numpy().tolist()


class _KerasBackend:
    """Calls a `Translator` loaded from a `.keras` file or a preset directory."""

    def __init__(self, path):
        from keras_transformer.presets import load_saved_translator

        self._translator = load_saved_translator(path)
        length = self._translator.max_source_length
        self.limit = f" ({length} tokens, i.e. {length - 2} word pieces)"

    def check_search_options(self, beam_size, num_hypotheses):
        from keras_transformer.translator import check_search_options

        translator = self._translator
        beam_size = translator.beam_size if beam_size is None else beam_size
        check_search_options(beam_size, translator.alpha, num_hypotheses)

    def translate(self, batch, beam_size=None, num_hypotheses=None):
        """`(hypotheses, truncated)`: a list of `(text, score)` per sentence, and flags."""
        results = self._translator.translate(
            list(batch), beam_size=beam_size, num_hypotheses=num_hypotheses or 1
        )
        hypotheses = [[(option.text, option.score) for option in options] for options in results]
        return hypotheses, [options[0].truncated for options in results]


class _CTranslate2Backend(_KerasBackend):
    """Calls a `keras_transformer.ctranslate2.CTranslate2Translator`."""

    def __init__(self, path):
        from keras_transformer.ctranslate2 import CTranslate2Translator

        self._translator = CTranslate2Translator(path)
        length = self._translator.max_source_length
        self.limit = f" ({length} tokens, i.e. {length - 2} word pieces)"


def _load_translation_backend(path):
    if os.path.isfile(path) and path.endswith(".keras"):
        return _KerasBackend(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"no SavedModel directory, preset directory or .keras file at {path!r}"
        )
    from keras_transformer.presets import is_preset

    return _KerasBackend(path) if is_preset(path) else _SavedModelBackend(path)


def _stdin_batches(batch_size):
    """Lines of standard input (bytes, without the line break), `batch_size` at a time."""
    batch = []
    for line in sys.stdin.buffer:
        batch.append(line.rstrip(b"\r\n"))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


# === export ===


def _add_export_parser(subparsers):
    parser = subparsers.add_parser(
        "export",
        help="export a saved Translator (.keras or preset) as a TensorFlow SavedModel serving "
        "strings",
        description=(
            "Exports the Translator saved in TRANSLATOR (a .keras file or a preset directory, "
            "from any backend) as a "
            "TensorFlow SavedModel in OUTPUT. The export runs on the TensorFlow backend: under "
            "another KERAS_BACKEND it runs in a KERAS_BACKEND=tensorflow subprocess."
        ),
    )
    parser.add_argument(
        "translator", metavar="TRANSLATOR", help="Translator .keras file or preset directory"
    )
    parser.add_argument(
        "output", metavar="OUTPUT", help="directory to write (with --version, the base path)"
    )
    parser.add_argument(
        "--format",
        choices=("saved_model", "ctranslate2"),
        default="saved_model",
        help="'ctranslate2': a CTranslate2 model directory, for `translate --engine "
        "ctranslate2` (default: saved_model)",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        help="CTranslate2 weight type, e.g. int8, int8_float32, float16 (--format ctranslate2)",
    )
    parser.add_argument("--beam-size", type=_positive_int, default=None, help="beam size")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty")
    parser.add_argument(
        "--version",
        type=_positive_int,
        default=None,
        help="write OUTPUT/VERSION/, the layout TensorFlow Serving watches (OUTPUT is the "
        "model's base path); an existing version is refused unless --overwrite",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        default=None,
        help="replace an existing --version directory (without --version, OUTPUT is replaced)",
    )
    parser.add_argument(
        "--num-hypotheses",
        type=_positive_int,
        default=None,
        help="columns of the translate_n_best signature (default: the beam size)",
    )
    parser.add_argument(
        "--warmup-batch-size",
        type=_positive_int,
        default=None,
        help="largest request batch the TF Serving warm-up requests cover (default: the "
        "translator's batch size)",
    )
    parser.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_false",
        help="do not compile the search with XLA",
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=_export)


def _export(args):
    # On JAX and PyTorch, `export_saved_model` re-runs this command under
    # KERAS_BACKEND=tensorflow in a subprocess.
    from keras_transformer.export import export_saved_model

    written = args.output
    saved_model_only = {
        "num_hypotheses": args.num_hypotheses,
        "warmup_batch_size": args.warmup_batch_size,
    }
    try:
        if args.format == "ctranslate2":
            for name, value in saved_model_only.items():
                if value is not None:
                    raise ValueError(
                        f"`--{name.replace('_', '-')}` applies to `--format saved_model` only. "
                        f"Received: {name}={value!r}"
                    )
            from keras_transformer.export import export_ctranslate2

            written = export_ctranslate2(
                args.translator,
                args.output,
                quantization=args.quantization,
                beam_size=args.beam_size,
                alpha=args.alpha,
                overwrite=args.overwrite,
                version=args.version,
            )
        elif args.quantization is not None:
            raise ValueError(
                "`--quantization` applies to `--format ctranslate2` only. "
                f"Received: quantization={args.quantization!r}"
            )
        else:
            written = export_saved_model(
                args.translator,
                args.output,
                beam_size=args.beam_size,
                alpha=args.alpha,
                jit_compile=args.jit_compile,
                overwrite=args.overwrite,
                version=args.version,
                **saved_model_only,
            )
    except Exception as error:  # Reported, not a traceback.
        _error(f"cannot export {args.translator!r}: {type(error).__name__}: {error}")
        return 1
    print(f"{PROGRAM}: wrote {written}", file=sys.stderr)
    return 0


# === helpers ===


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return value


def _note(message):
    print(f"{PROGRAM}: note: {message}", file=sys.stderr)


def _error(message):
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
