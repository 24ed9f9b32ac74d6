"""What a run leaves besides its model: its held-out pairs as text files (`valid.src`,
`valid.ref`, `test.src`, `test.ref`), scored again by `keras-transformer evaluate --run`; its
curves (`curves.png`, `curves.json`); and the note naming a warm-up its budget cuts short."""

import json
import os

import pytest

from keras_transformer.datasets import Splits
from keras_transformer.training import TrainingConfig, train
from keras_transformer.training import curves as curves_module
from keras_transformer.training.building import load_splits
from keras_transformer.training.config import warmup_note
from keras_transformer.training.curves import Curves, plot_curves
from keras_transformer.training.run import RunPaths, write_held_out
from keras_transformer.training.trainer import _Forecast
from tests.cli.helpers import run_main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NOTE = "note: the learning-rate warm-up cannot end inside the run"


def lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().split("\n")[:-1]


@pytest.fixture
def finished_run(tiny_run, capsysbinary, monkeypatch):
    """`(config, result, report, drawings)`: a tiny run of 6 steps validating at steps 3 and
    6 (loss and BLEU), tested and saved, with a small learning rate (an untrained model's
    hypotheses are many words, not empty: their BLEU and chrF are not 0). Its warm-up (10
    steps) is longer than the run. `drawings`: the series' steps at each `plot_curves` call."""
    drawings = []

    def recording(record, path):
        drawings.append({name: [step for step, _ in points] for name, points in record.items()})
        return plot_curves(record, path)

    monkeypatch.setattr(curves_module, "plot_curves", recording)
    config = tiny_run(
        optimizer={"learning_rate_scale": 0.01},
        training={"train_steps": 6, "steps_per_epoch": 3, "checkpoint_every": 3,
                  "average_checkpoints": 1},
        evaluation={"test": True, "bleu_every": 0},
        export={"translator": True},
    )
    result = train(config, verbose=2)
    return config, result, capsysbinary.readouterr().out.decode("utf-8"), drawings


def test_a_run_writes_its_held_out_pairs_curves_and_evaluate_run_scores_them(
    finished_run, capsysbinary
):
    config, result, report, drawings = finished_run
    paths = RunPaths(result.output_dir)
    splits = load_splits(TrainingConfig.from_dict(config).data, seed=0)
    metrics = json.loads(open(paths.metrics, encoding="utf-8").read())

    # The held-out files are the splits the run used, pair for pair, and the test pairs are
    # the ones it scored.
    for split, (sources, references) in paths.held_out.items():
        pairs = getattr(splits, split)
        assert lines(sources) == [source for source, _ in pairs]
        assert lines(references) == [reference for _, reference in pairs]
    test_sources, test_references = paths.held_out["test"]
    assert len(lines(test_sources)) == metrics["test_sentences"] == 16
    examples = metrics["test_examples"]
    assert lines(test_sources)[: len(examples)] == [example["source"] for example in examples]
    assert lines(test_references)[: len(examples)] == [example["reference"] for example in examples]
    assert "held-out files: valid.src, valid.ref (16 pairs); test.src, test.ref (16 pairs)" in report

    # evaluate --run: the run's translator on its own test files gives the run's scores.
    status, output, errors = run_main(capsysbinary, ["evaluate", "--run", result.output_dir, "--json"])
    assert status == 0, errors
    scored = json.loads("\n".join(output))
    assert scored["system"] == paths.translator
    assert scored["sentences"] == metrics["test_sentences"]
    assert metrics["test_chrf"] > 0  # hypotheses with words: the comparison can fail
    assert scored["scores"]["bleu"]["score"] == metrics["test_bleu"]
    assert scored["scores"]["chrf"]["score"] == metrics["test_chrf"]
    assert scored["scores"]["bleu"]["signature"] == metrics["test_signatures"]["bleu"]

    # The curves: drawn at each validation (steps 3 and 6) and when training ends.
    assert [drawing["val_loss"] for drawing in drawings] == [[3], [3, 6], [3, 6]]
    assert [drawing["val_bleu"] for drawing in drawings] == [[3], [3, 6], [3, 6]]
    assert drawings[-1]["loss"] == drawings[-1]["learning_rate"] == list(range(1, 7))
    with open(paths.curves, "rb") as file:
        picture = file.read()
    assert picture.startswith(PNG_SIGNATURE) and len(picture) > 10_000
    record = json.loads(open(paths.curves_record, encoding="utf-8").read())
    assert [value for _, value in record["val_loss"]] == pytest.approx(result.history["val_loss"])

    # The warm-up (10 steps) does not end inside the 6 steps: named once, with the fix.
    assert report.count(NOTE) == 1
    assert "optimizer.warmup_steps = 10 > 6 steps" in report
    assert "set [optimizer] warmup_steps = 1" in report


def test_held_out_files_are_written_once_and_none_for_an_empty_split(tmp_path):
    paths = RunPaths(str(tmp_path))
    validation = [("uno", "one"), ("dos\ny tres", "two")]
    test = [("cuatro", "four")]
    counts = write_held_out(paths, Splits([], validation, test))
    assert counts["validation"] == {"pairs": 2, "joined": 1, "written": True}
    assert lines(paths.held_out["validation"][0]) == ["uno", "dos y tres"]  # one line per pair
    written = {path: os.stat(path).st_mtime_ns for path in paths.held_out["test"]}
    # A resumed run (the same splits) rewrites nothing.
    assert not write_held_out(paths, Splits([], validation, test))["test"]["written"]
    assert {path: os.stat(path).st_mtime_ns for path in paths.held_out["test"]} == written
    # A run without a test split: no test files (an earlier run's are removed).
    counts = write_held_out(paths, Splits([], validation, []))
    assert counts["test"]["pairs"] == 0
    assert not any(os.path.exists(path) for path in paths.held_out["test"])
    assert sorted(os.listdir(tmp_path)) == ["valid.ref", "valid.src"]


def test_curves_keep_the_points_up_to_the_resumed_step_and_skip_without_matplotlib(
    tmp_path, monkeypatch, caplog
):
    directory = str(tmp_path)
    png, record = os.path.join(directory, "curves.png"), os.path.join(directory, "curves.json")
    first = Curves(png, record, train_steps=100)
    first.record["loss"] = [[10, 5.0], [20, 4.0], [30, 3.5]]
    first.record["val_loss"] = [[20, 4.2], [30, 3.9]]
    assert first.write()
    resumed = Curves(png, record, train_steps=100)
    resumed.resume(20)  # a backup of step 20
    assert resumed.record["loss"] == [[10, 5.0], [20, 4.0]]
    assert resumed.record["val_loss"] == [[20, 4.2]]
    resumed.resume(0)  # a fresh start forgets an earlier run's points
    assert resumed.record["loss"] == []

    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    os.remove(png)
    with caplog.at_level("WARNING", logger="keras_transformer"):
        assert not resumed.write() and not resumed.write()
    assert not os.path.exists(png) and os.path.exists(record)
    warnings = [entry.getMessage() for entry in caplog.records if "matplotlib" in entry.getMessage()]
    assert len(warnings) == 1 and "curves.png is not drawn" in warnings[0]


def test_the_warmup_note_appears_only_when_the_budget_cuts_the_warmup():
    config = TrainingConfig().replace(
        **{"training.train_steps": 1000, "optimizer.warmup_steps": 4000}
    )
    note = warmup_note(config)
    assert "optimizer.warmup_steps = 4,000 > 1,000 steps" in note
    assert note.endswith("set [optimizer] warmup_steps = 100 (a tenth of the steps)")
    assert warmup_note(config.replace(**{"optimizer.warmup_steps": 1000})) is None

    # A time budget: known once the step rate is measured.
    budget = config.replace(**{"training.minutes": 3.0, "optimizer.warmup_steps": 400})
    assert warmup_note(budget) is None  # 400 of 1,000 steps: fine, up front

    class Limit:
        minutes = 3.0

        def __init__(self, seconds):
            self.seconds = seconds

        def remaining_seconds(self):
            return self.seconds

    class Counter:
        step = 12

    for seconds_left, expected in [(150.0, True), (600.0, False)]:
        reported = []
        forecast = _Forecast(budget, 1000, Counter(), reported.append, Limit(seconds_left))
        forecast.forecast(seconds_per_step=1.5, step=12)  # 12 + 150 / 1.5 = 112 steps
        notes = [line for line in reported if line.startswith(NOTE)]
        assert len(notes) == expected, reported
        if expected:
            assert "optimizer.warmup_steps = 400 > 112 steps, the steps training.minutes = 3 " \
                "allows, at the measured 1.50 s per step" in notes[0]
            assert "set [optimizer] warmup_steps = 11" in notes[0]

    # A config of minutes only (no `train_steps`) trains until the time is spent: `_Forecast`
    # reads that from the config and says where the budget stops the run, no advice.
    reported = []
    minutes_only = TrainingConfig().replace(**{"training.minutes": 3.0})
    forecast = _Forecast(minutes_only, 100_000, Counter(), reported.append, Limit(150.0))
    forecast.forecast(seconds_per_step=1.5, step=12)
    assert reported[0] == ("forecast: the time budget (training.minutes = 3) stops the run near "
                           "step 112, at the measured 1.50 s per step")
