"""`keras-transformer evaluate`: BLEU, chrF and TER (sacreBLEU, with their signatures) of a
model's translations of a file, or of translations already made, against references; and
sacreBLEU's paired bootstrap resampling against another system.

```
keras-transformer evaluate --model runs/demo --sources test.es --references test.en
keras-transformer evaluate --run runs/demo
keras-transformer evaluate --hypotheses mine.en --references test.en --compare baseline.en
keras-transformer evaluate --hypotheses mine.en --references test.en --json
```

Files hold one sentence per line (UTF-8; `.gz` files are read compressed; a line of more than
1 MiB, `keras_transformer.datasets.corpus.MAX_LINE_BYTES`, is refused). Hypotheses and
references are read as sacreBLEU's command line reads them (trailing whitespace removed), so
the figures and signatures are those of `sacrebleu REFERENCES -i HYPOTHESES -m bleu chrf
ter` (and `sacrebleu REFERENCES -i BASELINE HYPOTHESES --paired-bs` for `--compare`), except
that a leading byte order mark (which sacreBLEU scores as text) is removed.

`--run DIR` scores a training run on its own test split: its translator (`translator.keras`,
else its `preset/`) translates `DIR/test.src` and is scored against `DIR/test.ref`, the files
`train` writes (`keras_transformer.training.run.write_held_out`), as `--model`, `--sources` and
`--references` would.
"""

import argparse
import json
import os
import time

from keras_transformer import engines
from keras_transformer.cli.common import add_common_arguments, positive_int, print_error
from keras_transformer.cli.translate import ENGINES
from keras_transformer.datasets.corpus import text_lines
from keras_transformer.training.scores import METRICS, paired_bootstrap, score_corpus


def add_evaluate_parser(subparsers):
    """Registers the `evaluate` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "evaluate",
        help="score translations (BLEU, chrF, TER with sacreBLEU) against references",
        description=(
            "Translates SOURCES with MODEL (any engine translate takes), or reads translations "
            "made already (--hypotheses), and scores them against the references with "
            "sacreBLEU: BLEU, chrF and TER with their signatures. --run scores a training run "
            "on its own test split. --compare runs sacreBLEU's paired bootstrap resampling "
            "against another system's translations."
        ),
    )
    system = parser.add_mutually_exclusive_group(required=True)
    system.add_argument(
        "--model",
        help="the model that translates SOURCES: as translate --model (.keras file, preset, "
        "SavedModel or CTranslate2 directory, training run directory)",
    )
    system.add_argument("--hypotheses", metavar="FILE", help="translations to score, one per line")
    system.add_argument(
        "--run",
        metavar="DIR",
        help="a training run's output directory: its translator translates the run's own "
        "test split (DIR/test.src), scored against DIR/test.ref",
    )
    parser.add_argument(
        "--sources", metavar="FILE", help="with --model: the sentences to translate, one per line"
    )
    parser.add_argument(
        "--references",
        metavar="FILE",
        nargs="+",
        help="reference translations, one per line; several files: several references each "
        "(required, except with --run)",
    )
    parser.add_argument(
        "--compare",
        metavar="BASELINE",
        help="another system's translations of the same sentences: paired bootstrap "
        "resampling (sacreBLEU's --paired-bs), BASELINE as its baseline",
    )
    parser.add_argument(
        "--bootstrap-samples",
        type=positive_int,
        default=1000,
        metavar="N",
        help="resamples of --compare (default: 1000, sacreBLEU's)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        choices=METRICS,
        default=list(METRICS),
        help="the metrics (default: bleu chrf ter)",
    )
    parser.add_argument(
        "--output", metavar="FILE", help="with --model: also write its translations to FILE"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--engine", choices=ENGINES, default=None, help="as translate --engine (with --model)"
    )
    parser.add_argument(
        "--beam-size", type=positive_int, default=None, help="as translate --beam-size"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=256,
        help="sentences translated per call (default: 256)",
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    # Scoring translations made already needs no framework: TensorFlow is not imported.
    parser.set_defaults(handler=run_evaluate, loads_framework=lambda args: args.hypotheses is None)
    return parser


def run_evaluate(args):
    """Handler of `evaluate`: returns the exit status."""
    start = time.monotonic()
    if args.run is not None:
        status = _use_run(args)
        if status:
            return status
    if args.references is None:
        print_error("evaluate needs --references FILE (or --run DIR: a run's own test split)")
        return 2
    if args.model is not None and args.sources is None:
        print_error("evaluate --model needs --sources FILE (the sentences to translate)")
        return 2
    for option, value in (("--sources", args.sources), ("--output", args.output)):
        if args.model is None and value is not None:
            print_error(f"evaluate {option} goes with --model; --hypotheses are translated already")
            return 2
    references = [read_lines(path) for path in args.references]
    if args.model is not None:
        sources = read_lines(args.sources, strip=False)
        status = _check_counts("--sources", args.sources, sources, args.references, references)
        if status:
            return status
        hypotheses = _translate(args, sources)
        if hypotheses is None:
            return 2
        if args.output:
            with open(args.output, "w", encoding="utf-8") as file:
                file.writelines(hypothesis + "\n" for hypothesis in hypotheses)
        hypotheses = [hypothesis.rstrip() for hypothesis in hypotheses]
    else:
        hypotheses = read_lines(args.hypotheses)
        status = _check_counts(
            "--hypotheses", args.hypotheses, hypotheses, args.references, references
        )
        if status:
            return status
    result = {
        "system": args.model if args.model is not None else args.hypotheses,
        "references": args.references,
        "sentences": len(hypotheses),
        "scores": score_corpus(hypotheses, references, metrics=args.metrics),
    }
    if args.compare:
        baseline = read_lines(args.compare)
        status = _check_counts("--compare", args.compare, baseline, args.references, references)
        if status:
            return status
        result["baseline"] = args.compare
        result["paired_bootstrap"] = paired_bootstrap(
            hypotheses, baseline, references, args.metrics, args.bootstrap_samples
        )
    result["seconds"] = round(time.monotonic() - start, 1)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print(format_result(result))
    return 0


def read_lines(path, strip=True):
    """The lines of a UTF-8 text file (`.gz`: compressed), without their line breaks and a
    leading byte order mark; lines are bounded (`keras_transformer.datasets.corpus.text_lines`).

    Args:
        path: str.
        strip: bool. Remove all trailing whitespace, as sacreBLEU's command line does.
            Defaults to `True`.

    Raises:
        OSError: the file cannot be read (the message names the file).
        CorpusFormatError: not UTF-8, a line too long, a damaged `.gz` file (one line naming
            the file and the line).
    """
    return [line.rstrip() if strip else line for line in text_lines(path)]


def format_result(result):
    """The text report of `run_evaluate`'s result: one line per metric, then the test."""
    lines = [f"{result['system']}: {result['sentences']} sentences"]
    width = max(len(score["name"]) for score in result["scores"].values())
    for score in result["scores"].values():
        detail = f" {score['verbose_score']}" if score["verbose_score"] else ""
        lines.append(f"{score['name']:<{width}} = {score['score']:.2f}{detail}")
        lines.append(f"{'':<{width}}   signature: {score['signature']}")
    compared = result.get("paired_bootstrap")
    if compared:
        first = next(iter(compared.values()))
        samples = first["signature"].split("bs:")[1].split("|")[0]
        lines.append(
            f"paired bootstrap resampling ({samples} resamples) against {result['baseline']}: "
            "score (bootstrap mean ± 95% CI)"
        )
        for test in compared.values():
            base, system = test["baseline"], test["system"]
            mark = " *" if system["p_value"] < 0.05 else ""
            lines.append(
                f"{test['name']:<{width}}   baseline {base['score']:.2f} "
                f"({base['mean']:.2f} ± {base['ci']:.2f}), this system {system['score']:.2f} "
                f"({system['mean']:.2f} ± {system['ci']:.2f}), p = {system['p_value']:.4f}{mark}"
            )
        lines.append("(* p < 0.05: the difference is unlikely to be chance; signatures in --json)")
    return "\n".join(lines)


def _check_counts(option, path, lines, reference_paths, references):
    if not lines:  # sacreBLEU fails on an empty corpus (IndexError)
        print_error(f"{option} {path} holds no lines: there is nothing to score")
        return 2
    for reference_path, reference_lines in zip(reference_paths, references, strict=True):
        if len(reference_lines) != len(lines):
            print_error(
                f"{option} {path} has {len(lines)} lines and --references {reference_path} "
                f"has {len(reference_lines)}: they must have one line per sentence"
            )
            return 2
    return 0


def _use_run(args):
    """`--run DIR`: the run's translator and test files become `--model`, `--sources` and
    `--references`; returns the exit status (`0`, or `2` after printing an error)."""
    for option, value in (("--sources", args.sources), ("--references", args.references)):
        if value is not None:
            print_error(
                f"evaluate --run and {option} conflict: --run {args.run} scores the run's own "
                "test split (its test.src and test.ref); give --run alone, or --model with "
                "--sources and --references"
            )
            return 2
    # The run's file names (loads Keras: the run is translated next anyway).
    from keras_transformer.training.run import RunPaths

    if not os.path.isdir(args.run):
        print_error(f"evaluate --run {args.run}: no such directory")
        return 2
    paths = RunPaths(args.run)
    sources, references = paths.held_out["test"]
    missing = [os.path.basename(path) for path in (sources, references) if not os.path.isfile(path)]
    if missing:
        print_error(
            f"evaluate --run {args.run}: the run has no test split files ({', '.join(missing)} "
            f"missing in {args.run}): it was trained without a test split (data.num_test = 0) "
            "or before runs wrote them; use --model with --sources and --references"
        )
        return 2
    translator = next(
        (path for path in (paths.translator, paths.preset) if os.path.exists(path)), None
    )
    if translator is None:
        print_error(
            f"evaluate --run {args.run}: the run has no translator ({paths.translator} or "
            f"{paths.preset}/): a run saves it when training ends; run the same train "
            "command again to finish it"
        )
        return 2
    args.model, args.sources, args.references = translator, sources, [references]
    return 0


def _translate(args, sources):
    """The translations of `sources` by `args.model`, or `None` after printing an error."""
    # Loads the framework of the engine (seconds): only once the command runs.
    from keras_transformer.training.evaluation import translate_sentences

    try:
        translator = engines.load_translator(args.model, engine=args.engine)
    except Exception as error:  # Any load failure is reported, not a traceback.
        print_error(f"cannot load the model {args.model!r}: {type(error).__name__}: {error}")
        return None
    if args.beam_size is not None:
        try:
            engines.check_options(translator, args.beam_size)
        except ValueError as error:
            print_error(" ".join(str(error).split()))
            return None

    def translate(batch):
        if args.beam_size is None:
            return translator(batch)
        return [option.text for option in translator.translate(batch, beam_size=args.beam_size)]

    return translate_sentences(
        translate, sources, chunk_size=args.batch_size, verbose=True, description="translating"
    )
