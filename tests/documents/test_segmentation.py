import random

import pytest

from keras_transformer.documents.segmentation import (
    DEFAULT_LANGUAGE,
    Segmented,
    Segmenter,
    segment_text,
    split_long,
)

pytestmark = pytest.mark.one_backend

pytest.importorskip("sentencex")


def count_words(text):
    return len(text.split())


# Pieces random texts are made of: words, punctuation, every kind of whitespace and line
# break, scripts without spaces, emoji (with a skin tone and a joiner).
ATOMS = [
    "Hola", "Sr.", "García", "llegó.", "3.5", "etc.", "¿Qué?", "¡Sí!", "...", "…", "“Ve.”",
    "«No.»", "(Selah.)", "a,", "b;", "c:", "—", "-", "你好。", "世界！", "然后，", "「はい。」",
    "😀", "👍🏽", "👨‍👩‍👧", "é", "e\u0301", ".", "?", "!", " ", "  ", "\t", "\xa0", "\u3000",
    "\n", "\r\n", "\r", "\n\n", "\n \n", "\u2028", "\x0b", "\x0c", "\x85",
]  # fmt: skip
EDGE_TEXTS = [
    "", " ", "\n", "\r\n", "\t", "\n\n\n", " \r\n \r\n ", "\xa0", "\u3000", ".", "?!", "…",
    "Hola.", " Hola. ", "\nHola.\n", "A. B.", "A.  B.\t C.", "Uno.\n\nDos.\r\nTres.\n",
    "  Lead. Trail.  ", "你好。世界！", "😀. 😀!", "a\u2028b. c", "x\x1cy. z\x1fw.",
]  # fmt: skip


def random_texts(count, seed=0):
    generator = random.Random(seed)
    for _ in range(count):
        atoms = generator.choices(ATOMS, k=generator.randint(0, 40))
        glue = generator.choice(["", " ", "random"])
        if glue == "random":
            yield "".join(atom + generator.choice(["", " ", " ", "\n"]) for atom in atoms)
        else:
            yield glue.join(atoms)


ALL_TEXTS = EDGE_TEXTS + list(random_texts(400))
LANGUAGES = [None, "es", "en", "zh", "ja", "fr"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_join_of_the_sentences_gives_the_text_back(language):
    segmenter = Segmenter(language)
    for text in ALL_TEXTS:
        segmented = segment_text(text, segmenter=segmenter)
        assert segmented.join(segmented.sentences) == text
        assert all(sentence == sentence.strip() and sentence for sentence in segmented.sentences)
        assert [index for group in segmented.groups for index in group] == list(
            range(len(segmented.sentences))
        )
        # A sentence never spans a line break.
        assert all(len(sentence.splitlines()) == 1 for sentence in segmented.sentences)


@pytest.mark.parametrize("language", [None, "es", "en", "fr"])
def test_the_words_of_the_sentences_are_the_words_of_the_text(language):
    segmenter = Segmenter(language)
    for text in ALL_TEXTS:
        segmented = segment_text(text, segmenter=segmenter)
        words = [word for sentence in segmented.sentences for word in sentence.split()]
        assert words == text.split(), text
        offsets = segmented.word_offsets()
        assert offsets == [
            sum(len(sentence.split()) for sentence in segmented.sentences[:index])
            for index in range(len(segmented.sentences))
        ]
        for sentence, offset in zip(segmented.sentences, offsets):
            assert text.split()[offset : offset + len(sentence.split())] == sentence.split()


@pytest.mark.parametrize("text", ["", " ", "\n\n", " \t\r\n\xa0"])
def test_whitespace_only_text_has_no_sentence(text):
    segmented = segment_text(text)
    assert segmented.sentences == [] and segmented.groups == []
    assert segmented.join([]) == text
    assert segmented.word_offsets() == []


def test_layout_comes_back_around_the_translations():
    text = "  Hola.  ¿Qué tal?\r\n\r\n\tBien.\n"
    segmented = segment_text(text, "es")
    assert segmented.sentences == ["Hola.", "¿Qué tal?", "Bien."]
    assert segmented.join([" Hi. ", "How are you?\n", "Fine."]) == (
        "  Hi.  How are you?\r\n\r\n\tFine.\n"
    )


@pytest.mark.parametrize(
    "text, language, expected",
    [
        ("Sr. García llegó. Luego se fue.", "es", ["Sr. García llegó.", "Luego se fue."]),
        ("¿Qué? ¡Sí! Vale.", "es", ["¿Qué?", "¡Sí!", "Vale."]),
        ("Cuesta 3.5 euros. Es poco.", "es", ["Cuesta 3.5 euros.", "Es poco."]),
        ("Pues... no sé. Ya veremos.", "es", ["Pues... no sé.", "Ya veremos."]),
        ("Dr. Smith arrived. He left.", "en", ["Dr. Smith arrived.", "He left."]),
        ("He said. “‘All of them.’ Yes.", "en", ["He said.", "“‘All of them.’", "Yes."]),
        ("Uno.\nDos", "es", ["Uno.", "Dos"]),
        ("una línea\nsin punto", "es", ["una línea", "sin punto"]),
        # No whitespace, no boundary: the words stay whole.
        ("Hola.Adiós.", "es", ["Hola.Adiós."]),
        ("他说：“你好。”然后走了。", "zh", ["他说：“你好。”", "然后走了。"]),
        ("他说：“你好。”然后走了。", "en", ["他说：“你好。”然后走了。"]),
    ],
)
def test_sentences(text, language, expected):
    assert Segmenter(language).split(text) == expected
    assert segment_text(text, language).sentences == expected


def test_a_long_text_on_one_line_keeps_every_sentence():
    sentences = [f"Esta es la frase número {number} del texto." for number in range(200)]
    text = " ".join(sentences)
    assert len(text) > 5000
    segmented = segment_text(text, "es")
    assert segmented.sentences == sentences
    assert segmented.groups == [[index] for index in range(200)]


def test_chinese_pieces_joined_with_a_space_in_a_spaced_translation():
    segmented = segment_text("他说：“你好。”然后走了。", "zh")
    assert segmented.word_offsets() == [0, 0]  # one whitespace word
    assert segmented.join(["He said: “Hello.”", "Then he left."]) == (
        "He said: “Hello.” Then he left."
    )
    assert segmented.join(["他說：「你好。」", "然後走了。"]) == "他說：「你好。」然後走了。"


@pytest.mark.parametrize(
    "language, code",
    [
        (None, DEFAULT_LANGUAGE),
        ("es", "es"),
        ("ES", "es"),
        ("pt-BR", "pt"),
        ("zh-Hans", "zh"),
        ("zh_Hant_TW", "zh"),
        ("spa", "es"),
        ("xx", "xx"),
        ("", DEFAULT_LANGUAGE),
    ],
)
def test_language_codes(language, code):
    segmenter = Segmenter(language)
    assert segmenter.code == code
    assert segmenter.split("Uno. Dos.") == ["Uno.", "Dos."]


@pytest.mark.parametrize("language", [1, b"es", ["es"]])
def test_a_language_that_is_not_a_str_is_refused(language):
    with pytest.raises(ValueError, match="language="):
        Segmenter(language)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="text=None"):
        segment_text(None)
    with pytest.raises(ValueError, match="text=b'x'"):
        Segmenter().split(b"x")
    with pytest.raises(ValueError, match="max_tokens=0"):
        segment_text("a b", max_tokens=0, count_tokens=count_words)
    with pytest.raises(ValueError, match="count_tokens=None"):
        segment_text("a b", max_tokens=3)
    with pytest.raises(ValueError, match="must return an int"):
        segment_text("a b", max_tokens=3, count_tokens=lambda text: 1.5)
    with pytest.raises(ValueError, match="segmenter="):
        segment_text("a b", segmenter="es")
    with pytest.raises(ValueError, match="language='en'"):
        segment_text("a b", "en", segmenter=Segmenter("es"))
    segmented = segment_text("Uno. Dos.")
    with pytest.raises(ValueError, match="one str per sentence \\(2\\). Received: 1"):
        segmented.join(["One."])
    with pytest.raises(ValueError, match="translations\\[1\\]=None"):
        segmented.join(["One.", None])
    with pytest.raises(ValueError, match="max_tokens=None"):
        split_long("a b", None, count_words)


def test_split_long_at_clause_punctuation_into_the_fewest_pieces():
    sentence = "Uno dos, tres cuatro; cinco seis: siete — ocho nueve diez."
    assert split_long(sentence, 4, count_words) == [
        "Uno dos, tres cuatro;",
        "cinco seis: siete —",
        "ocho nueve diez.",
    ]
    assert split_long(sentence, 100, count_words) == [sentence]
    assert split_long("  ", 3, count_words) == []


def test_split_long_prefers_sentence_punctuation():
    # A quoted passage the segmenter keeps whole breaks at its sentences first.
    sentence = "“Uno, dos tres. Cuatro, cinco seis.”"
    assert split_long(sentence, 3, count_words) == ["“Uno, dos tres.", "Cuatro, cinco seis.”"]


def test_split_long_by_words_then_characters():
    assert split_long("uno dos tres cuatro cinco seis siete", 3, count_words) == [
        "uno dos tres",
        "cuatro cinco seis",
        "siete",
    ]
    assert split_long("abcdefghij", 4, len) == ["abcd", "efgh", "ij"]
    # Not inside a grapheme: the skin tone stays with its emoji.
    assert split_long("ab👍🏽cd", 3, len) == ["ab", "👍🏽c", "d"]
    assert split_long("你好，世界；再见。我们走", 4, len) == [
        "你好，",
        "世界；",
        "再见。",
        "我们走",
    ]
    with pytest.raises(ValueError, match="A character has more tokens than `max_tokens`"):
        split_long("abc", 1, lambda text: 2 * len(text))


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 8])
def test_split_long_pieces_fit_and_lose_nothing(max_tokens):
    def count_tokens(text):  # a word-piece-like count: one per 4 characters of each word
        return sum(-(-len(word) // 4) for word in text.split())

    for text in ALL_TEXTS[:200]:
        for line in text.splitlines():
            pieces = split_long(line, max_tokens, count_tokens)
            assert all(count_tokens(piece) <= max_tokens for piece in pieces)
            assert all(piece == piece.strip() and piece for piece in pieces)
            # In order, and nothing but whitespace between them.
            position = 0
            for piece in pieces:
                found = line.index(piece, position)
                assert not line[position:found].strip()
                position = found + len(piece)
            assert not line[position:].strip()
            assert "".join("".join(piece.split()) for piece in pieces) == "".join(line.split())


def test_segment_text_splits_long_sentences_and_joins_them_back():
    text = "Corto. Uno dos, tres cuatro cinco seis, siete ocho.\n\nFin."
    segmented = segment_text(text, "es", max_tokens=4, count_tokens=count_words)
    assert segmented.sentences == [
        "Corto.",
        "Uno dos,",
        "tres cuatro cinco seis,",
        "siete ocho.",
        "Fin.",
    ]
    assert segmented.groups == [[0], [1, 2, 3], [4]]
    assert segmented.word_offsets() == [0, 1, 3, 7, 9]
    assert segmented.join(segmented.sentences) == text
    assert segmented.join(
        ["Short.", "One two,", "three four five six,", "seven eight.", "End."]
    ) == ("Short. One two, three four five six, seven eight.\n\nEnd.")


@pytest.mark.parametrize("max_tokens", [1, 2, 4])
def test_segment_text_round_trip_with_long_sentences(max_tokens):
    for text in ALL_TEXTS[:200]:
        segmented = segment_text(text, "es", max_tokens=max_tokens, count_tokens=len)
        assert segmented.join(segmented.sentences) == text
        assert all(len(sentence) <= max_tokens for sentence in segmented.sentences)
        offsets = segmented.word_offsets()
        # Each piece starts in the word its offset names.
        words = text.split()
        for sentence, offset in zip(segmented.sentences, offsets):
            assert sentence.split()[0] in words[offset]


def test_segmented_is_a_dataclass_with_the_layout_private():
    segmented = segment_text(" Uno. ")
    assert isinstance(segmented, Segmented)
    assert repr(segmented) == "Segmented(sentences=['Uno.'], groups=[[0]])"
