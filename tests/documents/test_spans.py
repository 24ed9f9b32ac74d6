from types import SimpleNamespace

import pytest

from keras_transformer.documents.spans import project_spans, word_offsets

pytestmark = pytest.mark.one_backend


def result(text, alignments):
    return SimpleNamespace(text=text, word_alignments=alignments)


def covered(text, ranges):
    return [(text[start:end], payload) for start, end, payload in ranges]


def test_word_offsets_are_the_words_of_split():
    text = " la\xa0casa\t roja \n"
    assert [text[start:end] for start, end in word_offsets(text)] == text.split()


def test_a_span_follows_its_word_when_the_word_moves():
    translation = result("the red house", [(0, 0), (1, 2), (2, 1)])
    ranges = project_spans("la casa roja", [(3, 7, "a"), (8, 12, "i")], translation)
    assert covered(translation.text, ranges) == [("house", "a"), ("red", "i")]


def test_nested_spans_stay_nested_and_siblings_disjoint():
    # "una casa roja grande" -> "a big red house" (reversed after the article).
    translation = result("a big red house", [(0, 0), (1, 3), (2, 2), (3, 1)])
    spans = [(4, 20, "b"), (4, 8, "casa"), (9, 13, "roja")]
    ranges = project_spans("una casa roja grande", spans, translation)
    assert covered(translation.text, ranges) == [
        ("big red house", "b"),
        ("house", "casa"),
        ("red", "roja"),
    ]


def test_unaligned_words_take_what_both_neighbours_share():
    # "mi casa roja" -> "my very red house": "very" aligned to nothing, between "my"
    # (outside the span) and "red" (inside): it stays outside.
    translation = result("my very red house", [(0, 0), (2, 2), (1, 3)])
    ranges = project_spans("mi casa roja", [(3, 12, "b")], translation)
    assert covered(translation.text, ranges) == [("red house", "b")]
    # Between two words of the span, it is inside.
    translation = result("red very house", [(2, 0), (1, 2)])
    ranges = project_spans("mi casa roja", [(3, 12, "b")], translation)
    assert covered(translation.text, ranges) == [("red very house", "b")]


def test_a_span_whose_words_vanished_is_an_empty_range_after_the_previous_word():
    translation = result("the house", [(0, 0), (2, 1)])
    ranges = project_spans("la muy casa", [(3, 6, "b"), (11, 11, "br")], translation)
    assert ranges == [(3, 3, "b"), (9, 9, "br")]


def test_without_alignments_relative_position_keeps_every_span():
    translation = result("one two three four five six", None)
    spans = [(0, 1, "a"), (2, 3, "b"), (4, 5, "c"), (5, 5, "d")]
    ranges = project_spans("x y z", spans, translation)
    assert [payload for _, _, payload in ranges] == ["a", "b", "c", "d"]
    assert covered(translation.text, ranges)[:3] == [
        ("one two", "a"),
        ("three four", "b"),
        ("five six", "c"),
    ]
    # An engine that aligned nothing is treated the same way.
    assert project_spans("x y z", spans, result(translation.text, [])) == ranges


def test_pieces_split_a_span_whose_words_were_separated():
    # "la casa y el perro" with "casa ... perro" in one run -> "the dog and the house".
    translation = result("the dog and the house", [(0, 0), (4, 1), (2, 2), (3, 3), (1, 4)])
    spans = [(0, 2, "plain"), (3, 18, "bold")]
    pieces = project_spans("la casa y el perro", spans, translation, contiguous=False)
    assert covered(translation.text, pieces) == [
        ("the", "plain"),
        ("dog and the house", "bold"),
    ]
    one = project_spans("la casa y el perro", spans, translation)
    assert covered(translation.text, one) == [("the", "plain"), ("dog and the house", "bold")]


def test_bad_spans_and_alignments_are_named():
    translation = result("the house", [(0, 0), (1, 1)])
    with pytest.raises(ValueError, match="never crossing"):
        project_spans("la casa", [(0, 5, "a"), (3, 7, "b")], translation)
    with pytest.raises(ValueError, match="span=\\(0, 9, 'a'\\)"):
        project_spans("la casa", [(0, 9, "a")], translation)
    with pytest.raises(ValueError, match="pair=\\(0, 5\\)"):
        project_spans("la casa", [(0, 2, "a")], result("the house", [(0, 5)]))
