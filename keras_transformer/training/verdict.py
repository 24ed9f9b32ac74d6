"""The run's last line: whether it reached its goal, and how to continue a run the time budget
stopped (`run_verdict`, `continue_command`).

Pure Python: importing this module imports neither Keras nor TensorFlow.
"""

import os
import shlex
import sys


def continue_command(argv=None):
    """The command that continues this run: `keras-transformer` and its arguments as given,
    or `None` when the run was not started by the command line."""
    argv = sys.argv if argv is None else argv
    program = argv[0].replace(os.sep, "/") if argv else ""
    if not (os.path.basename(program) == "keras-transformer"
            or program.endswith("keras_transformer/cli/__main__.py")):
        return None  # Not the command line (pytest, a notebook, a script of the user's).
    return shlex.join(["keras-transformer", *argv[1:]])


def run_verdict(metrics, config, command=None):
    """The run's last line: whether it reached `evaluation.target_exact_match`, and for a run
    the time budget stopped short of its goal (or of its steps, without a goal), how to
    continue. `None` for a run that made all its steps without a goal.

    Example:

    >>> from keras_transformer.training.config import TrainingConfig
    >>> config = TrainingConfig().replace(**{"training.minutes": 4.5,
    ...     "training.train_steps": 600, "evaluation.target_exact_match": 0.995})
    >>> metrics = {"steps": 432, "train_steps": 600, "stopped_by_time_limit": True,
    ...            "test_exact_match": 0.987}
    >>> print(run_verdict(metrics, config, "keras-transformer train --config demo.toml"))
    not converged: test exact match 98.70 % is below the goal of 99.50 % after 432 of 600 \
steps (the 4.5-minute time budget stopped training). To train the other 168 steps, run the \
same command again: keras-transformer train --config demo.toml
    >>> print(run_verdict({**metrics, "test_exact_match": 0.998}, config))
    goal reached: test exact match 99.80 % (at least 99.50 %) after 432 of 600 steps (the \
4.5-minute time budget stopped training there)
    """
    target = config.evaluation.target_exact_match
    steps, train_steps = metrics["steps"], metrics["train_steps"]
    stopped = metrics.get("stopped_by_time_limit")
    exact = metrics.get("test_exact_match")
    budget = f"the {config.training.minutes:g}-minute time budget stopped training"
    again = (f"run the same command again: {command}" if command
             else "run the same training again (the same config and output_dir)")
    if target and exact is not None:
        if exact >= target:
            return (f"goal reached: test exact match {100 * exact:.2f} % (at least "
                    f"{100 * target:.2f} %) after {steps:,} of {train_steps:,} steps"
                    + (f" ({budget} there)" if stopped else ""))
        line = (f"not converged: test exact match {100 * exact:.2f} % is below the goal of "
                f"{100 * target:.2f} % after {steps:,} of {train_steps:,} steps")
        if stopped:
            return (f"{line} ({budget}). To train the other {train_steps - steps:,} steps, "
                    f"{again}")
        return (f"{line}: train longer (training.train_steps, in a new output_dir) or see "
                "docs/training.md")
    if stopped:
        return (f"not finished: {budget} after {steps:,} of {train_steps:,} steps. To train the "
                f"other {train_steps - steps:,} steps, {again}")
    return None
