"""`keras-transformer score`: the log probability of given translations, through any engine
that can score (`keras_transformer.engines`: a Keras `Translator`, CTranslate2)."""

import argparse
import sys

from keras_transformer import engines
from keras_transformer.cli.common import add_common_arguments, positive_int, print_error


def add_score_parser(subparsers):
    """Registers the `score` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "score",
        help="score given translations: log p(translation | source), per sentence and token",
        description=(
            "Prints, for each line pair of SOURCES and TRANSLATIONS, the log probability of the "
            "translation given the source (teacher forcing, the end token included), as "
            "'SCORE' or, with --token-scores, 'SCORE<TAB>TOKEN:LOGPROB ...'."
        ),
    )
    parser.add_argument("--model", required=True, help="as for translate (not a SavedModel)")
    parser.add_argument("--sources", required=True, metavar="FILE", help="one source per line")
    parser.add_argument(
        "--translations", required=True, metavar="FILE", help="one translation per line"
    )
    parser.add_argument(
        "--engine",
        choices=("keras", "ctranslate2"),
        default=None,
        help="the engine MODEL is for (default: found from MODEL's files)",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=32, help="pairs scored together (default: 32)"
    )
    parser.add_argument(
        "--token-scores", action="store_true", help="also print each target token's log probability"
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_score)


def run_score(args):
    """Handler of `score`: returns the exit status."""

    sources, translations = _lines(args.sources), _lines(args.translations)
    if len(sources) != len(translations):
        print_error(
            f"--sources has {len(sources)} lines and --translations {len(translations)}: "
            "they must pair up"
        )
        return 2
    try:
        translator = engines.load_translator(args.model, engine=args.engine)
    except Exception as error:  # Any load failure is reported, not a traceback.
        print_error(f"cannot load the model {args.model!r}: {type(error).__name__}: {error}")
        return 2
    if not translator.capabilities.scoring:
        print_error(
            f"the {type(translator).__name__} engine cannot score (use a .keras Translator or "
            "a CTranslate2 model)"
        )
        return 2
    output = sys.stdout.buffer
    for start in range(0, len(sources), args.batch_size):
        stop = start + args.batch_size
        for result in translator.score(sources[start:stop], translations[start:stop]):
            line = f"{result.score:.6f}"
            if args.token_scores:
                pairs = zip(result.target_tokens, result.token_scores, strict=True)
                line += "\t" + " ".join(f"{token}:{value:.6f}" for token, value in pairs)
            output.write(line.encode("utf-8", errors="replace") + b"\n")
        output.flush()
    return 0


def _lines(path):
    """The lines of a file, as bytes without their line breaks (OSError: exit 2)."""
    with open(path, "rb") as file:
        return [line.rstrip(b"\r\n") for line in file]
