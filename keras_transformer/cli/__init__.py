"""The `keras-transformer` command.

```
keras-transformer translate --model exported/ "¿Dónde está?" "Hola."
printf 'Hola.\\n¿Dónde está?\\n' | keras-transformer translate --model exported/
keras-transformer export translator.keras exported/
keras-transformer import --from marian opus-mt-en-de/ en-de/
keras-transformer train --config configs/demo.toml
keras-transformer evaluate --model runs/demo --sources test.es --references test.en
keras-transformer serve --model runs/demo --port 5000
```

`translate` opens its model with `keras_transformer.engines.load_translator`: an exported
SavedModel (`keras_transformer.export`, with TensorFlow and tensorflow-text only), a CTranslate2
directory (`export --format ctranslate2`), a `.keras` file written by `Translator.save`, a
preset directory written by `Translator.save_to_preset` or a training run's directory; the
engine is found from the files unless `--engine` names it. `export` reads a `.keras` file or
a preset directory. Given a model server's base path (what `export --version N` writes into:
one directory per version, named by its number), `translate` uses its highest version, as
TensorFlow Serving does. Without sentences on the command line it reads
standard input, one sentence per line, and writes one translation per line, flushing after
each batch. Inputs longer than the model's maximum source length are
truncated (a note on standard error says which); a batch that fails prints empty lines and an
error on standard error, and the exit status is then 1.

`translate --target-prefix FILE` continues each translation from its line of FILE;
`--sampling-topk K --sampling-topp P --sampling-temperature T --seed S` sample (greedy
search) instead of searching; `--alignments` appends ` ||| ` and the word alignments
(`SOURCE-TARGET` word indices). `score --sources FILE --translations FILE` prints the log
probability of each given translation (`--token-scores`: per token too).

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
feature banners) are silenced unless `--verbose` is given or `TF_CPP_MIN_LOG_LEVEL=0` is set.
A command whose output's reader has gone (`... | head`) stops quietly, with the status 141
(128 + SIGPIPE, what a shell reports for `yes | head`'s `yes`).

`evaluate` scores a model's translations of a file (or translations made already) with
sacreBLEU: BLEU, chrF and TER with their signatures, and `--compare` for sacreBLEU's paired
bootstrap resampling (see `keras_transformer.cli.evaluate`).

Each subcommand is a module of this package (`translate`, `score`, `export`, `importing`,
`quantize`, `train`, `evaluate`, `serve`: `SUBCOMMANDS`) with an
`add_<name>_parser(subparsers)` function that registers its arguments and its handler
`run_<name>(args) -> exit status`; `common` holds what they share. The modules import no
framework at import time, so `--help` loads none.
"""

import argparse
import sys

from keras_transformer.cli.common import (
    CLOSED_PIPE_STATUS,
    PROGRAM,
    add_common_arguments,
    quiet_framework_logs,
    run_handler,
    standard_output_gone,
    user_errors,
)
from keras_transformer.cli.evaluate import add_evaluate_parser
from keras_transformer.cli.export import add_export_parser
from keras_transformer.cli.importing import add_import_parser
from keras_transformer.cli.quantize import add_quantize_parser
from keras_transformer.cli.score import add_score_parser
from keras_transformer.cli.serve import add_serve_parser
from keras_transformer.cli.train import add_train_parser
from keras_transformer.cli.translate import add_translate_parser

# The subcommands in `--help`'s order: the module of each, its `add_<name>_parser`.
SUBCOMMANDS = {
    "translate": add_translate_parser,
    "score": add_score_parser,
    "export": add_export_parser,
    "importing": add_import_parser,
    "quantize": add_quantize_parser,
    "train": add_train_parser,
    "evaluate": add_evaluate_parser,
    "serve": add_serve_parser,
}

__all__ = [
    "PROGRAM",
    "add_common_arguments",
    "build_parser",
    "main",
    "quiet_framework_logs",
    "run_handler",
    "user_errors",
]


def main(argv=None):
    """Runs the `keras-transformer` command.

    Args:
        argv: list of str. The arguments, without the program name. Defaults to `None`:
            `sys.argv[1:]`.

    Returns:
        int, the exit status.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:  # After `--help` (or a usage error): quiet if its reader has gone.
        standard_output_gone()
        raise
    except BrokenPipeError:  # `--help | head` with unbuffered output (`python -u`).
        if standard_output_gone():
            return CLOSED_PIPE_STATUS
        raise
    # `train --verbose 2` (0.2.0's progress option) leaves a string: not the logs flag.
    verbose = args.framework_logs is True
    return run_handler(args.handler, args, debug=args.debug, verbose=verbose)


def build_parser():
    """The `argparse.ArgumentParser` of the command, one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description='The Transformer of "Attention Is All You Need" for Keras 3.',
    )
    add_common_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_parser in SUBCOMMANDS.values():
        add_parser(subparsers)
    return parser


if __name__ == "__main__":
    sys.exit(main())
