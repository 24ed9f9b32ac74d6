"""Sentence segmentation with the layout kept, and the splitting of sentences too long for the
model: a whole text becomes the sentences to translate, and their translations become a
whole text again.

Framework-free. The sentence boundaries come from `sentencex` (Wikimedia's segmenter, MIT,
rules for about 240 languages, written in Rust; imported when first used, extra `documents`),
chosen over `pysbd` by measurement (`benchmarks/segmentation.py`, docs/decoding.md "Sentence
segmentation"). Around the library, the rules that make the round trip exact:

- every line is segmented alone (a sentence never spans a line break);
- a boundary is kept only at whitespace, so the words of the sentences, in order, are the
  words of the text (`text.split()`), and word alignments of a sentence shift to the whole
  text by `Segmented.word_offsets()`. Chinese and Japanese, written without spaces, also
  break after a full-width `。！？` (closing quotes stay with their sentence);
- the whitespace around and between sentences is kept verbatim and put back by
  `Segmented.join`.
"""

import bisect
import dataclasses
import re
import unicodedata

# The language rules used when none is given. sentencex's own fallback for a code it has no
# rules for is its English rules too.
DEFAULT_LANGUAGE = "en"
# Languages written without spaces between sentences: a sentence may end at a full-width
# terminator with no whitespace after it.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "yue", "wuu", "lzh", "gan", "hak"})
# ISO 639-2/3 codes of common languages, to the 639-1 codes sentencex names its rules by.
_THREE_LETTER = {
    "ara": "ar", "chi": "zh", "deu": "de", "eng": "en", "fra": "fr", "fre": "fr",
    "ger": "de", "ita": "it", "jpn": "ja", "kor": "ko", "nld": "nl", "dut": "nl",
    "pol": "pl", "por": "pt", "rus": "ru", "spa": "es", "tur": "tr", "ukr": "uk",
    "zho": "zh",
}  # fmt: skip

# The characters `str.splitlines` breaks at: each line is segmented alone.
_LINE = re.compile(r"[^\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")
_WHITESPACE = re.compile(r"\s+")
_WORD = re.compile(r"\S+")
# Sentence and clause punctuation (split_long's first two tiers), full-width forms included.
_SENTENCE_END = frozenset(".!?…。！？｡‼⁇⁈⁉")
_FULL_WIDTH_END = frozenset("。！？｡")
_CLAUSE = frozenset(",;:、，；：､")
_DASHES = frozenset("-‐‒–—―−")
_FULL_WIDTH_CLAUSE = frozenset("、，；：､")
# Closing quotes and brackets that stay with the punctuation before them.
_CLOSERS = frozenset("\"')]}»”’›」』）】〕〉》〗〙〛＂＇］｝")
# Opening quotes, brackets and inverted marks that start a sentence.
_OPENERS = frozenset("\"'([{«“‘‹„‚¿¡「『（【〔〈《〖〘〚＂＇［｛")


def _unspaced(character):
    """Whether `character` belongs to a script written without spaces (Han, kana, CJK
    punctuation and full-width forms)."""
    code = ord(character)
    return (
        0x3000 <= code <= 0x30FF
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF
        or 0x20000 <= code <= 0x3134F
    )


def _spaced_end(text):
    """Whether `text` ends (closing quotes and brackets aside) in a script written with spaces.
    A soft break always follows full-width punctuation in the source, so `join` of the
    sentences themselves never adds a space."""
    end = len(text)
    while end > 0 and text[end - 1] in _CLOSERS:
        end -= 1
    return end > 0 and not _unspaced(text[end - 1])


def _library_language(language):
    """The code sentencex names its rules by, for one of ours (`"es"`, `"pt-BR"`, `"zh-Hans"`,
    `"spa"`): the primary subtag, lower-cased; a few three-letter codes to two letters."""
    if language is None:
        return DEFAULT_LANGUAGE
    if not isinstance(language, str):
        raise ValueError(
            "`language` must be a language code (a str such as 'es' or 'pt-BR') or None. "
            f"Received: language={language!r}"
        )
    primary = re.split(r"[-_]", language.strip().lower(), maxsplit=1)[0]
    return _THREE_LETTER.get(primary, primary) or DEFAULT_LANGUAGE


class Segmenter:
    """A language-aware sentence splitter: sentencex's rules, with boundaries kept only where
    the text has whitespace (and, for Chinese and Japanese, after a full-width `。！？`).

    Args:
        language: str. The text's language, an ISO 639-1 code (`"es"`), optionally with a
            region or script (`"pt-BR"`, `"zh-Hans"`); ISO 639-2/3 codes of common languages
            (`"spa"`) are understood too. A code sentencex has no rules for uses its fallback
            chain, which ends in its English rules. Defaults to `None`: English rules
            (`DEFAULT_LANGUAGE`).

    Example:

    >>> Segmenter("es").split("Sr. García llegó. Luego se fue.")
    ['Sr. García llegó.', 'Luego se fue.']
    """

    def __init__(self, language=None):
        self.code = _library_language(language)
        self.language = language
        self.unspaced = self.code in UNSPACED_LANGUAGES

    def split(self, text):
        """The sentences of `text` (one paragraph or line; a line break always ends a
        sentence), without surrounding whitespace. Whitespace-only text has none."""
        _check_text(text)
        return [text[start:end] for start, end in self.spans(text)]

    def spans(self, text):
        """`[(start, end), ...]`: where each sentence of `text` is, without its surrounding
        whitespace, in order."""
        spans = []
        for line in _LINE.finditer(text):
            start, end = _strip_span(text, line.start(), line.end())
            if start == end:
                continue
            content = text[start:end]
            cuts = [self._snap(content, cut) for cut in self._library_cuts(content)]
            cuts = sorted({cut for cut in cuts if cut is not None})
            for left, right in zip([0, *cuts], [*cuts, len(content)]):
                piece = _strip_span(content, left, right)
                if piece[0] < piece[1]:
                    spans.append((start + piece[0], start + piece[1]))
        return spans

    def _library_cuts(self, content):
        """The offsets in `content` where sentencex starts a sentence (after the first)."""
        try:
            import sentencex
        except ImportError as error:
            raise ImportError(
                "Sentence segmentation needs the `sentencex` package: "
                "pip install 'keras-transformer-nmt[documents]'"
            ) from error
        pieces = list(sentencex.segment(self.code, content))
        if "".join(pieces) == content:
            cuts, offset = [], 0
            for piece in pieces[:-1]:
                offset += len(piece)
                cuts.append(offset)
            return cuts
        # Not a partition of the text (no release does this): its own offsets instead.
        boundaries = sentencex.get_sentence_boundaries(self.code, content)
        return sorted({int(boundary["start_index"]) for boundary in boundaries})

    def _snap(self, content, cut):
        """The boundary kept for one of the library's at `cut` (between `content[cut - 1]` and
        `content[cut]`): `cut` at whitespace, or after Chinese or Japanese sentence
        punctuation; the whitespace before opening quotes the library left on the sentence
        before (sentencex cuts `said. “‘All` after the `“`); else `None`."""
        if not 0 < cut < len(content):
            return None
        if content[cut - 1].isspace() or content[cut].isspace():
            return cut
        opening = cut
        while opening > 0 and content[opening - 1] in _OPENERS:
            opening -= 1
        if opening < cut and opening > 0 and content[opening - 1].isspace():
            return opening
        if (
            self.unspaced
            and content[cut] not in _CLOSERS
            and _soft_break(content, cut, _FULL_WIDTH_END)
        ):
            return cut
        return None


@dataclasses.dataclass
class Segmented:
    """A text cut into the sentences to translate, with what it takes to put the translations
    back in the text's layout (`segment_text` makes it).

    Attributes:
        sentences: list of str. The strings to translate, in order, without surrounding
            whitespace (the pieces of a sentence too long for the model included).
        groups: list of lists of int. For each sentence of the text, the indices into
            `sentences` of its pieces (one index for a sentence that fits).

    Example:

    >>> segmented = segment_text("Hola.  ¿Qué tal?\\n")
    >>> segmented.sentences
    ['Hola.', '¿Qué tal?']
    >>> segmented.join(["Hi.", "How are you?"])
    'Hi.  How are you?\\n'
    """

    sentences: list
    groups: list
    # The text around the sentences: before the first, between each two, after the last
    # (`len(sentences) + 1` strings; the whole text when there is no sentence).
    _separators: list = dataclasses.field(default_factory=lambda: [""], repr=False)
    # Indices of the empty separators where the text broke without whitespace after
    # Chinese or Japanese punctuation: `join` puts a space there between two translations in
    # a spaced script.
    _soft: frozenset = dataclasses.field(default_factory=frozenset, repr=False)

    def join(self, translations):
        """The translations of `sentences` (one str each, in order) put back in the text's
        layout: the text's whitespace before, between and after them, each translation
        stripped of its own surrounding whitespace.

        Raises:
            ValueError: `translations` does not hold one str per sentence.
        """
        translations = list(translations)
        if len(translations) != len(self.sentences):
            raise ValueError(
                f"`translations` must have one str per sentence ({len(self.sentences)}). "
                f"Received: {len(translations)} translations"
            )
        for index, translation in enumerate(translations):
            if not isinstance(translation, str):
                raise ValueError(
                    f"`translations` must be str. Received: translations[{index}]={translation!r}"
                )
        translations = [translation.strip() for translation in translations]
        separators = list(self._separators)
        for index, translation in enumerate(translations):
            if index + 1 in self._soft and index + 1 < len(translations):
                following = translations[index + 1]
                if _spaced_end(translation) and following and not _unspaced(following[0]):
                    separators[index + 1] = " "
        # An empty translation takes one of the spaces beside it along (the one before it
        # after a translated sentence, the one after it otherwise), unless that holds a line
        # break: no doubled or leading spaces where a sentence came back empty.
        for index, translation in enumerate(translations):
            if not translation and len(translations) > 1:
                beside = index if any(translations[:index]) else index + 1
                if "\n" not in separators[beside]:
                    separators[beside] = ""
        parts = [separators[0]]
        for index, translation in enumerate(translations):
            parts += [translation, separators[index + 1]]
        return "".join(parts)

    def word_offsets(self):
        """For each entry of `sentences`, the index in the whole text's words (`text.split()`)
        of its first word: the word its first character belongs to (a piece cut inside a
        word starts in that word). Word `j` of `sentences[i].split()` is word
        `word_offsets()[i] + j` of the text when the sentence starts at a word's start."""
        offsets, words, position = [], 0, 0
        text = self.join(self.sentences) if self.sentences else ""
        for index, sentence in enumerate(self.sentences):
            position += len(self._separators[index])
            # Whether the sentence starts a new word, or continues the one before it.
            continues = position > 0 and not text[position - 1].isspace()
            offsets.append(words - 1 if continues else words)
            words += len(sentence.split()) - (1 if continues else 0)
            position += len(sentence)
        return offsets


def segment_text(text, language=None, *, max_tokens=None, count_tokens=None, segmenter=None):
    """Cuts a text into the sentences to translate, keeping its layout.

    Every line is segmented alone; sentence boundaries are kept only at whitespace (see
    `Segmenter`). With `max_tokens` and `count_tokens`, a sentence of more than `max_tokens`
    tokens is split further by `split_long`, and its pieces are translated one by one.
    `segment_text(text).join(segment_text(text).sentences) == text` for every str.

    Args:
        text: str. The whole text: any number of paragraphs and lines.
        language: str. The text's language (`Segmenter`'s `language`). Defaults to `None`:
            the segmenter's language, else English rules.
        max_tokens: int. The most tokens a sentence may have (the model's source length,
            less its start and end tokens). Defaults to `None`: sentences are not split.
        count_tokens: callable. `count_tokens(str) -> int`: the number of tokens (word
            pieces) the model reads for a string. Required with `max_tokens`.
        segmenter: `Segmenter`. Reused across calls. Defaults to `None`: `Segmenter(language)`.

    Returns:
        A `Segmented`: `sentences` to translate, and its `join` to put the translations back.

    Example:

    >>> segmented = segment_text("Sr. García llegó. Luego se fue.", "es")
    >>> segmented.sentences
    ['Sr. García llegó.', 'Luego se fue.']
    >>> segment_text("uno, dos, tres", max_tokens=2, count_tokens=lambda s: len(s.split())).sentences
    ['uno, dos,', 'tres']
    """
    _check_text(text)
    if segmenter is None:
        segmenter = Segmenter(language)
    elif not isinstance(segmenter, Segmenter):
        raise ValueError(f"`segmenter` must be a Segmenter. Received: segmenter={segmenter!r}")
    elif language is not None and _library_language(language) != segmenter.code:
        raise ValueError(
            f"`language` and `segmenter` disagree: the segmenter is for {segmenter.code!r}. "
            f"Received: language={language!r}"
        )
    fits = _fits_check(max_tokens, count_tokens)
    spans, groups, kinds = [], [], {}
    for start, end in segmenter.spans(text):
        sentence = text[start:end]
        if fits is None or fits(sentence):
            pieces = [(0, len(sentence), None)]
        else:
            pieces = _split_spans(sentence, fits)
        groups.append(list(range(len(spans), len(spans) + len(pieces))))
        for piece_start, piece_end, kind in pieces:
            if kind is not None:
                kinds[len(spans)] = kind
            spans.append((start + piece_start, start + piece_end))
    separators, soft, position = [], set(), 0
    for index, (start, end) in enumerate(spans):
        separators.append(text[position:start])
        if (
            start == position
            and index
            and (kinds.get(index - 1) == "soft" or _soft_break(text, start))
        ):
            soft.add(index)
        position = end
    separators.append(text[position:])
    return Segmented(
        sentences=[text[start:end] for start, end in spans],
        groups=groups,
        _separators=separators,
        _soft=frozenset(soft),
    )


def split_long(sentence, max_tokens, count_tokens):
    """Splits a sentence of more than `max_tokens` tokens into pieces that each fit.

    In order of preference: after sentence punctuation (`.!?…。！？` with any closing quotes:
    the segmenter keeps a quoted passage of several sentences whole), then after clause
    punctuation (`,;:`, `、，；：`) or at a dash, into the fewest pieces that fit; a piece
    still too long by windows of whole words; a single word longer than `max_tokens` by
    characters (a last resort). Latin-script pieces break only at whitespace, Chinese and
    Japanese ones also right after their full-width punctuation. No character is lost: the
    pieces, with the text between them, give the sentence back.

    Args:
        sentence: str. One sentence.
        max_tokens: int. The most tokens a piece may have.
        count_tokens: callable. `count_tokens(str) -> int`, the model's token count.

    Returns:
        list of str: the pieces, without surrounding whitespace (`[sentence.strip()]` when it
        fits; `[]` for a whitespace-only sentence).

    Raises:
        ValueError: a single character has more than `max_tokens` tokens.

    Example:

    >>> count_words = lambda text: len(text.split())
    >>> split_long("Uno dos, tres cuatro; cinco seis siete ocho nueve.", 4, count_words)
    ['Uno dos, tres cuatro;', 'cinco seis siete ocho', 'nueve.']
    """
    _check_text(sentence, "sentence")
    fits = _fits_check(max_tokens, count_tokens, required=True)
    start, end = _strip_span(sentence, 0, len(sentence))
    if start == end:
        return []
    stripped = sentence[start:end]
    if fits(stripped):
        return [stripped]
    return [stripped[left:right] for left, right, _ in _split_spans(stripped, fits)]


def _check_text(text, name="text"):
    if not isinstance(text, str):
        raise ValueError(f"`{name}` must be a str. Received: {name}={text!r}")


def _fits_check(max_tokens, count_tokens, required=False):
    """`fits(str) -> bool`, or `None` when neither argument is given (and not `required`)."""
    if max_tokens is None and count_tokens is None and not required:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be an int >= 1. Received: max_tokens={max_tokens!r}")
    if not callable(count_tokens):
        raise ValueError(
            "`count_tokens` must be a callable str -> int (the model's token count) when "
            f"`max_tokens` is given. Received: count_tokens={count_tokens!r}"
        )

    def fits(text):
        count = count_tokens(text)
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(
                f"`count_tokens` must return an int. Received: count_tokens({text[:40]!r}) = "
                f"{count!r}"
            )
        return count <= max_tokens

    return fits


def _strip_span(text, start, end):
    """`(start, end)` narrowed past the whitespace at both ends of `text[start:end]`."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _soft_break(text, position, marks=_FULL_WIDTH_END | _FULL_WIDTH_CLAUSE):
    """Whether `text[:position]` ends in full-width punctuation (`marks`), closing quotes and
    brackets aside: where Chinese and Japanese break without whitespace."""
    before = position
    while before > 0 and text[before - 1] in _CLOSERS:
        before -= 1
    return before > 0 and text[before - 1] in marks


def _cuts(sentence):
    """The places `split_long` may cut, by tier: `[(end of the left piece, start of the right
    one, kind), ...]` for sentence punctuation, clause punctuation, whitespace, characters."""
    sentence_cuts, clause_cuts, word_cuts = [], [], []
    for match in _WHITESPACE.finditer(sentence):
        left, right = match.start(), match.end()
        word_cuts.append((left, right, None))
        before = left
        while before > 0 and sentence[before - 1] in _CLOSERS:
            before -= 1
        mark = sentence[before - 1] if before > 0 else ""
        if mark in _SENTENCE_END:
            sentence_cuts.append((left, right, None))
        elif mark in _CLAUSE or mark in _DASHES or sentence[right : right + 1] in _DASHES:
            clause_cuts.append((left, right, None))
    for position in range(1, len(sentence)):
        if sentence[position].isspace() or sentence[position - 1].isspace():
            continue
        if sentence[position] in _CLOSERS:
            continue
        if sentence[position - 1] in _FULL_WIDTH_END or (
            sentence[position - 1] in _CLOSERS and _soft_break(sentence, position)
        ):
            sentence_cuts.append((position, position, "soft"))
        elif sentence[position - 1] in _FULL_WIDTH_CLAUSE:
            clause_cuts.append((position, position, "soft"))
    sentence_cuts.sort()
    clause_cuts.sort()
    return [sentence_cuts, clause_cuts, word_cuts]


def _character_cuts(sentence, start, end, graphemes=True):
    """Cuts between characters of `sentence[start:end]`; with `graphemes`, not inside a
    grapheme (before a combining mark, joiner, variation selector or skin tone; after a
    joiner)."""
    cuts = []
    for position in range(start + 1, end):
        following, previous = sentence[position], sentence[position - 1]
        if graphemes and (
            unicodedata.category(following) in ("Mn", "Mc", "Me")
            or following in "\u200d\ufe0e\ufe0f"
            or previous == "\u200d"
            or 0x1F3FB <= ord(following) <= 0x1F3FF
        ):
            continue
        cuts.append((position, position, None))
    return cuts


def _split_spans(sentence, fits):
    """`split_long` on a stripped sentence that does not fit: `[(start, end, kind), ...]`,
    `kind` the break before the next piece (`"soft"`: after full-width punctuation)."""
    tiers = _cuts(sentence)
    return _split_range(sentence, 0, len(sentence), 0, tiers, fits)


def _split_range(sentence, start, end, tier, tiers, fits):
    """Pieces of `sentence[start:end]` (no whitespace at its ends), each fitting, cut at the
    cuts of `tier` (greedy: the longest piece that fits, which gives the fewest pieces when a
    longer text never has fewer tokens); a piece that no cut of `tier` makes fit goes to the
    next tier."""
    if tier < len(tiers):
        cuts = [cut for cut in tiers[tier] if start < cut[0] and cut[1] < end]
    else:  # between graphemes, then (a grapheme too long) between any characters
        cuts = _character_cuts(sentence, start, end, graphemes=tier == len(tiers))
    pieces, position = [], start
    while True:
        if fits(sentence[position:end]):
            pieces.append((position, end, None))
            return pieces
        first = bisect.bisect_right([cut[0] for cut in cuts], position)
        available = cuts[first:]
        # The farthest cut whose left piece fits (binary search, each answer checked).
        low, high, best = 0, len(available) - 1, None
        while low <= high:
            middle = (low + high) // 2
            if fits(sentence[position : available[middle][0]]):
                best, low = middle, middle + 1
            else:
                high = middle - 1
        if best is not None:
            left, right, kind = available[best]
            pieces.append((position, left, kind))
            position = right
            continue
        if tier > len(tiers):
            raise ValueError(
                f"A character has more tokens than `max_tokens`: {sentence[position]!r} "
                f"(in {sentence[max(0, position - 20) : position + 20]!r}) cannot be "
                "translated within the model's source length"
            )
        stop = available[0] if available else (end, end, None)
        inner = _split_range(sentence, position, stop[0], tier + 1, tiers, fits)
        inner[-1] = (*inner[-1][:2], stop[2])
        pieces.extend(inner)
        if not available:
            return pieces
        position = stop[1]
