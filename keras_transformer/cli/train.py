"""The `train` subcommand: `keras-transformer train [--config] FILE [overrides]`.

Also runnable as `python -m keras_transformer.training --config FILE` (`main`). Module-level
imports are light (the pure-Python config and the command's helpers); Keras and the framework
are imported when the command runs.
"""

import argparse
import json
import logging
import os
import sys

from keras_transformer.cli.common import add_common_arguments, run_handler
from keras_transformer.training.config import (
    MIXED_PRECISION,
    STRATEGIES,
    ConfigError,
    TrainingConfig,
    corpus_list,
    load_config,
    parse_value,
)

# `--progress`: Keras' `verbose` of `fit`.
PROGRESS = ("auto", "0", "1", "2")


def add_train_parser(subparsers):
    """Registers the `train` subcommand on an `argparse` subparsers object.

    Args:
        subparsers: the result of `parser.add_subparsers()`.

    Returns:
        The `train` `argparse.ArgumentParser`.
    """
    parser = subparsers.add_parser(
        "train",
        help="train a Transformer from a TOML/YAML config, then evaluate and export it",
        description=(
            "Trains a Transformer as the config file says (every setting defaults to the "
            "paper's recipe; see docs/training.md), reports test BLEU and exact match, and "
            "exports a SavedModel. Running the same command again after an interruption "
            "resumes from the last backup."
        ),
        formatter_class=TrainHelpFormatter,
    )
    add_train_arguments(parser)
    add_common_arguments(parser, verbose=False, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_train)
    return parser


def add_train_arguments(parser):
    """Adds the `train` options to `parser`."""
    # `train CONFIG`, as fairseq and OpenNMT users type it, is `train --config CONFIG`.
    parser.add_argument(
        "config_file", nargs="?", metavar="CONFIG", help="the config file, as --config names it"
    )
    parser.add_argument("--config", help="TOML or YAML config file (default: the paper's recipe)")
    parser.add_argument("--output-dir", help="where the run writes (config: output_dir)")
    parser.add_argument(
        "--minutes",
        type=float,
        help="time budget; training stops cleanly when it is spent (config: training.minutes)",
    )
    parser.add_argument(
        "--train-steps", type=int, help="optimizer steps in all (config: training.train_steps)"
    )
    parser.add_argument(
        "--mixed-precision",
        choices=sorted(key for key in MIXED_PRECISION if key),
        help="mixed precision policy (config: training.mixed_precision)",
    )
    parser.add_argument(
        "--strategy",
        choices=list(STRATEGIES),
        help="data parallelism (config: distribution.strategy)",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        help="split the CPU into N logical devices (config: distribution.cpu_devices)",
    )
    parser.add_argument(
        "--coordinator-address",
        help="JAX multi-process: host:port of process 0 (config: distribution.coordinator_address)",
    )
    parser.add_argument(
        "--num-processes",
        type=int,
        help="JAX multi-process: number of processes (config: distribution.num_processes)",
    )
    parser.add_argument(
        "--process-id",
        type=int,
        help="JAX multi-process: this process's rank (config: distribution.process_id)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any setting, VALUE in TOML syntax (repeatable), e.g. --set model.preset=tiny",
    )
    parser.add_argument(
        "--progress",
        choices=PROGRESS,
        default="auto",
        help="Keras progress: 1 (a bar redrawn in place), 2 (one line per epoch), 0 (none), "
        "auto (default: 1 on a terminal, 2 when the output is a file or a pipe)",
    )
    # `--verbose` means what it means for every command (keep TensorFlow's start-up logs);
    # `--verbose N`, the progress option of 0.2.0, is still read as `--progress N`.
    parser.add_argument(
        "--verbose",
        nargs="?",
        const=True,
        default=argparse.SUPPRESS,
        dest="framework_logs",
        help="keep TensorFlow's start-up logs (CUDA probes, CPU feature banners)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )


def config_from_args(args):
    """The `TrainingConfig` of parsed `train` arguments (file, then options, then `--set`)."""
    overrides = {}
    for key, value in (
        ("output_dir", args.output_dir),
        ("training.minutes", args.minutes),
        ("training.train_steps", args.train_steps),
        (
            "training.mixed_precision",
            None if args.mixed_precision is None else args.mixed_precision.replace("none", ""),
        ),
        ("distribution.strategy", args.strategy),
        ("distribution.cpu_devices", args.cpu_devices),
        ("distribution.coordinator_address", args.coordinator_address),
        ("distribution.num_processes", args.num_processes),
        ("distribution.process_id", args.process_id),
    ):
        if value is not None:
            overrides[key] = value
    for assignment in args.set:
        key, separator, value = assignment.partition("=")
        if not separator:
            raise ConfigError(f"`--set` takes SECTION.KEY=VALUE. Received: --set {assignment!r}")
        overrides[key.strip()] = parse_value(value.strip())
    path = config_file(args)
    if path:
        return load_config(path, overrides)
    config = TrainingConfig()
    return config.replace(**overrides) if overrides else config


def config_file(args):
    """The config file of parsed `train` arguments: `--config FILE` or the positional `FILE`.

    Raises:
        ConfigError: both are given and name different files.
    """
    named, positional = args.config, getattr(args, "config_file", None)
    if named and positional and named != positional:
        raise ConfigError(
            f"train takes one config file: --config {named} and CONFIG {positional} differ"
        )
    return named or positional


class TrainHelpFormatter(argparse.HelpFormatter):
    """Shows `--verbose` as the flag it is: the optional value it still reads (0.2.0's
    `--verbose N`, now `--progress N`) goes unshown."""

    def _format_args(self, action, default_metavar):
        if action.dest == "framework_logs":
            return ""
        return super()._format_args(action, default_metavar)

    def _format_action_invocation(self, action):
        return super()._format_action_invocation(action).rstrip()

    def _format_usage(self, *args, **kwargs):
        return super()._format_usage(*args, **kwargs).replace("--verbose ]", "--verbose]")


def run_train(args):
    """Handler of `train`: returns the exit status.

    An invalid config raises `ConfigError` (see `keras_transformer.cli.common.run_handler`).
    """
    config = config_from_args(args)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    check_before_training(config, config_file(args) or "command line")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Loads Keras and the backend's framework (seconds): only once the command runs.
    from keras_transformer.training.trainer import train

    train(config, verbose=progress_mode(args))
    return 0


def progress_mode(args):
    """The `verbose` of `train` for `--progress` (or the 0.2.0 spelling `--verbose N`): `"auto"`
    is `1` (a progress bar) on a terminal and `2` (a line per epoch, no escape codes)
    elsewhere.

    Raises:
        ConfigError: `--verbose` with a value that is no progress mode.
    """
    progress = args.progress
    legacy = getattr(args, "framework_logs", None)
    if isinstance(legacy, str):
        if legacy not in PROGRESS:
            raise ConfigError(
                f"train --verbose takes no value (it keeps TensorFlow's logs); the progress "
                f"is --progress {{{','.join(PROGRESS)}}}, and a config file goes before "
                f"--verbose or after --config. Received: --verbose {legacy}"
            )
        progress = legacy
    if progress == "auto":
        return 1 if sys.stdout.isatty() else 2
    return int(progress)


def check_before_training(config, source):
    """What `TrainingConfig.validate` leaves out, checked before the run starts.

    The activation's name (Keras knows the names: this imports Keras, which the run imports
    next anyway) and, for `dataset = "tsv"`, that `data.path` is a file (for `"corpus"`, that
    every corpus file is).

    Args:
        config: `TrainingConfig`.
        source: str. Where the config comes from (its file), named in the error.

    Raises:
        ConfigError: naming `source`, the setting and its value.
    """
    data, activation = config.data, config.model.activation
    if data.dataset == "tsv" and not os.path.isfile(data.path):
        raise ConfigError(
            f"{source}: `data.path` must be an existing TSV file. Received: data.path={data.path!r}"
        )
    if data.dataset == "corpus":
        for index, corpus in enumerate(corpus_list(data)):
            for key, path in zip(("path",) if corpus.path else ("source", "target"), corpus.files, strict=True):
                if not os.path.isfile(path):
                    name = f"data.corpora[{index}].{key}" if data.corpora else f"data.{key}"
                    raise ConfigError(
                        f"{source}: `{name}` must be an existing file. Received: {name}={path!r}"
                    )
    if isinstance(activation, str):
        import keras  # Seconds to import: only when the config names an activation.

        try:
            keras.activations.get(activation)
        except ValueError:
            raise ConfigError(
                f"{source}: `model.activation` must name a Keras activation (e.g. 'relu', "
                f"'gelu'). Received: model.activation={activation!r}"
            ) from None


def main(argv=None):
    """`python -m keras_transformer.training [options]`: the `train` subcommand on its own.

    Args:
        argv: list of str. Defaults to `None`: `sys.argv[1:]`.

    Returns:
        int, the exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.training",
        description="Trains a Transformer from a config file (see `keras-transformer train`).",
        formatter_class=TrainHelpFormatter,
    )
    add_train_arguments(parser)
    add_common_arguments(parser, verbose=False)
    args = parser.parse_args(argv)
    verbose = getattr(args, "framework_logs", None) is True
    return run_handler(run_train, args, debug=args.debug, verbose=verbose)
