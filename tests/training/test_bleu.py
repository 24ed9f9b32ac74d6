"""`keras_transformer.training.bleu`: corpus BLEU, exact match and the BLEU callback."""

import pytest

from keras_transformer.training import BleuCallback, TensorBoardLogger, corpus_bleu, exact_match
from tests.training.training_helpers import data, small_model


def test_bleu_callback_logs_to_history_and_tensorboard(tmp_path):
    import tensorflow as tf

    x, y = data()
    sources = ["uno dos tres cuatro", "cinco seis siete ocho"]
    references = ["one two three four", "five six seven eight"]
    table = dict(zip(sources, references, strict=True))
    bleu = BleuCallback(
        lambda batch: [table[source] for source in batch],
        sources,
        references,
        log_dir=str(tmp_path / "logs"),
    )
    logger = TensorBoardLogger(str(tmp_path / "logs"), update_freq=2)
    history = small_model().fit(
        x, y, batch_size=2, epochs=2, verbose=0, callbacks=[bleu, logger]
    )
    assert history.history["val_bleu"] == pytest.approx([100.0, 100.0])
    assert [step for step, _ in bleu.history] == [6, 12]
    tags = {}
    for run in ("train", "validation"):
        for path in tf.io.gfile.glob(str(tmp_path / "logs" / run / "events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    tags.setdefault(run, set()).add(value.tag)
    assert {"batch_loss", "epoch_loss"} <= tags["train"]
    assert {"bleu", "epoch_bleu"} <= tags["validation"]


def test_bleu_and_exact_match():
    assert corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100)
    assert corpus_bleu(["a b c d e"], ["v w x y z"]) == 0.0
    assert exact_match(["forty - two", "one"], ["forty - two", "two"]) == 0.5
    with pytest.raises(ValueError, match="same length"):
        corpus_bleu(["a"], [])
