"""`keras-transformer export`: a saved Translator as a TensorFlow SavedModel, a CTranslate2
model directory or a Hugging Face MarianMTModel directory (`keras_transformer.export`)."""

import argparse
import os
import sys

from keras_transformer.cli.common import (
    PROGRAM,
    add_common_arguments,
    cli_spelling,
    positive_int,
    print_error,
)
from keras_transformer.engines.names import CTRANSLATE2, KERAS_FILE, SAVED_MODEL

# The Python names of the options, as errors of the exporters spell them.
EXPORT_OPTIONS = {
    "overwrite": "--overwrite",
    "output": "OUTPUT",
    "version": "--version",
    "beam_size": "--beam-size",
    "num_hypotheses": "--num-hypotheses",
    "warmup_batch_size": "--warmup-batch-size",
    "max_request_size": "--max-request-size",
    "quantization": "--quantization",
}


def add_export_parser(subparsers):
    """Registers the `export` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "export",
        help="export a saved Translator (.keras, preset or run directory) as a TensorFlow "
        "SavedModel serving strings, a CTranslate2 model (--format ctranslate2) or a Hugging "
        "Face MarianMTModel (--format marian)",
        description=(
            "Exports the Translator saved in TRANSLATOR (a .keras file, a preset directory or "
            "a training run's directory, from any backend) as a TensorFlow SavedModel in "
            "OUTPUT; with --format ctranslate2, as a CTranslate2 model, and with --format "
            "marian, as a Hugging Face MarianMTModel directory (for transformers' "
            "MarianMTModel and MarianTokenizer). The SavedModel export runs on the TensorFlow "
            "backend: under another KERAS_BACKEND it runs in a KERAS_BACKEND=tensorflow "
            "subprocess."
        ),
    )
    parser.add_argument(
        "translator",
        metavar="TRANSLATOR",
        help="Translator .keras file, preset directory or training run directory (its "
        "translator.keras)",
    )
    parser.add_argument(
        "output", metavar="OUTPUT", help="directory to write (with --version, the base path)"
    )
    parser.add_argument(
        "--format",
        choices=(SAVED_MODEL, CTRANSLATE2, "marian"),
        default=SAVED_MODEL,
        help="'ctranslate2': a CTranslate2 model directory, for `translate --engine "
        "ctranslate2`; 'marian': a Hugging Face MarianMTModel directory, for transformers "
        "(default: saved_model)",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        help="--format saved_model: 'int8' exports the translator with Keras int8 weights "
        "(as `keras-transformer quantize`); --format ctranslate2: CTranslate2's weight type, "
        "e.g. int8, int8_float32, float16",
    )
    parser.add_argument("--beam-size", type=positive_int, default=None, help="beam size")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty")
    parser.add_argument(
        "--version",
        type=positive_int,
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
        type=positive_int,
        default=None,
        help="columns of the translate_n_best signature (default: the beam size)",
    )
    parser.add_argument(
        "--warmup-batch-size",
        type=positive_int,
        default=None,
        help="largest request batch the TF Serving warm-up requests cover (default: the "
        "translator's batch size)",
    )
    parser.add_argument(
        "--max-request-size",
        type=positive_int,
        default=None,
        help="most sentences one request to the SavedModel may hold; a larger request fails "
        "with a message naming the limit (default: 1024; the Python and command-line clients "
        "split larger inputs into requests of this size)",
    )
    parser.add_argument(
        "--no-jit-compile",
        dest="jit_compile",
        action="store_false",
        help="do not compile the search with XLA",
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_export)


def run_export(args):
    """Handler of `export`: returns the exit status."""
    # Loads Keras (seconds): only once the command runs. On JAX and PyTorch,
    # `export_saved_model` runs the export in a KERAS_BACKEND=tensorflow subprocess.
    from keras_transformer.export import export_ctranslate2, export_saved_model

    translator = run_translator(args.translator)
    written = args.output
    saved_model_only = {
        "num_hypotheses": args.num_hypotheses,
        "warmup_batch_size": args.warmup_batch_size,
    }
    if args.max_request_size is not None:
        saved_model_only["max_request_size"] = args.max_request_size
    try:
        for name, value in saved_model_only.items():
            if args.format != SAVED_MODEL and value is not None:
                raise ValueError(
                    f"`--{name.replace('_', '-')}` applies to `--format saved_model` only. "
                    f"Received: {name}={value!r}"
                )
        if args.format == "marian":
            from keras_transformer.export import export_marian

            written = export_marian(args.translator, args.output, overwrite=bool(args.overwrite))
        elif args.format == CTRANSLATE2:
            written = export_ctranslate2(
                translator,
                args.output,
                quantization=args.quantization,
                beam_size=args.beam_size,
                alpha=args.alpha,
                overwrite=args.overwrite,
                version=args.version,
            )
        elif args.quantization not in (None, "int8"):
            raise ValueError(
                "`--quantization` of a SavedModel must be 'int8' (CTranslate2's other weight "
                f"types apply to `--format ctranslate2`). Received: quantization={args.quantization!r}"
            )
        else:
            if args.quantization == "int8":
                from keras_transformer.translator import load_keras_translator

                translator = load_keras_translator(translator)
                translator.quantize("int8")
            written = export_saved_model(
                translator,
                args.output,
                beam_size=args.beam_size,
                alpha=args.alpha,
                jit_compile=args.jit_compile,
                overwrite=args.overwrite,
                version=args.version,
                **saved_model_only,
            )
    except (ValueError, OSError) as error:  # The user's to fix: a bad option, path or file, a full disk.
        message = cli_spelling(f"{type(error).__name__}: {error}", EXPORT_OPTIONS)
        print_error(f"cannot export {args.translator!r}: " + " ".join(message.split()))
        return 2
    except Exception as error:  # Reported, not a traceback.
        print_error(f"cannot export {args.translator!r}: {type(error).__name__}: {error}")
        return 1
    print(f"{PROGRAM}: wrote {written}", file=sys.stderr)
    return 0


def run_translator(path):
    """`path`, or the `translator.keras` of a training run's output directory `path` (a
    directory that is no preset: a preset holds `metadata.json`)."""
    keras_file = os.path.join(path, KERAS_FILE)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "metadata.json")):
        if os.path.isfile(keras_file):
            return keras_file
    return path
