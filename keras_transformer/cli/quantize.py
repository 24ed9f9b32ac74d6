"""`keras-transformer quantize`: a saved Translator with int8 weights (`Translator.quantize`),
written as a `.keras` file or a preset directory that loads like any other."""

import argparse
import os
import sys

from keras_transformer._checks import int8_dot_instructions
from keras_transformer.cli.common import PROGRAM, add_common_arguments, print_error, print_note

# What `quantize` says on a CPU without int8 dot-product instructions (docs/quantization.md).
NO_FAST_INT8 = (
    "this CPU has no int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI or AMX): int8 "
    "halves the weights' memory but does not translate faster here (measured on an AVX2-only "
    "AMD EPYC: 27.0 CPU-s int8 against 26.3 float32; docs/quantization.md)"
)


def add_quantize_parser(subparsers):
    """Registers the `quantize` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "quantize",
        help="write a saved Translator with int8 weights (a .keras file or a preset directory)",
        description=(
            "Loads the Translator saved in TRANSLATOR (a .keras file, a preset directory or a "
            "training run's directory), quantizes its attention and feed-forward projections "
            "and its embedding to int8 (Keras' int8 kernels; docs/quantization.md) and writes "
            "it to OUTPUT: a .keras file when OUTPUT ends in .keras, else a preset directory. "
            "The result loads, translates, serves and exports (export OUTPUT DIR) with no "
            "extra option."
        ),
    )
    parser.add_argument(
        "translator",
        metavar="TRANSLATOR",
        help="Translator .keras file, preset directory or training run directory",
    )
    parser.add_argument(
        "output", metavar="OUTPUT", help="a .keras file, or a preset directory to write"
    )
    parser.add_argument(
        "--mode", choices=("int8",), default="int8", help="quantization mode (default: int8)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUTPUT if it exists"
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_quantize)


def run_quantize(args):
    """Handler of `quantize`: returns the exit status."""
    from keras_transformer.translator import load_keras_translator

    output = os.fspath(args.output)
    if os.path.lexists(output) and not args.overwrite:
        print_error(f"cannot quantize: OUTPUT {output!r} exists (add --overwrite to replace it)")
        return 2
    try:
        translator = load_keras_translator(args.translator)
        translator.quantize(args.mode)
        if output.endswith(".keras"):
            translator.save(output)
        else:
            translator.save_to_preset(output)
    except (ValueError, OSError) as error:
        print_error(f"cannot quantize {args.translator!r}: {type(error).__name__}: {error}")
        return 2
    print(f"{PROGRAM}: wrote {output} ({args.mode}, {_size(output) / 2**20:.1f} MiB)", file=sys.stderr)
    if int8_dot_instructions() == ():  # Unknown (`None`): nothing said.
        print_note(NO_FAST_INT8)
    return 0


def _size(path):
    """Bytes of a file, or of the files in a directory."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )
