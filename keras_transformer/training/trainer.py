"""`train(config)`: data, tokenizer, model, `fit`, checkpoints, evaluation and export in one call.

The run writes everything under `config.output_dir`:

```
train_config.json       the resolved configuration, the recipe's choices included (`config.json` before 0.2.0)
tokenizer.json          the shared vocabulary (WordPiece or SentencePiece) (reused when the run resumes)
backup/                 the last training state (weights, optimizer, step): `kill -9` recovery
checkpoints/            ckpt-STEP.weights.h5, the last `average_checkpoints` of them
logs/                   TensorBoard (train/ and validation/)
curves.png, curves.json the losses, BLEU and learning rate, drawn at each validation (`training.curves`)
valid.src, valid.ref    the validation pairs, one sentence per line (`training.run.write_held_out`)
test.src, test.ref      the test pairs (`keras-transformer evaluate --run OUTPUT_DIR` scores them)
model.weights.h5        the final (averaged) weights
translator.keras        the Translator (model + tokenizer + beam search settings)
preset/                 the same Translator as a preset directory (`Translator.from_preset`)
saved_model/            the TensorFlow SavedModel serving strings
metrics.json            test BLEU, chrF and exact match, steps, time, samples
stages.json             the stages after training that are done (see `training.stages`)
best/, best.json        with `keep_best`: the best translator and the validations (`training.best`)
```

Every file is written atomically (temporary name, then rename), so a killed run never leaves a
file that the next run would load half-written. Running the same command again after a kill
resumes from the backup, at the step where it was, and ends with the same number of optimizer
steps (and the same checkpoints) as an uninterrupted run. A kill after training costs no step:
the backup is deleted only once the last stage after training (averaging, test, saving,
export, metrics) is recorded in `stages.json`, and the next run goes on with the first stage
not recorded.
"""

import math
import os
import shutil
import sys
import time

import keras

from keras_transformer import _backend
from keras_transformer.engines import load_translator
from keras_transformer.export import export_saved_model
from keras_transformer.files import (
    atomic_path,
    lock_directory,
    read_json,
    remove_temporaries,
    unlock_directory,
    write_json,
)
from keras_transformer.optimizers import decay_end
from keras_transformer.saving.weights import check_sha256
from keras_transformer.training import fine_tune, speed
from keras_transformer.training.accumulation import per_update
from keras_transformer.training.averaging import average_last_checkpoints
from keras_transformer.training.backup import ResumableBackupAndRestore
from keras_transformer.training.best import export_best, make_keep_best
from keras_transformer.training.bleu import BleuCallback
from keras_transformer.training.building import bfloat16_trains_faster, load_splits
from keras_transformer.training.checkpoints import (
    PeriodicCheckpoint,
    list_checkpoints,
    load_weights,
    restore_checkpoint,
    save_weights_atomically,
)
from keras_transformer.training.config import TrainingConfig, load_config, warmup_note
from keras_transformer.training.curves import Curves
from keras_transformer.training.evaluation import (
    checked_samples,
    evaluate_translations,
    sample_pairs,
    samples_summary,
    tune_alpha,
)
from keras_transformer.training.preparation import prepare_data, prepare_model
from keras_transformer.training.recipe import AVERAGED_SHARE, resolve_recipe
from keras_transformer.training.run import (
    FitOutcome,
    Run,
    RunPaths,
    TrainingResult,
    held_out_report,
    write_held_out,
)
from keras_transformer.training.stages import RunStages
from keras_transformer.training.state import copy_weights, to_numpy
from keras_transformer.training.strategy import setup_distribution
from keras_transformer.training.tensorboard import TensorBoardLogger
from keras_transformer.training.time_limit import (
    CheckpointPlan,
    DecayPlan,
    StepRateForecast,
    TimeLimit,
)

# `load_or_train_tokenizer` and `save_tokenizer`: their 0.2.0 path, kept for one release.
from keras_transformer.training.tokenizers import load_or_train_tokenizer, save_tokenizer  # noqa: F401
from keras_transformer.training.verdict import continue_command, run_verdict


def train(config, callbacks=None, verbose="auto", init_from=None):
    """Trains a Transformer as `config` says, then evaluates and exports it.

    Steps: set up the distribution strategy; load the dataset splits; train (or, when
    resuming, reload) the shared WordPiece tokenizer; build the `tf.data` pipeline (a
    seeded, repeated stream of token-budgeted batches: step `k` always gets the same batch);
    build and compile the model, the optimizer (Adam with the warm-up schedule) and the
    label-smoothed loss inside the strategy's scope (`prepare_run`); `fit` with Keras progress
    bars, TensorBoard, periodic checkpoints, backups, validation loss, validation BLEU and the
    time budget (`fit` sees `steps_per_epoch` batches per epoch of the stream) (`fit_run`);
    average the last checkpoints; translate the test split (beam search) and report corpus
    BLEU and exact match; save the `Translator` and export the SavedModel; and translate a few
    samples with the exported SavedModel (`finalize_run`, stage by stage).

    Args:
        config: `TrainingConfig`, a dict of sections, or the path of a TOML/YAML file.
        callbacks: list of extra `keras.callbacks.Callback`s for `fit`. Defaults to `None`.
        verbose: `fit` verbosity (`"auto"`, 0, 1, 2); `0` also silences the report.
            Defaults to `"auto"`.
        init_from: str. Sets `config.training.init_from`: fine-tune the translator at this
            path (see `keras_transformer.training.fine_tune`). Defaults to `None` (the
            config's).

    Returns:
        A `TrainingResult`.

    Example:

    ```python
    from keras_transformer.training import load_config, train

    result = train(load_config("configs/demo.toml"))
    print(result.metrics["test_exact_match"], result.metrics["test_bleu"])
    ```
    """
    if init_from is not None:
        config = _as_config(config).replace(**{"training.init_from": os.fspath(init_from)})
    config = _as_config(config)
    try:
        run = prepare_run(config, verbose=verbose)
        outcome = fit_run(run, callbacks=callbacks, verbose=verbose)
        return finalize_run(run, outcome)
    finally:  # The output directory's lock, taken by `prepare_run`.
        unlock_directory(os.path.abspath(config.output_dir))


def prepare_run(config, verbose="auto"):
    """The first phase of `train`: strategy, output directory, data, tokenizer and model (the
    last two: `training.preparation`).

    Args:
        config: `TrainingConfig`, a dict of sections, or the path of a TOML/YAML file.
        verbose: as in `train`; `0` silences the report. Defaults to `"auto"`.

    Returns:
        A `Run`.
    """
    start_time = time.monotonic()
    config = _as_config(config)
    context = setup_distribution(config.distribution)
    report = _Reporter(enabled=context.is_chief and verbose != 0)
    keras.utils.set_random_seed(config.training.seed)
    paths = RunPaths(os.path.abspath(config.output_dir))
    # The model and tokenizer files the configuration names, before anything is written.
    initial = fine_tune.check_run_inputs(config)
    created = context.is_chief and not os.path.exists(paths.output_dir)
    if context.is_chief:
        # One run per output directory: the lock comes before anything there is touched, the
        # streamed corpus's keys files (`load_splits`) included (another run holding it:
        # `DirectoryLockedError`, an `OSError`, one line on the command line). The system
        # releases it when the process ends, however it ends.
        lock_directory(paths.output_dir)
    try:
        splits = load_splits(
            config.data,
            work_dir=os.path.join(paths.output_dir, "corpus"),
            seed=config.training.seed,
            progress=report,
        )
    except BaseException:
        if created:  # A corpus the run cannot use leaves no run directory behind.
            unlock_directory(paths.output_dir)
            shutil.rmtree(paths.output_dir, ignore_errors=True)
        raise
    # Settings a budgeted config leaves unset, from the corpus size (`training.recipe`).
    streaming = splits.info.get("streaming", False)
    spacing_unset = not (config.is_set("training.checkpoint_every")
                         or config.is_set("training.average_checkpoints"))
    # One process and one replica time the candidate rows here (`training.speed`); a run
    # that resumes takes the times its first start recorded, so it chooses the same row.
    probe = (speed.RowProbe(speed.recorded_step_times(paths.config), report)
             if context.num_processes == 1 and context.num_replicas == 1 else None)
    config, recipe_line = resolve_recipe(
        config,
        splits.info["num_train"] if streaming else len(splits.train),
        bfloat16_cpu=context.num_replicas == 1 and bfloat16_trains_faster(),
        num_validation=len(splits.validation),
        step_time=probe,
    )
    if probe is not None and probe.probed:
        speed.reseed(config.training.seed)  # the run's weights as without the probe
    if context.is_chief:
        for directory in (paths.output_dir, paths.checkpoints, paths.backup):
            remove_temporaries(directory)  # what a killed writer left
        if os.path.exists(paths.legacy_config):  # a run started before 0.2.0
            os.replace(paths.legacy_config, paths.config)
        record = config.to_dict()
        if probe is not None and probe.times:
            record[speed.RECORD_KEY] = {"line": recipe_line, "step_times": probe.times}
        write_json(paths.config, record)
    report(f"keras-transformer train: backend {keras.backend.backend()}, strategy "
           f"{context.strategy} ({context.num_replicas} replica(s), {context.num_processes} "
           f"process(es)), output {paths.output_dir}")
    if context.is_chief:
        report(held_out_report(write_held_out(paths, splits)))
    if recipe_line:
        report(recipe_line)
    tokenizer, initial, train_data, validation_data, steps_per_epoch = prepare_data(
        config, context, paths, report, splits, initial
    )
    model, eval_model, translator = prepare_model(config, context, tokenizer, report, initial)
    if warmup_note(config):  # A time budget's cut is known once steps are timed (`_Forecast`).
        report(f"note: {warmup_note(config)}")
    return Run(
        config=config,
        start_time=start_time,
        context=context,
        report=report,
        paths=paths,
        splits=splits,
        tokenizer=tokenizer,
        train_data=train_data,
        validation_data=validation_data,
        steps_per_epoch=steps_per_epoch,
        model=model,
        eval_model=eval_model,
        translator=translator,
        initial=initial,
        # The recipe spaced the checkpoints from an estimate of the steps: a time budget's
        # run spaces them again from its measured step rate.
        checkpoint_share=(
            AVERAGED_SHARE
            if spacing_unset and config.training.minutes and config.training.checkpoint_every
            else None
        ),
    )


def _fit_verbosity(verbose):
    """`fit`'s `verbose`: `"auto"` is a progress bar on a terminal, and one line per epoch
    (no carriage returns or escape codes) when the output is a file or a pipe."""
    if verbose != "auto":
        return verbose
    return 1 if sys.stdout.isatty() else 2


def fit_run(run, callbacks=None, verbose="auto"):
    """The second phase of `train`: resume or start, `fit` to `train_steps`, record `trained`.

    A run whose `trained` stage is recorded (a kill came after training) does not fit.

    Args:
        run: the `Run` of `prepare_run`.
        callbacks: list of extra `keras.callbacks.Callback`s for `fit`. Defaults to `None`.
        verbose: `fit` verbosity. Defaults to `"auto"`.

    Returns:
        A `FitOutcome`.
    """
    config, context, report = run.config, run.context, run.report
    train_steps = config.training.train_steps
    backup = ResumableBackupAndRestore(
        run.paths.backup,
        save_freq=config.training.backup_every,
        delete_checkpoint=False,
        is_chief=context.is_chief,
        restore_epoch=False,
    )
    minutes = config.training.minutes
    time_limit = TimeLimit(minutes, start_time=run.start_time) if minutes else None
    callback_list, keep_best = _callbacks(run, backup, time_limit)
    # Under gradient accumulation the run's callbacks count optimizer steps (`PerUpdate`).
    accumulate = config.training.accumulate_steps
    callback_list = per_update(callback_list, accumulate) + list(callbacks or [])
    # The stages after training that an earlier run of this command finished (a kill after
    # training loses none of them): see `keras_transformer.training.stages`.
    stages = RunStages(run.paths.stages, config, is_chief=context.is_chief)
    trained = stages.get("trained")
    state = backup.state()  # Kept until the last stage: it holds the trained weights.
    backup_weights = os.path.join(run.paths.backup, state["weights"]) if state else None
    steps_done = _resume(run, stages, state, trained, backup_weights)
    fit_start = time.monotonic()
    fits = [] if trained else plan_fits(steps_done, train_steps, run.steps_per_epoch)
    if keep_best is not None and keep_best.resume(steps_done):
        fits = []  # Early stopping had ended training before the kill.
    elif not trained and _revalidate(run, keep_best, callback_list, state, backup_weights):
        fits = []  # The validation of the backup's step, done again, stops training.
    # Training had ended (a kill came after it): the weights are the backup's.
    final_weights = backup_weights if state and not fits and not stages.done("averaged") else None
    history = _fit(run, fits, callback_list, (time_limit, keep_best), verbose, final_weights)
    if trained:
        steps, stopped_by_time = trained["steps"], False
    else:
        steps = backup.step if fits else (state["step"] if state else steps_done)
        stopped_by_time = bool(
            time_limit is not None and time_limit.stopped and steps < train_steps
        )
        # Only a run that made its last step records its stages: a run stopped by the time
        # budget is continued by the next one.
        stages.recording = not stopped_by_time
        trained = stages.record(
            "trained",
            steps=steps,
            optimizer_iterations=int(to_numpy(run.model.optimizer.iterations)),
            train_seconds=round(time.monotonic() - fit_start, 1),
            history={key: [float(value) for value in values] for key, values in history.items()},
        )
    if stopped_by_time:
        report(f"time budget of {minutes:g} minutes spent after {steps:,} of {train_steps:,} "
               "steps: testing what was trained (the backup is kept, to continue)")
    best = keep_best.summary() if keep_best is not None else None
    return FitOutcome(stages, backup, steps_done, steps, trained, stopped_by_time, best)


def _callbacks(run, backup, time_limit):
    """The callbacks of `fit`: backup first (the others read its step count), then checkpoints,
    the step limit, the time limit, validation BLEU, keep-best and TensorBoard; and the
    `KeepBest` (or `None`)."""
    training, evaluation, context = run.config.training, run.config.evaluation, run.context
    checkpoints = PeriodicCheckpoint(
        run.paths.checkpoints,
        save_freq=training.checkpoint_every or "epoch",
        keep=training.average_checkpoints,
        is_chief=context.is_chief,
    )
    callback_list = [backup, checkpoints, _StopAtStep(training.train_steps, backup)]
    if time_limit is not None:
        callback_list.append(time_limit)
        end = decay_end(run.model.optimizer)
        if end is not None:  # A linear decay ends where the time runs out.
            warmup = run.config.optimizer.warmup_steps
            callback_list.append(DecayPlan(end, time_limit, backup, training.train_steps, warmup))
        if run.checkpoint_share:  # The recipe's spacing, planned again from the step rate.
            callback_list.append(CheckpointPlan(
                checkpoints, time_limit, backup, training.train_steps, run.checkpoint_share
            ))
    if context.is_chief:
        callback_list.append(
            _Forecast(run.config, training.train_steps, backup, run.report, time_limit)
        )
    if evaluation.bleu_every >= 0 and run.splits.validation:
        pairs = run.splits.validation[: evaluation.bleu_sentences or None]
        callback_list.append(
            BleuCallback(
                run.translate,
                [source for source, _ in pairs],
                [target for _, target in pairs],
                every_steps=evaluation.bleu_every,
                log_dir=run.paths.logs if training.tensorboard else None,
                is_chief=context.is_chief,
            )
        )
    keep_best = None
    if training.keep_best:
        keep_best = make_keep_best(
            run.config, run.paths, lambda step: _save_best(run, step), backup, callback_list,
            is_chief=context.is_chief,
        )
    if context.is_chief:
        bleu = next((item for item in callback_list if isinstance(item, BleuCallback)), None)
        callback_list.append(
            Curves(run.paths.curves, run.paths.curves_record, training.train_steps, backup, bleu)
        )
    if training.tensorboard and context.is_chief:
        callback_list.append(TensorBoardLogger(run.paths.logs))
    return callback_list, keep_best


def _save_best(run, step):
    """Exports the translator at `step` as the run's best (`keep_best`)."""
    if run.eval_model is not run.model:
        copy_weights(run.model, run.eval_model)
    if run.context.is_chief:
        export_best(run.translator, run.paths.best)
    run.report(f"{run.config.training.keep_best} improved at step {step}: exported {run.paths.best}")


def _revalidate(run, keep_best, callback_list, state, backup_weights):
    """Validates the backup's step again when a validation was due there and `best.json` does
    not record it: the backup of a step is written before its validation, so a kill between
    the two would otherwise skip that validation for good (and with it, maybe, the best).

    Returns:
        bool, whether that validation stops training (early stopping).
    """
    if keep_best is None or not state:
        return False
    step, monitor = state["step"], keep_best.monitor
    if any(done == step for done, _ in keep_best.evaluations):
        return False
    bleu = next((callback for callback in callback_list if isinstance(callback, BleuCallback)), None)
    if monitor == "val_bleu":
        if bleu is None or not run.context.is_chief:  # As in `fit`: BLEU on process 0 only.
            return False
        due = step % bleu.every_steps == 0 if bleu.every_steps else _epoch_end(run, state)
    else:
        due = run.validation_data is not None and _epoch_end(run, state)
    if not due:
        return False
    with run.context.scope():
        load_weights(run.model, backup_weights)
        if monitor == "val_bleu":
            value = bleu.evaluate()
        else:
            logs = run.model.evaluate(run.validation_data, verbose=0, return_dict=True)
            value = logs[monitor.removeprefix("val_")]
    run.report(f"{monitor} of step {step} was not recorded (a kill after its backup): "
               f"validated again: {value:.4f}")
    keep_best.observe(step, value)
    return keep_best.stopped


def _epoch_end(run, state):
    """Whether the backup `state` was written at the end of an epoch (where `fit` validates)."""
    step = state["step"]
    return (
        state.get("batch") == 0
        or step % run.steps_per_epoch == 0
        or step >= run.config.training.train_steps
    )


def _resume(run, stages, state, trained, backup_weights):
    """The steps trained before this run; clears what an earlier, unrelated run left."""
    training, context, report, paths = run.config.training, run.context, run.report, run.paths
    steps_per_epoch = run.steps_per_epoch
    if trained:
        report(f"training: finished by an earlier run ({trained['steps']} steps); going on with "
               f"the stages after it ({', '.join(stages.done_stages())} done)")
        return trained["steps"]
    if state:
        # Damaged since it was written: refused (one line), never copied into a checkpoint.
        check_sha256(backup_weights, state.get("sha256"), os.path.join(paths.backup, "state.json"))
        steps_done = min(state["step"], training.train_steps)
        report(f"resuming from the backup of step {steps_done} "
               f"(epoch {steps_done // steps_per_epoch + 1}, "
               f"batch {steps_done % steps_per_epoch} of {steps_per_epoch})")
        every = training.checkpoint_every or steps_per_epoch
        expected = state["step"] % every == 0 or state["step"] == training.train_steps
        if context.is_chief and expected and restore_checkpoint(
            paths.checkpoints, state["step"], backup_weights, keep=training.average_checkpoints
        ):
            report(f"restored the checkpoint of step {state['step']} from the backup")
        return steps_done
    if run.initial is not None:
        fine_tune.initialize_weights(run.model, run.initial.model)
        report(f"fine-tuning: weights of {training.init_from}, a fresh optimizer")
    if context.is_chief:
        # A fresh start in the directory of an earlier run: its checkpoints must not be
        # averaged with this run's, nor its stages taken for this run's.
        stages.clear()
        if list_checkpoints(paths.checkpoints):
            for _, path in list_checkpoints(paths.checkpoints):
                os.remove(path)
            report(f"removed the checkpoints of an earlier run from {paths.checkpoints}")
    return 0


def _fit(run, fits, callback_list, stoppers, verbose, final_weights=None):
    """Runs the planned `fit` calls in the strategy's scope; returns their merged history.

    `stoppers`: callbacks (or `None`s) with a `stopped` attribute (the time limit, early
    stopping); once one has stopped, the planned `fit` calls left are not run.

    `final_weights`, when given, is loaded instead (training had ended before this run).
    """
    context, model = run.context, run.model
    history = {}
    accumulate = run.config.training.accumulate_steps  # fit batches per optimizer step
    with context.scope():
        for initial_epoch, epochs, epoch_steps, skip in fits:
            if any(stopper is not None and stopper.stopped for stopper in stoppers):
                break
            dataset = context.prepare_dataset(run.train_data.dataset.skip(skip * accumulate))
            fit_history = model.fit(
                dataset,
                initial_epoch=initial_epoch,
                epochs=epochs,
                steps_per_epoch=epoch_steps * accumulate,
                validation_data=run.validation_data,
                shuffle=False,  # The stream is shuffled, seeded, by the pipeline.
                callbacks=callback_list,
                verbose=_fit_verbosity(verbose) if context.is_chief else 0,
            )
            for key, values in fit_history.history.items():
                history.setdefault(key, []).extend(values)
        if final_weights is not None:
            load_weights(model, final_weights)
    return history


def finalize_run(run, outcome):
    """The last phase of `train`: the stages after training, each recorded in `stages.json`.

    Averages the last checkpoints, then on process 0 evaluates on the test split, saves the
    Translator, exports the SavedModel and writes `metrics.json`; a stage recorded by an
    earlier run is skipped (its results reloaded). The backup is deleted after the last one.

    Args:
        run: the `Run` of `prepare_run`.
        outcome: the `FitOutcome` of `fit_run`.

    Returns:
        A `TrainingResult`.
    """
    config, context, paths, report = run.config, run.context, run.paths, run.report
    model, stages, trained = run.model, outcome.stages, outcome.trained
    averaged = _average(run, stages)
    metrics = {
        "steps": outcome.steps,
        "steps_this_run": outcome.steps - outcome.steps_done,
        "optimizer_iterations": trained["optimizer_iterations"],
        "train_steps": config.training.train_steps,
        "stopped_by_time_limit": outcome.stopped_by_time,
        "train_seconds": trained["train_seconds"],
        "averaged_checkpoints": averaged["checkpoints"],
        "history": trained["history"],
    }
    if outcome.best is not None:
        metrics["best"] = outcome.best
    history = trained["history"]
    if not context.is_chief:
        return TrainingResult(model, None, run.tokenizer, history, metrics, paths.output_dir, config)
    if run.eval_model is not model:
        copy_weights(model, run.eval_model)
    run.translator = fine_tune.written_translator(run.translator)  # `lora_rank`: merged
    metrics.update(_tune(run, stages))
    metrics.update(_evaluate(run, stages))
    if not stages.done("saved"):
        if config.export.translator:
            with atomic_path(paths.translator) as temporary:
                run.translator.save(temporary)
            report(f"saved {paths.translator}")
        run.translator.save_to_preset(paths.preset)  # whatever `export` says: small, and shareable
        report(f"saved the preset directory {paths.preset}")
        stages.record("saved")
    metrics.update(_export(run, stages))
    if stages.done("finished"):
        metrics = read_json(paths.metrics) or metrics
        report(f"the run finished earlier: nothing left to do; metrics in {paths.metrics}")
    else:
        metrics["total_seconds"] = round(time.monotonic() - run.start_time, 1)
        write_json(paths.metrics, metrics)
        stages.record("finished")
        report(f"done in {metrics['total_seconds']:.0f} s; metrics in {paths.metrics}")
    verdict = run_verdict(metrics, config, continue_command())
    if verdict:
        report(verdict)
    if not outcome.stopped_by_time:
        # The last stage is recorded: nothing needs the backup any more.
        outcome.backup.delete()
    return TrainingResult(
        model, run.translator, run.tokenizer, history, metrics, paths.output_dir, config
    )


def _average(run, stages):
    """The `averaged` stage: the average of the last checkpoints, saved as the final weights."""
    context, paths, report, model = run.context, run.paths, run.report, run.model
    keep = run.config.training.average_checkpoints
    averaged = stages.get("averaged")
    if averaged is not None:
        with context.scope():
            load_weights(model, paths.weights)
        report(f"averaging: done by an earlier run; loaded {paths.weights}")
        return averaged
    checkpoints_averaged = []
    if keep > 1:
        with context.scope():
            checkpoints_averaged = average_last_checkpoints(model, paths.checkpoints, keep)
        if checkpoints_averaged:
            count = len(checkpoints_averaged)
            report(f"averaged the last {count} checkpoint{'s' if count > 1 else ''} (steps "
                   f"{', '.join(str(step) for step, _ in checkpoints_averaged)})")
    save_weights_atomically(model, paths.weights, is_chief=context.is_chief)
    return stages.record("averaged", checkpoints=[step for step, _ in checkpoints_averaged])


def _tune(run, stages):
    """The `tuned` stage: the length penalty of `evaluation.alphas` with the best validation
    BLEU becomes the Translator's `alpha` (process 0), before the test and the exports."""
    evaluation, report, pairs = run.config.evaluation, run.report, run.splits.validation
    if not evaluation.alphas:
        return {}
    tuned = stages.get("tuned")
    if tuned is None:
        if not pairs:
            report(f"evaluation.alphas: no validation split to try them on; the length "
                   f"penalty stays evaluation.alpha = {evaluation.alpha:g}")
            return stages.record("tuned", alpha=float(evaluation.alpha), alpha_trials=[])
        start = time.monotonic()
        alpha, trials = tune_alpha(run.translator, pairs, evaluation.alphas, report.enabled)
        tuned = stages.record("tuned", alpha=alpha, alpha_trials=trials)
        tried = ", ".join(
            f"{trial['alpha']:g}: {trial['bleu']:.2f}"
            + (f" (length {trial['length_ratio']:.3f})" if trial["length_ratio"] is not None else "")
            for trial in trials
        )
        report(f"length penalty tuned on the {len(pairs):,} validation pairs: alpha "
               f"{alpha:g} (BLEU {tried}; {time.monotonic() - start:.0f} s)")
    else:
        report(f"length penalty: tuned by an earlier run: alpha {tuned['alpha']:g}")
    run.translator.alpha = float(tuned["alpha"])
    return tuned


def _evaluate(run, stages):
    """The `evaluated` stage: test BLEU and exact match of the Translator (process 0)."""
    test, report = run.splits.test, run.report
    evaluated = stages.get("evaluated")
    if evaluated is None:
        evaluated = {}
        if run.config.evaluation.test and test:
            evaluated = evaluate_translations(run.translator, test, verbose=report.enabled)
            report(f"test: BLEU {evaluated['test_bleu']:.2f}, chrF {evaluated['test_chrf']:.2f}, "
                   f"exact match "
                   f"{100 * evaluated['test_exact_match']:.2f}% on {len(test)} pairs "
                   f"({evaluated['test_seconds']:.0f} s)")
        evaluated = stages.record("evaluated", **evaluated)
    elif "test_bleu" in evaluated:
        report(f"test: done by an earlier run: BLEU {evaluated['test_bleu']:.2f}")
    return evaluated


def _export(run, stages):
    """The `exported` stage: the SavedModel, and the samples it translates, each checked
    against its reference (process 0; without a SavedModel, the Translator translates them
    if it translated the test split)."""
    config, paths, report = run.config, run.paths, run.report
    exported = stages.get("exported")
    if exported is not None:
        return exported
    exported = {}
    samples, references = sample_pairs(config.evaluation, run.splits)
    translate = None
    if config.export.saved_model:
        export_start = time.monotonic()
        # Off TensorFlow the export runs in a subprocess that loads a `.keras` file: the
        # one just saved, if any.
        exported_from = run.translator
        if config.export.translator and not _backend.is_tensorflow():
            exported_from = paths.translator
        report("exporting the SavedModel (it compiles the search: a minute or more on a CPU)")
        export_saved_model(exported_from, paths.saved_model)
        report(f"exported {paths.saved_model} ({time.monotonic() - export_start:.0f} s)")
        if samples:
            report(f"translating {len(samples)} samples with the exported SavedModel (it "
                   "compiles on its first call)")
            translate, by = load_translator(paths.saved_model, engine="saved_model"), "the exported SavedModel"
    elif samples and config.evaluation.test:
        # The test has compiled the Translator's search: five more sentences cost little.
        translate, by = run.translator, "the trained Translator"
    if translate is not None:
        translations = list(translate(samples))
        exported["samples"] = checked_samples(samples, translations, references)
        report(f"translations by {by}:")
        for sample in exported["samples"]:
            mark = {True: "right", False: f"wrong: expected {sample.get('reference')!r}",
                    None: "no reference"}[sample.get("right")]
            report(f"  {sample['source']}  ->  {sample['translation']}   ({mark})")
        summary = samples_summary(exported["samples"])
        if summary:
            report(summary)
    return stages.record("exported", **exported)


def plan_fits(steps_done, train_steps, steps_per_epoch):
    """The `fit` calls that train from `steps_done` to `train_steps` in epochs of
    `steps_per_epoch`.

    A run resumed in the middle of an epoch first finishes that epoch (a `fit` of the
    remaining steps), then runs the remaining epochs in one `fit` (its last epoch is cut at
    `train_steps` by a callback).

    Args:
        steps_done: int. Steps already trained.
        train_steps: int. Steps in all.
        steps_per_epoch: int.

    Returns:
        A list of `(initial_epoch, epochs, steps_per_epoch, skip)`: the `fit` arguments and
        the number of batches of the data stream to skip.

    Example:

    >>> plan_fits(0, 250, 100)
    [(0, 3, 100, 0)]
    >>> plan_fits(130, 250, 100)
    [(1, 2, 70, 130), (2, 3, 100, 200)]
    """
    if steps_done >= train_steps:
        return []
    epochs = math.ceil(train_steps / steps_per_epoch)
    epoch, batch = divmod(steps_done, steps_per_epoch)
    fits = []
    if batch:
        remaining = min(steps_per_epoch, train_steps - epoch * steps_per_epoch) - batch
        fits.append((epoch, epoch + 1, remaining, steps_done))
        epoch += 1
    if epoch < epochs:
        fits.append((epoch, epochs, steps_per_epoch, epoch * steps_per_epoch))
    return fits


class _Forecast(StepRateForecast):
    """`StepRateForecast` that also names, once, a warm-up the time budget cuts short
    (`warmup_note` at the step the measured rate reaches), unless `prepare_run` named it.
    Whether the config names `train_steps` comes from the config (`steps_named`)."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(
            *args, steps_named=config.is_set("training.train_steps"), **kwargs
        )
        self.config = config

    def forecast(self, seconds_per_step, step):
        super().forecast(seconds_per_step, step)
        if self.time_limit is None or warmup_note(self.config) is not None:
            return
        left = max(self.time_limit.remaining_seconds(), 0.0)
        reachable = step + int(left / seconds_per_step)
        note = warmup_note(self.config, reachable, seconds_per_step)
        if note is not None:
            self.report(f"note: {note}")


class _StopAtStep(keras.callbacks.Callback):
    """Stops `fit` once the run reaches `train_steps` (cuts the last epoch short).

    Reads the step count of the backup callback, which comes first in the callback list.
    """

    def __init__(self, train_steps, counter):
        super().__init__()
        self.train_steps = train_steps
        self.counter = counter

    def on_train_batch_end(self, batch, logs=None):
        if self.counter.step >= self.train_steps:
            self.model.stop_training = True


class _Reporter:
    """Prints the run's report lines (process 0, unless silenced)."""

    def __init__(self, enabled):
        self.enabled = enabled

    def __call__(self, message):
        if self.enabled:
            print(message, flush=True)


def _as_config(config):
    if isinstance(config, TrainingConfig):
        config.validate()
        return config
    if isinstance(config, dict):
        return TrainingConfig.from_dict(config)
    if isinstance(config, (str, os.PathLike)):
        return load_config(config)
    raise ValueError(
        "`config` must be a TrainingConfig, a dict or a config file path. "
        f"Received: config={config!r}"
    )
