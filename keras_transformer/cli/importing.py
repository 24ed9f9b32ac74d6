"""`keras-transformer import`: a model of another toolkit as one of our preset directories
(`keras_transformer.formats.marian`)."""

import argparse
import sys

from keras_transformer.cli.common import (
    PROGRAM,
    add_common_arguments,
    cli_spelling,
    positive_int,
    print_error,
)

# The Python names of the arguments, as errors of the importer spell them.
IMPORT_OPTIONS = {
    "overwrite": "--overwrite",
    "output": "OUT",
    "max_source_length": "--max-source-length",
    "sinusoid_frequencies": "--sinusoid-frequencies",
}


def add_import_parser(subparsers):
    """Registers the `import` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "import",
        help="import an OPUS-MT / Marian model (Hugging Face or Marian .npz) as a Translator preset",
        description=(
            "Reads SRC, a Hugging Face MarianMTModel directory (config.json, model.safetensors "
            "or pytorch_model.bin, source.spm, target.spm, vocab.json: what every OPUS-MT model "
            "on the Hugging Face Hub holds) or an unzipped OPUS-MT release (a Marian .npz "
            "checkpoint, *.vocab.yml, source.spm, target.spm, decoder.yml; SRC may name the "
            ".npz file when the directory holds several), and writes OUT, a Translator preset "
            "directory for `translate --model OUT` and `export OUT ...`."
        ),
    )
    parser.add_argument("--from", dest="source_format", choices=("marian",), required=True)
    parser.add_argument("source", metavar="SRC", help="the model directory to read")
    parser.add_argument("output", metavar="OUT", help="the preset directory to write")
    parser.add_argument(
        "--max-source-length",
        type=positive_int,
        default=None,
        help="longest source in tokens (default: 256, or the model's max_position_embeddings)",
    )
    parser.add_argument(
        "--sinusoid-frequencies",
        choices=("paper", "marian"),
        default=None,
        help=(
            "position encoding frequencies (default: what the source's toolkit computes: "
            "'paper' for a Hugging Face directory, 'marian', Marian C++'s, for a .npz; "
            "'paper' on a .npz computes what CTranslate2's converter makes of it)"
        ),
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_import)


def run_import(args):
    """Handler of `import`: returns the exit status (2 for a directory that does not fit)."""
    from keras_transformer.export import import_marian

    try:
        import_marian(
            args.source,
            args.output,
            max_source_length=args.max_source_length,
            overwrite=args.overwrite,
            sinusoid_frequencies=args.sinusoid_frequencies,
        )
    except ValueError as error:
        print_error(f"cannot import {args.source!r}: " + cli_spelling(str(error), IMPORT_OPTIONS))
        return 2
    print(f"{PROGRAM}: wrote {args.output}", file=sys.stderr)
    return 0
