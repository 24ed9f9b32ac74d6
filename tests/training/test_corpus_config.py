"""`[data]` settings of your own corpora: `source`/`target`, `corpora`, filters, streaming; and
a run that streams its corpus."""

import gzip

import pytest

from keras_transformer import cli
from keras_transformer.training.config import ConfigError, TrainingConfig

# Configuration checks and a TensorFlow input pipeline: one_backend.
pytestmark = pytest.mark.one_backend


def test_source_and_target_select_the_corpus_dataset():
    config = TrainingConfig.from_dict({"data": {"source": "a.es", "target": "a.en"}})
    assert config.data.dataset == "corpus" and config.data.max_length_ratio == 3.0
    assert config.data.streaming == "auto" and config.data.remove_duplicates


@pytest.mark.parametrize(
    "data, message",
    [
        ({"source": "a.es"}, "needs `data.source` and `data.target`"),
        ({"source": "a.es", "target": "a.en", "corpora": [{"path": "b.tsv"}]}, "not both"),
        ({"corpora": [{"path": "b.tsv", "weight": -1}]}, "`data.corpora[0]`: `weight` must be"),
        ({"corpora": [{"file": "b.tsv"}]}, "data.corpora[0]={'file': 'b.tsv'}"),
        (
            {"corpora": [{"path": "a.tsv", "weight": 2}, {"path": "b.tsv"}], "streaming": False},
            "data.streaming = true",
        ),
        (
            {"dataset": "tsv", "path": "a.tsv", "source": "a.es"},
            "`data.source` needs dataset='corpus'",
        ),
        ({"source": "a", "target": "b", "max_length_ratio": 0.5}, "data.max_length_ratio=0.5"),
        ({"source": "a", "target": "b", "streaming": "yes"}, "data.streaming='yes'"),
    ],
)
def test_invalid_corpus_settings_name_the_setting(data, message):
    with pytest.raises(ConfigError) as error:
        TrainingConfig.from_dict({"data": data})
    assert message in str(error.value)


def _write(path, lines, compress=False):
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def test_a_line_count_mismatch_is_one_line_and_exit_2(tmp_path, capsys):
    source = _write(tmp_path / "train.es", ["uno", "dos", "tres"])
    target = _write(tmp_path / "train.en.gz", ["one", "two"], compress=True)
    config = tmp_path / "run.toml"
    config.write_text(
        f'output_dir = "{tmp_path / "run"}"\n[data]\nsource = "{source}"\ntarget = "{target}"\n'
    )
    assert cli.main(["train", "--config", str(config)]) == 2
    errors = capsys.readouterr().err
    assert errors == (
        f"keras-transformer: error: Aligned files differ in length: {source} has 3 lines, "
        f"{target} has 2.\n"
    )
