"""`keras-transformer translate`: sentences from the command line or standard input, or a
whole file (`--input`/`--output`: `keras_transformer.documents.files`), through any engine
(`keras_transformer.engines`). See `keras_transformer.cli` for the output formats.
"""

import argparse
import dataclasses
import os
import sys

from keras_transformer import engines, files
from keras_transformer.cli.common import (
    add_common_arguments,
    add_compilation_cache_argument,
    cli_spelling,
    non_negative_int,
    open_compilation_cache,
    positive_int,
    print_error,
    print_note,
)
from keras_transformer.documents import files as documents
from keras_transformer.engines.names import ENGINES

# The Python names of the options, as errors of the engines spell them.
TRANSLATE_OPTIONS = {
    "num_hypotheses": "--n-best",
    "n_best": "--n-best",
    "beam_size": "--beam-size",
    "sampling_topk": "--sampling-topk",
    "sampling_topp": "--sampling-topp",
    "sampling_temperature": "--sampling-temperature",
    "seed": "--seed",
    "target_prefix": "--target-prefix",
}


def add_translate_parser(subparsers):
    """Registers the `translate` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "translate",
        help="translate sentences with an exported SavedModel or a saved Translator",
        description=(
            "Translates the SENTENCEs, or the lines of standard input (one sentence per line) "
            "when none is given or SENTENCE is '-'. Prints one translation per line. With "
            "--input FILE --output FILE, translates a whole file instead."
        ),
    )
    parser.add_argument(
        "--model",
        required=True,
        help="SavedModel directory (keras_transformer.export), CTranslate2 directory (export "
        "--format ctranslate2), Translator .keras file, preset directory "
        "(Translator.save_to_preset) or training run directory; a base path of numbered "
        "versions (export --version) uses the highest",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=32,
        help="lines of standard input translated together (default: 32)",
    )
    parser.add_argument("--scores", action="store_true", help="print 'score<TAB>translation' lines (6 decimals, as --n-best)")
    parser.add_argument(
        "--n-best",
        type=positive_int,
        default=None,
        metavar="N",
        help="print the N best hypotheses of each sentence, best first, one per line as "
        "'INDEX ||| TRANSLATION ||| SCORE' (INDEX counts sentences from 0; N <= beam size; "
        "a SavedModel: N <= its translate_n_best columns)",
    )
    parser.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        help="beam size, 1 for greedy search (default: the model's; a SavedModel takes only "
        "the beam size it was exported with)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="the engine MODEL is for: keras (.keras file, preset or run directory), "
        "saved_model or ctranslate2 (default: found from MODEL's files)",
    )
    parser.add_argument(
        "--target-prefix",
        metavar="FILE",
        default=None,
        help="a file with one target prefix per sentence (an empty line: none): each "
        "translation starts with its prefix and continues from it (SavedModel: needs its "
        "translate_with_prefix signature)",
    )
    parser.add_argument(
        "--sampling-topk",
        type=non_negative_int,
        default=None,
        metavar="K",
        help="sample each token from the K most probable (0: the whole vocabulary, 1: "
        "greedy); any --sampling-* option samples, with --beam-size 1 (the default then)",
    )
    parser.add_argument(
        "--sampling-topp",
        type=float,
        default=None,
        metavar="P",
        help="sample from the smallest set of most probable tokens whose probabilities reach "
        "P, in (0, 1] (nucleus sampling; default 1)",
    )
    parser.add_argument(
        "--sampling-temperature",
        type=float,
        default=None,
        metavar="T",
        help="divide the logits by T > 0 before sampling (default 1)",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        metavar="S",
        help="seed of the sampling (default 0): the same seed, inputs and --batch-size give the "
        "same samples with one engine and backend (the engines' generators differ)",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="append ' ||| ' and the word alignments 'SOURCE-TARGET ...' (word indices from 0; "
        "each target word piece linked to the source piece with the highest cross-attention "
        "of the last decoder layer, averaged over its heads) to each translation line",
    )
    parser.add_argument(
        "--no-segment",
        dest="segment",
        action="store_false",
        help="translate each line whole, as before 0.4 (a line too long for the model is then "
        "truncated) instead of sentence by sentence",
    )
    parser.add_argument(
        "--source-language",
        default=None,
        metavar="CODE",
        help="the source language (ISO 639-1, e.g. es) for the sentence segmenter's rules "
        "(default: its language-independent rules)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "html"),
        default="text",
        help="'html': each input line is HTML (a fragment or a document) whose texts are "
        "translated and whose markup is kept, inline tags around the words they wrapped "
        "(LibreTranslate's format; not with --n-best, --scores, --alignments or "
        "--target-prefix) (default: text)",
    )
    parser.add_argument(
        "--input",
        metavar="FILE",
        default=None,
        help="translate this file whole, its format chosen by its extension: "
        + ", ".join(documents.FORMATS)
        + " (.html/.htm and .docx with their optional dependencies); needs --output",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        default=None,
        help="where --input's translation is written, in the same format ('-': standard "
        "output); written only once the whole file is translated",
    )
    add_compilation_cache_argument(parser)
    parser.add_argument("sentences", nargs="*", metavar="SENTENCE", help="text to translate")
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_translate)


def run_translate(args):
    """Handler of `translate`: returns the exit status."""
    if (args.input is not None or args.output is not None) and not _check_file_arguments(args):
        return 2
    # Loads the framework of the engine (seconds): only once the command runs.
    from keras_transformer.documents.texts import translate_texts
    from keras_transformer.translation import SearchOptions

    if args.format == "html":
        refused = _sentence_output_options(args)
        if refused:
            print_error(
                f"--format html keeps the markup of the best translation: it cannot be used "
                f"with {', '.join(refused)}"
            )
            return 2
    if not open_compilation_cache(args.compilation_cache):
        return 2
    try:
        translator = engines.load_translator(args.model, engine=args.engine)
    except Exception as error:  # Any load failure is reported, not a traceback.
        # One line: a preset's problems are listed one per line in the message.
        message = " ".join(str(error).split())
        print_error(f"cannot load the model {args.model!r}: {type(error).__name__}: {message}")
        return 2
    from_arguments = bool(args.sentences) and args.sentences != ["-"]
    if from_arguments:
        translator.expect(len(args.sentences))
    prefixes = None
    if args.target_prefix is not None:
        with open(args.target_prefix, "rb") as file:  # A missing file: OSError, exit 2.
            prefixes = [line.rstrip(b"\r\n") for line in file]
    search = SearchOptions(
        beam_size=args.beam_size,
        num_hypotheses=args.n_best or 1,
        sampling_topk=args.sampling_topk,
        sampling_topp=args.sampling_topp,
        sampling_temperature=args.sampling_temperature,
        seed=args.seed,
        prefixed=prefixes is not None,
        alignments=bool(args.alignments),
    )
    asked = search.sampling or args.alignments or args.beam_size is not None
    if asked or prefixes is not None or args.n_best is not None:
        try:
            translator.check(dataclasses.replace(search, num_hypotheses=args.n_best))
        except ValueError as error:
            print_error(cli_spelling(" ".join(str(error).split()), TRANSLATE_OPTIONS))
            return 2
    length = translator.max_source_length
    limit = f" ({length} tokens, i.e. {length - 2} word pieces)" if length is not None else ""
    if args.input is not None:
        return _translate_input_file(args, translator, search, limit, translate_texts)
    if from_arguments:
        # argv was decoded with the file system encoding (surrogateescape): recover the bytes.
        batches = [[os.fsencode(sentence) for sentence in args.sentences]]
    else:
        batches = _stdin_batches(args.batch_size)

    status = 0
    offset = 0
    output = sys.stdout.buffer
    for batch in batches:
        batch_prefixes = None
        if prefixes is not None:
            if len(prefixes) < offset + len(batch):
                print_error(
                    f"--target-prefix {args.target_prefix} has {len(prefixes)} lines, fewer "
                    "than the sentences"
                )
                return 2
            batch_prefixes = prefixes[offset : offset + len(batch)]
        try:
            if args.format == "html":
                results = _translate_markup(translator, batch, search, args, translate_texts)
            elif args.segment:  # Each line a whole text: sentences, long ones cut, joined.
                results = translate_texts(
                    translator,
                    list(batch),
                    search,
                    language=args.source_language,
                    prefixes=batch_prefixes,
                )
            else:
                results = translator.run(list(batch), search, batch_prefixes)
            hypotheses = [
                [(option.text, option.score, option.word_alignments) for option in found]
                for found in results
            ]
            truncated = [found[0].truncated for found in results]
        except Exception as error:
            print_error(
                f"input lines {offset + 1}-{offset + len(batch)} failed: "
                f"{type(error).__name__}: {error}"
            )
            # A failed sentence prints an empty line (no line at all with --n-best).
            hypotheses = [[] if args.n_best else [("", 0.0, [])] for _ in batch]
            truncated = [False] * len(batch)
            status = 1
        for index, flag in enumerate(truncated):
            if flag:
                # Input lines count from 1 (as editors do); n-best INDEX from 0 (Moses).
                where = f"input line {offset + index + 1}"
                if args.n_best:
                    where += f" (n-best INDEX {offset + index})"
                print_note(
                    f"{where} is longer than the model's maximum source "
                    f"length{limit}; only its beginning was translated"
                )
        for index, found in enumerate(hypotheses):
            for text, score, links in found:
                line = " ".join(text.split("\n"))
                if args.alignments:
                    line += " ||| " + " ".join(
                        f"{source}-{target}" for source, target in links or []
                    )
                if args.n_best:
                    line = f"{offset + index} ||| {line} ||| {float(score):.6f}"
                elif args.scores:
                    line = f"{float(score):.6f}\t{line}"
                output.write(line.encode("utf-8", errors="replace") + b"\n")
        output.flush()
        offset += len(batch)
    if prefixes is not None and len(prefixes) > offset:
        print_error(
            f"--target-prefix {args.target_prefix} has {len(prefixes)} lines, more than the "
            f"{offset} sentences"
        )
        return 2
    return status


def _translate_markup(translator, batch, search, args, translate_texts):
    """Each line of `batch` as HTML (`documents.html.translate_html`): its texts translated
    whole (with word alignments where the engine has them), its markup kept."""
    from keras_transformer.documents.html import translate_html
    from keras_transformer.translation import Translation

    search = dataclasses.replace(
        search, num_hypotheses=None, alignments=translator.capabilities.alignments
    )
    truncated = False

    def translate(texts):
        nonlocal truncated
        found = translate_texts(
            translator, texts, search, language=args.source_language, segment=args.segment
        )
        truncated = truncated or any(result.truncated for result in found)
        return found

    results = []
    for line in batch:
        truncated = False
        text = translate_html(line.decode("utf-8", "replace"), translate)
        results.append([Translation(text, 0.0, None, truncated, None, None)])
    return results


def _sentence_output_options(args):
    """The options given that print per-sentence output (refused with whole documents)."""
    return [
        flag
        for flag, given in (
            ("--n-best", args.n_best is not None),
            ("--scores", args.scores),
            ("--alignments", args.alignments),
            ("--target-prefix", args.target_prefix is not None),
        )
        if given
    ]


def _check_file_arguments(args):
    """Whether `--input`/`--output` are given together and without the options of sentence
    output (an error printed for the first that is not)."""
    if args.input is None:
        print_error("--output needs --input FILE (a file to translate)")
        return False
    refused = ["SENTENCE arguments"] if args.sentences else []
    refused += _sentence_output_options(args)
    if refused:
        print_error(f"--input translates a whole file: it cannot be used with {', '.join(refused)}")
        return False
    if args.output is None:
        print_error("--input needs --output FILE (or '-' for standard output)")
        return False
    extension = documents.extension_of(args.input)
    if extension not in documents.available_formats():
        print_error(
            f"--input {args.input}: cannot translate {extension or 'files without an extension'}"
            f" (the extensions are {', '.join(documents.available_formats())})"
        )
        return False
    output_format = documents.FORMATS.get(documents.extension_of(args.output))
    if args.output != "-" and output_format != documents.FORMATS[extension]:
        print_error(
            f"--output {args.output} must name a file of --input's format ({extension}): the "
            "translation keeps the input's format"
        )
        return False
    if args.output != "-" and os.path.abspath(args.output) == os.path.abspath(args.input):
        print_error(f"--output {args.output} is --input: write the translation elsewhere")
        return False
    return True


def _translate_input_file(args, translator, search, limit, translate_texts):
    """`--input`/`--output`: the file's texts translated whole (`translate_texts`: sentence
    by sentence unless `--no-segment`, with word alignments where the engine has them, for
    the markup of HTML and .docx); the output written atomically once all is translated."""
    try:
        with open(args.input, "rb") as file:
            data = file.read()
    except OSError as error:
        print_error(f"cannot read --input {args.input}: {error.strerror or error}")
        return 2
    truncated = 0
    search = dataclasses.replace(
        search, num_hypotheses=None, alignments=translator.capabilities.alignments
    )

    def translate(texts):
        nonlocal truncated
        results = []
        for start in range(0, len(texts), args.batch_size):
            results += translate_texts(
                translator,
                texts[start : start + args.batch_size],
                search,
                language=args.source_language,
                segment=args.segment,
            )
        truncated += sum(bool(result.truncated) for result in results)
        return results

    try:
        output, _ = documents.translate_file(data, args.input, translate)
    except ValueError as error:
        print_error(f"--input {args.input}: {' '.join(str(error).split())}")
        return 2
    except Exception as error:
        print_error(f"--input {args.input} failed: {type(error).__name__}: {error}")
        return 1
    if truncated:
        print_note(
            f"{truncated} text(s) of {args.input} longer than the model's maximum source "
            f"length{limit}: only their beginning was translated"
        )
    if args.output == "-":
        sys.stdout.buffer.write(output)
        sys.stdout.buffer.flush()
    else:
        try:
            files.write_bytes(args.output, output)
        except OSError as error:
            print_error(f"cannot write --output {args.output}: {error.strerror or error}")
            return 2
    return 0


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
