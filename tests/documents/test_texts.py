"""`keras_transformer.documents.texts`: whole texts through an engine, sentence by sentence.

A fake engine (framework-free) that upper-cases its sentences, aligns word i to word i, counts
one word piece per word and truncates what is longer than its limit, as the real engines do:
the layout, the sentence count, the cut of long sentences, the retry of truncated pieces and
the shift of word alignments are checked against it. The real engines run in
tests/test_engines.py (`test_a_long_text_comes_back_whole_on_every_engine`).
"""

import pytest

from keras_transformer.documents.texts import plan_texts, translate_texts
from keras_transformer.translation import Capabilities, EngineBase, SearchOptions, Translation

pytestmark = pytest.mark.one_backend


class WordEngine(EngineBase):
    """Upper-cases each sentence word by word (word i aligned to word i); keeps the first
    `limit` words of a longer one (`truncated`). `counts`: whether it counts word pieces
    (else it is like a SavedModel, whose tokenizer is inside its graph)."""

    beam_size, alpha, max_source_length = 4, 0.6, None
    capabilities = Capabilities()

    def __init__(self, limit=8, counts=True):
        self.limit, self.counts, self.calls = limit, counts, []
        self.max_source_pieces = limit if counts else None

    def count_tokens(self, texts):
        return [len(text.split()) for text in texts] if self.counts else None

    def translate(self, sentences, num_hypotheses=None, target_prefix=None, **options):
        self.calls.append(list(sentences))
        results = []
        for index, sentence in enumerate(sentences):
            sentence = sentence.decode() if isinstance(sentence, bytes) else sentence
            words = sentence.split()
            kept = words[: self.limit]
            prefix = (target_prefix or [""] * len(sentences))[index]
            prefix = prefix.decode() if isinstance(prefix, bytes) else prefix
            text = (prefix + " ".join(kept).upper()).strip()
            hypotheses = [
                Translation(
                    text=text + (f" #{rank}" if rank else ""),
                    score=-float(len(kept)) - rank,
                    tokens=None,
                    truncated=len(words) > self.limit,
                    source_tokens=None,
                    target_tokens=None,
                    word_alignments=[(i, i) for i in range(len(kept))],
                )
                for rank in range(num_hypotheses or 1)
            ]
            results.append(hypotheses if num_hypotheses else hypotheses[0])
        return results


TEXT = (
    "  Primera frase aquí. Segunda frase, más larga que la primera.\n"
    "Una línea sola\n\n"
    "Otro párrafo: con una frase muy larga que no cabe en el modelo de ninguna manera posible. Fin.  "
)


@pytest.mark.parametrize("counts", [True, False], ids=["counted", "retried"])
def test_a_text_keeps_its_layout_and_every_word(counts):
    engine = WordEngine(limit=8, counts=counts)
    translation = translate_texts(engine, TEXT, language="es")
    assert translation.text == TEXT.upper()  # Spaces, line and paragraph breaks kept.
    assert not translation.truncated
    # Word i of the text is aligned to word i of its translation, across sentences and cuts.
    words = len(TEXT.split())
    assert translation.word_alignments == [(i, i) for i in range(words)]
    if counts:  # Cut before translating: one call, every piece fits.
        assert len(engine.calls) == 1
        assert all(len(sentence.split()) <= 8 for sentence in engine.calls[0])
    else:  # The truncated sentence cut (in halves) and translated again: more calls.
        assert len(engine.calls) >= 2
        assert all(len(sentence.split()) <= 8 for sentence in engine.calls[-1])
    assert translation.score == -float(words)


def test_every_sentence_of_a_5000_character_line_comes_back():
    sentence = "Y dijo Dios que la luz era buena, y apartó la luz de las tinieblas."
    line = " ".join([sentence] * 80)[:5000].rsplit(" ", 1)[0]
    assert len(line) > 4900 and "\n" not in line
    engine = WordEngine(limit=12)
    translation = translate_texts(engine, line, language="es")
    assert translation.text == line.upper() and not translation.truncated
    assert translation.text.count("TINIEBLAS.") == line.count("tinieblas.")
    assert len(engine.calls) == 1  # One batch: every sentence of the text at once.


def test_segmentation_off_translates_each_line_whole():
    engine = WordEngine(limit=3)
    translation = translate_texts(engine, "uno dos. tres cuatro.\ncinco", segment=False)
    assert translation.text == "UNO DOS. TRES\nCINCO" and translation.truncated
    assert engine.calls == [["uno dos. tres cuatro.", "cinco"]]


def test_n_best_prefixes_and_many_texts():
    engine = WordEngine()
    options = SearchOptions(num_hypotheses=2)
    found = translate_texts(
        engine, ["Hola. Adiós.", "", "Bien."], options, prefixes=["¡", None, ""]
    )
    assert [[h.text for h in text] for text in found] == [
        ["¡HOLA. ADIÓS.", "¡HOLA. #1 ADIÓS. #1"],
        [""],
        ["BIEN.", "BIEN. #1"],
    ]
    assert [h.score for h in found[0]] == [-2.0, -4.0]


def test_the_plan_refuses_what_it_cannot_pair():
    with pytest.raises(ValueError, match=r"one prefix per text.*Received: 1 prefixes for 2"):
        plan_texts(["a", "b"], prefixes=["x"])
    with pytest.raises(ValueError, match=r"Received: texts\[1\]=3"):
        plan_texts(["a", 3])
    plan = plan_texts(["Uno. Dos."])
    with pytest.raises(ValueError, match="one result per sentence of the plan"):
        plan.assemble([])
