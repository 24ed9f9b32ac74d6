"""Fake engines for the document tests: word-by-word Spanish to English with known word
alignments, so that where each tag must land is known."""

from types import SimpleNamespace

WORDS = {
    "la": "the",
    "el": "the",
    "una": "a",
    "un": "a",
    "casa": "house",
    "perro": "dog",
    "roja": "red",
    "grande": "big",
    "negro": "black",
    "y": "and",
    "es": "is",
    "mi": "my",
    "hola": "hello",
    "mundo": "world",
    "ejecute": "run",
    "ahora": "now",
    "con": "with",
    "texto": "text",
    "celda": "cell",
    "cabecera": "header",
    "pie": "footer",
    "descargue": "download",
}
NOUNS = {"casa", "perro", "mundo", "texto"}
ADJECTIVES = {"roja", "grande", "negro"}


def _key(word):
    return word.lower().strip(".,;:!?")


def _english(word):
    key = _key(word)
    english = WORDS.get(key, word)
    return english + word[len(word.rstrip(".,;:!?")) :] if key in WORDS else word


def adjective_first(texts, *, align=True):
    """Translates word by word, a noun followed by an adjective swapped ("casa roja" ->
    "red house"); punctuation stays on its word."""
    results = []
    for text in texts:
        words = text.split()
        order = list(range(len(words)))
        for i in range(len(words) - 1):
            if _key(words[order[i]]) in NOUNS and _key(words[order[i + 1]]) in ADJECTIVES:
                order[i], order[i + 1] = order[i + 1], order[i]
        results.append(
            SimpleNamespace(
                text=" ".join(_english(words[i]) for i in order),
                word_alignments=[(i, j) for j, i in enumerate(order)] if align else None,
            )
        )
    return results


def reversed_words(texts):
    """Translates word by word and reverses the whole text."""
    results = []
    for text in texts:
        words = text.split()
        results.append(
            SimpleNamespace(
                text=" ".join(_english(word) for word in reversed(words)),
                word_alignments=[(len(words) - 1 - j, j) for j in range(len(words))],
            )
        )
    return results


def without_alignments(texts):
    return adjective_first(texts, align=False)


class Recorder:
    """Wraps an engine, recording each call's texts."""

    def __init__(self, engine=adjective_first):
        self.engine, self.calls = engine, []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return self.engine(texts)


def in_place(texts):
    """Translates word by word, keeping the text's own whitespace (a non-breaking space,
    line breaks) between the words."""
    from keras_transformer.documents.spans import word_offsets

    results = []
    for text in texts:
        offsets = word_offsets(text)
        pieces, position = [], 0
        for start, end in offsets:
            pieces += [text[position:start], _english(text[start:end])]
            position = end
        pieces.append(text[position:])
        results.append(
            SimpleNamespace(
                text="".join(pieces), word_alignments=[(i, i) for i in range(len(offsets))]
            )
        )
    return results
