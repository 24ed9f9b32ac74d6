"""What the tests of the `keras-transformer` command share."""

import io
import os
import sys

import keras
import pytest

from keras_transformer import cli
from keras_transformer.translation import Capabilities, EngineBase, Translation

BACKEND = keras.backend.backend()
tensorflow_only = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="the SavedModel is exported on the TensorFlow backend"
)
SCRIPT = os.path.join(os.path.dirname(sys.executable), "keras-transformer")


def run_main(capsysbinary, argv, stdin=None, monkeypatch=None):
    """Runs `cli.main(argv)`; returns `(status, stdout lines as str, stderr as str)`."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    status = cli.main(argv)
    captured = capsysbinary.readouterr()
    lines = captured.out.decode("utf-8").split("\n")
    assert lines[-1] == ""
    return status, lines[:-1], captured.err.decode("utf-8")


def parse_n_best(lines):
    """`{index: [(text, score)]}` of `INDEX ||| TRANSLATION ||| SCORE` lines."""
    parsed = {}
    for line in lines:
        index, rest = line.split(" ||| ", 1)
        text, score = rest.rsplit(" ||| ", 1)
        parsed.setdefault(int(index), []).append((text, float(score)))
    return parsed


class Recorded(EngineBase):
    """An engine whose translations are `texts` (or the inputs upper-cased), failing on the
    call numbered `fail_on` (from 1)."""

    max_source_length = None
    max_source_pieces = None
    beam_size, alpha = 4, 0.6
    capabilities = Capabilities(sampling=False, prefixes=False, alignments=False, scoring=False)

    def __init__(self, texts=None, fail_on=None):
        self.texts, self.fail_on, self.calls = texts, fail_on, 0

    def translate(self, batch, beam_size=None, num_hypotheses=None):
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("out of memory")
        texts = self.texts or [
            (sentence.decode() if isinstance(sentence, bytes) else sentence).upper()
            for sentence in batch
        ]
        return [[Translation(text, 0.0, None, False, None, None)] for text in texts]
