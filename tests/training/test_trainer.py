"""`train()` in-process: the time budget, resuming, and mixed precision."""

import os

import keras
import numpy as np
import pytest

from keras_transformer.training import TrainingConfig, plan_fits, train
from keras_transformer.training.building import build_model, compile_model


@pytest.mark.slow
def test_time_budget_stops_cleanly_and_the_next_run_continues(tiny_run, capsys):
    # A budget spent before training starts: the run stops after its first step, writes a
    # final checkpoint, keeps the backup, and still ends normally.
    config = tiny_run(training={"minutes": 1e-6})
    # A run directory of 0.1 named its training configuration `config.json`: it is renamed.
    os.makedirs(config["output_dir"])
    with open(os.path.join(config["output_dir"], "config.json"), "w") as file:
        file.write("{}")
    first = train(config, verbose=2)
    # No warning: one line at the stop, and the last says how to continue (issue 60).
    out = capsys.readouterr()
    assert "WARNING" not in out.err and "time budget of 1e-06 minutes spent after 1 of 8" in out.out
    assert out.out.rstrip().splitlines()[-1] == (
        "not finished: the 1e-06-minute time budget stopped training after 1 of 8 steps. To "
        "train the other 7 steps, run the same training again (the same config and output_dir)")
    assert not os.path.exists(os.path.join(first.output_dir, "config.json"))
    assert os.path.exists(os.path.join(first.output_dir, "train_config.json"))
    assert first.metrics["stopped_by_time_limit"]
    assert first.metrics["steps"] == 1
    output_dir = first.output_dir
    assert sorted(os.listdir(os.path.join(output_dir, "checkpoints"))) == [
        "ckpt-00000001.weights.h5",
        "sha256.json",  # The checkpoints' SHA-256, checked before they are averaged.
    ]
    assert os.path.exists(os.path.join(output_dir, "backup", "state.json"))
    assert os.path.exists(os.path.join(output_dir, "model.weights.h5"))

    # The same run without the budget continues from step 1 (in the middle of epoch 1: a
    # `fit` of its 3 remaining steps, then one of epoch 2), with mid-epoch backups at 3 and 6.
    second = train(tiny_run(training={"minutes": 0, "backup_every": 3}), verbose=0)
    assert not second.metrics["stopped_by_time_limit"]
    assert second.metrics["steps"] == second.metrics["optimizer_iterations"] == 8
    assert second.metrics["averaged_checkpoints"] == [4, 8]
    assert not os.path.exists(os.path.join(output_dir, "backup"))
    assert len(second.history["loss"]) == 2
    assert np.all(np.isfinite(second.history["loss"]))
    # The final translator is also a preset directory.
    from keras_transformer import Translator

    preset = Translator.from_preset(os.path.join(output_dir, "preset"))
    sources = ["tres", "cuarenta y dos"]
    assert preset(sources) == second.translator(sources)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_keeps_logits_and_loss_in_float32(precision):
    if precision == "fp16" and keras.backend.backend() == "jax":
        import jax

        if jax.default_backend() == "cpu":
            pytest.skip("JAX on CPU has no float16 x float16 -> float32 dot_general (gradients)")
    config = TrainingConfig.from_dict(
        {
            "model": {"preset": "", "num_layers": 1, "d_model": 16, "num_heads": 2, "ff_dim": 32},
            "optimizer": {"warmup_steps": 2},
            "training": {"mixed_precision": precision},
        }
    )
    model = build_model(config, vocabulary_size=20)
    compile_model(model, config)
    assert model.dtype_policy.name == {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]
    if precision == "fp16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 20, (4, 6)).astype("int32")
    inputs = {"encoder_inputs": tokens, "decoder_inputs": tokens}
    logits = model(inputs)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert keras.backend.standardize_dtype(model.loss(tokens, logits).dtype) == "float32"
    history = model.fit(inputs, tokens, batch_size=4, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_plan_fits_resumes_mid_epoch():
    assert plan_fits(0, 10, 4) == [(0, 3, 4, 0)]
    assert plan_fits(6, 10, 4) == [(1, 2, 2, 6), (2, 3, 4, 8)]
    assert plan_fits(9, 10, 4) == [(2, 3, 1, 9)]
    assert plan_fits(8, 10, 4) == [(2, 3, 4, 8)]
    assert plan_fits(10, 10, 4) == []


@pytest.mark.slow
def test_a_linear_decay_under_a_time_budget_reaches_zero_at_the_runs_last_step(tiny_run):
    # A budget that outlasts the 12 steps: the decay's end is planned again at the start of
    # epochs 2 and 3 from the measured rate, capped at train_steps, so the rate falls to 0 at
    # step 12 (the paper's schedule would still be at sqrt(4 / 12) of its peak).
    import json

    config = tiny_run(
        optimizer={"decay": "linear", "warmup_steps": 4},
        training={"minutes": 30, "train_steps": 12, "checkpoint_every": 4},
    )
    result = train(config, verbose=0)
    assert result.metrics["steps"] == 12 and not result.metrics["stopped_by_time_limit"]
    with open(os.path.join(result.output_dir, "curves.json")) as file:
        rates = dict(json.load(file)["learning_rate"])
    peak = 64**-0.5 * 4**-0.5  # The tiny preset's d_model 64 and the warm-up's end.
    assert rates[4] == pytest.approx(peak, rel=1e-5)
    assert rates[8] == pytest.approx(peak / 2, rel=1e-5)
    assert rates[12] == 0.0
    with open(os.path.join(result.output_dir, "train_config.json")) as file:
        assert json.load(file)["optimizer"]["decay"] == "linear"


def test_the_length_penalty_tuned_on_the_validation_split_is_the_translators(
    tiny_run, monkeypatch
):
    """`evaluation.alphas`: the best on the validation split (the smallest of equals) is the
    alpha of the test, of metrics.json and of the saved translator; a finished run, run
    again, does not tune again."""
    from keras_transformer import Translator
    from keras_transformer.training import corpus_bleu, evaluation, trainer

    config = tiny_run(
        evaluation={"test": True, "alphas": [1.5, 0.0]},
        export={"translator": True},
    )
    result = train(config, verbose=0)
    metrics, translator = result.metrics, result.translator
    trials = metrics["alpha_trials"]
    assert [trial["alpha"] for trial in trials] == [0.0, 1.5]  # in increasing order
    best = max(trials, key=lambda trial: (trial["bleu"], -trial["alpha"]))
    assert metrics["alpha"] == best["alpha"] == translator.alpha
    # The validation BLEU of the chosen alpha is that of the translator as saved.
    saved = Translator.load(os.path.join(result.output_dir, "translator.keras"))
    assert saved.alpha == metrics["alpha"] != 0.6  # not `evaluation.alpha`, untried
    with open(os.path.join(result.output_dir, "valid.src")) as file:
        sources = file.read().splitlines()
    with open(os.path.join(result.output_dir, "valid.ref")) as file:
        references = file.read().splitlines()
    assert corpus_bleu(saved(sources), references) == pytest.approx(best["bleu"], abs=1e-6)
    # Run again: the stages are done, nothing is tuned again.
    monkeypatch.setattr(evaluation, "tune_alpha", None)
    monkeypatch.setattr(trainer, "tune_alpha", None)
    again = train(config, verbose=0)
    assert again.translator.alpha == again.metrics["alpha"] == metrics["alpha"]
