"""`keras_transformer.documents.segmentation`: sentences, long-sentence pieces and the layout
kept for the way back (framework-free)."""

import random

import pytest

from keras_transformer.documents.segmentation import (
    Segmenter,
    segment_text,
    split_long,
)

pytestmark = pytest.mark.one_backend


def words(text):
    return len(text.split())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "\r\n",
        "\n\n\n",
        "\tHola.\t",
        "Hola. Adiós.",
        "  Uno. Dos.  \n\n  Tres.\r\nCuatro\u00a0cinco. Seis.  ",
        "你好。世界！",
        "Emoji 🙂. Otra 🙂.\u2028Línea.",
        "Sin punto final",
    ],
)
def test_the_layout_comes_back_exactly(text):
    for max_tokens in (None, 2):
        found = segment_text(text, "es", max_tokens=max_tokens, count_tokens=words)
        assert found.join(found.sentences) == text
        assert all(sentence == sentence.strip() and sentence for sentence in found.sentences)
        assert [w for s in found.sentences for w in s.split()] == text.split()


def test_random_texts_round_trip_and_keep_their_words():
    rng = random.Random(0)
    pieces = ["Sr.", "García", "llegó.", "¿Qué?", "¡Sí!", "3.5", "etc.", "\n", "\n\n", " ", "\t",
              "\u00a0", "fin", "—", "a,", "b;", "…", "Dr.", "U.S.A.", "x" * 30]  # fmt: skip
    for _ in range(300):
        text = "".join(rng.choice(pieces) + rng.choice(["", " ", "  "]) for _ in range(30))
        found = segment_text(text, rng.choice(["es", "en", None, "pt-BR"]), max_tokens=3,
                             count_tokens=words)  # fmt: skip
        assert found.join(found.sentences) == text
        assert all(words(sentence) <= 3 for sentence in found.sentences)
        offsets = found.word_offsets()
        assert offsets == sorted(offsets) and len(offsets) == len(found.sentences)
        assert [w for s in found.sentences for w in s.split()] == text.split()


def test_spanish_sentences_abbreviations_and_questions():
    segmenter = Segmenter("es")
    assert segmenter.split("Sr. García llegó. Luego se fue.") == ["Sr. García llegó.", "Luego se fue."]
    assert segmenter.split("¿Qué? ¡Sí! Vale.") == ["¿Qué?", "¡Sí!", "Vale."]
    assert segmenter.split("Pesa 3.5 kilos. Bien.") == ["Pesa 3.5 kilos.", "Bien."]
    found = segment_text("Uno. Dos.\n\nTres. Cuatro.", "es")
    assert found.sentences == ["Uno.", "Dos.", "Tres.", "Cuatro."]
    assert found.join(["One.", " Two. ", "Three.", "Four."]) == "One. Two.\n\nThree. Four."
    assert found.word_offsets() == [0, 1, 2, 3]


def test_a_long_sentence_is_cut_at_clauses_then_words_then_characters():
    assert split_long("uno dos, tres cuatro cinco", 3, words) == ["uno dos,", "tres cuatro cinco"]
    assert split_long("a b c d e f g", 3, words) == ["a b c", "d e f", "g"]
    # A word longer than the limit (counted here as one piece per 4 characters).
    pieces = split_long("x" * 10 + " y", 2, lambda text: -(-len(text) // 4))
    assert "".join(pieces).replace(" ", "") == "x" * 10 + "y"
    assert all(-(-len(piece) // 4) <= 2 for piece in pieces)
    found = segment_text("Corta. " + "muy " * 9 + "larga.", "es", max_tokens=4, count_tokens=words)
    assert found.sentences == ["Corta.", "muy muy muy muy", "muy muy muy muy", "muy larga."]
    assert found.groups == [[0], [1, 2, 3]]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"Received: language=3"):
        Segmenter(3)
    with pytest.raises(ValueError, match=r"Received: text=b'x'"):
        segment_text(b"x")
    with pytest.raises(ValueError, match=r"Received: max_tokens=0"):
        segment_text("x", max_tokens=0, count_tokens=words)
    with pytest.raises(ValueError, match=r"Received: count_tokens=None"):
        segment_text("x", max_tokens=3)
    with pytest.raises(ValueError, match=r"2 translations for 1 sentences"):
        segment_text("x").join(["a", "b"])
