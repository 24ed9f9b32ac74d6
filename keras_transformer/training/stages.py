"""The end of a run, stage by stage: `stages.json` records the stages done after training.

Once `fit` has made the last step, `keras_transformer.training.train` goes through these
stages, in this order, each ending with its files written atomically:

| stage | writes | records |
| --- | --- | --- |
| `trained` | (the backup of the last step) | steps, optimizer iterations, seconds, loss history |
| `averaged` | `model.weights.h5` | the steps of the averaged checkpoints |
| `tuned` | | the length penalty chosen on the validation split (`evaluation.alphas`) |
| `evaluated` | | test BLEU, exact match, examples |
| `saved` | `translator.keras`, `preset/` | |
| `exported` | `saved_model/` | the sample translations of the SavedModel |
| `finished` | `metrics.json` | |

Once a stage's files are in place, the stage and what it produced are added to `stages.json`
(one atomic rewrite), so at every instant the record names only stages whose files are
complete. The same command run after a kill skips the recorded stages, loads what they
produced (the averaged weights, the metrics) and goes on with the first stage not recorded;
the backup is deleted only after the last one. The record stays when the run ends: the
command of a finished run, run again, reloads the final weights and does nothing else.

A record belongs to one configuration (all of it but `output_dir` and `training.minutes`);
a run with another configuration ignores it.
"""

import json
import os

from keras_transformer.files import read_json, write_json

STAGES = ("trained", "averaged", "tuned", "evaluated", "saved", "exported", "finished")


class RunStages:
    """The stages of the end of a run that are done, as recorded in `stages.json`.

    Args:
        path: str. The record file.
        config: `TrainingConfig`. The run's configuration; a record written under another
            one is stale and ignored.
        is_chief: bool. Whether this process writes the record. Defaults to `True`.

    Attributes:
        stale: bool. `path` holds a record of another configuration (or an unreadable one).
        recording: bool. Whether `record` writes; `train` turns it off when the time budget
            stopped training before the last step (the stages then describe an unfinished
            run, which the next run continues).

    Example:

    >>> import tempfile
    >>> from keras_transformer.training import TrainingConfig
    >>> path = os.path.join(tempfile.mkdtemp(), "stages.json")
    >>> stages = RunStages(path, TrainingConfig())
    >>> stages.record("trained", steps=100)
    {'steps': 100}
    >>> RunStages(path, TrainingConfig()).get("trained"), stages.done("averaged")
    ({'steps': 100}, False)
    >>> RunStages(path, TrainingConfig().replace(**{"training.train_steps": 5})).stale
    True
    """

    def __init__(self, path, config, is_chief=True):
        self.path = os.fspath(path)
        self.is_chief = is_chief
        self.recording = True
        self._config = _identity(config)
        record = read_json(self.path)
        valid = (
            isinstance(record, dict)
            and record.get("config") == self._config
            and isinstance(record.get("stages"), dict)
        )
        self.stale = record is not None and not valid
        self._stages = dict(record["stages"]) if valid else {}

    def done(self, stage):
        """Whether `stage` is recorded."""
        return self.get(stage) is not None

    def done_stages(self):
        """The recorded stages, in order."""
        return [stage for stage in STAGES if stage in self._stages]

    def get(self, stage):
        """What `stage` recorded (a dict), or `None` if it is not done."""
        _check_stage(stage)
        values = self._stages.get(stage)
        return dict(values) if values is not None else None

    def record(self, stage, **values):
        """Records `stage` as done with `values` (JSON-serializable), atomically.

        Call it only once the stage's files are written.

        Returns:
            dict, `values`.
        """
        _check_stage(stage)
        if not self.recording:
            return values
        self._stages[stage] = values
        if self.is_chief:
            write_json(self.path, {"config": self._config, "stages": self._stages})
        return values

    def clear(self):
        """Forgets every stage and removes the record file."""
        self._stages = {}
        self.stale = False
        if self.is_chief and os.path.exists(self.path):
            os.remove(self.path)


def _identity(config):
    """The part of `config` a record belongs to, as it reads back from JSON."""
    values = config.to_dict()
    values.pop("output_dir", None)
    values.get("training", {}).pop("minutes", None)
    return json.loads(json.dumps(values, sort_keys=True))


def _check_stage(stage):
    if stage not in STAGES:
        raise ValueError(f"`stage` must be one of {list(STAGES)}. Received: stage={stage!r}")
