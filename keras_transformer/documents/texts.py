"""Whole texts through any engine: each text cut into sentences (`segmentation`), a sentence
too long for the model cut further, every piece translated in one batch, and the pieces put
back in the text's own layout.

`plan_texts` does the cutting and `TextPlan.assemble` the joining, with the engine call in
between left to the caller (`translate_texts` calls an engine at once; the server sends the
plan's sentences through its batcher, so that the sentences of concurrent requests share
searches). A piece the engine still truncated (a SavedModel counts no word pieces in Python)
is cut in halves at word boundaries and translated again (`TextPlan.retry`), so no text comes
back with its end missing.

A whole text's `Translation` has the joined `text`, the sum of its pieces' `score`s,
`truncated` true only where a piece of a single word was still too long, and
`word_alignments` between the words of the whole source text and of the whole translation
(each piece's links shifted by the words before it); `tokens`, `source_tokens`,
`target_tokens`, `attention` and `alignments` (word pieces) are per piece: `None` here.
"""

import dataclasses
import re

from keras_transformer.documents.segmentation import Segmenter, segment_text, split_long
from keras_transformer.translation import Translation

# A sentence longer than this share of the most word pieces the model reads is cut after its
# clause punctuation (only there: a clause stays whole). Measured on the Bible test verses in
# paragraphs (benchmarks/paragraphs.py, a 25-minute `make bible` translator reading 126
# pieces): sentences the segmenter left of several verses joined at `;` or `,` scored 28.17
# BLEU cut at 126 pieces only, against 31.53 verse by verse; cut at 63 pieces 30.95, at 48
# 31.42, at 40 31.49 (at clauses, then words). A model reads well what it was trained on.
CLAUSE_SHARE = 1 / 3
_CLAUSE_END = re.compile(r"[.!?;:,\u2026\u3001\uff0c\uff1b\uff1a\u3002\uff01\uff1f]+[\"'\u201d\u2019\u00bb)\]]*(?=\s)")

# How many times a piece the engine truncated is cut in halves again (word windows halve
# each time: 2**8 = 256 times fewer words is more than any sentence needs).
MAX_RETRIES = 8


class _WholeLines(Segmenter):
    """A segmenter that keeps each line whole (segmentation off)."""

    def spans(self, text):
        return [
            (start, end)
            for start, end in (
                (
                    match.start() + len(match.group()) - len(match.group().lstrip()),
                    match.start() + len(match.group().rstrip()),
                )
                for match in re.finditer(r"[^\n\r]+", text)
            )
            if start < end
        ]


@dataclasses.dataclass
class TextPlan:
    """The pieces of some texts to translate, and how to put their translations back.

    Attributes:
        sentences: list of str. Every piece of every text, in order (what to translate).
        prefixes: list of str or `None`. Each piece's target prefix (a text's prefix goes to
            its first piece), or `None` for none.
        segmented: list of `segmentation.Segmented`, one per text.
        owners: list of int. The text of each entry of `sentences`.
        cut: bool. Pieces the engine truncated are cut and translated again (`retry`).
        clauses: list of `(index, parts)`: the segmented pieces (indices into the pieces of
            `segmented`, in order) sent as several clauses, `parts` of them each; their
            results are joined back in `assemble`.
    """

    sentences: list
    prefixes: list
    segmented: list
    owners: list
    cut: bool = True
    clauses: list = dataclasses.field(default_factory=list)

    def retry(self, results):
        """The pieces to translate again, as a `TextPlan` of their parts, and `[(piece,
        parts)]`: each piece whose result (`Translation`, or a list of hypotheses) says
        `truncated`, cut in two at a word boundary (its prefix goes to its first part);
        `None` when none was truncated (or can be cut)."""
        again, split, prefixes = [], [], []
        for index, result in enumerate(results if self.cut else ()):
            best = result[0] if isinstance(result, list) else result
            words = self.sentences[index].split()
            if not best.truncated or len(words) < 2:
                continue
            parts = split_long(
                self.sentences[index], (len(words) + 1) // 2, lambda text: len(text.split())
            )
            split.append((index, parts))
            again += parts
            prefix = self.prefixes[index] if self.prefixes is not None else ""
            prefixes += [prefix] + [""] * (len(parts) - 1)
        if not again:
            return None
        plan = TextPlan(again, prefixes if self.prefixes is not None else None, [], [])
        return plan, split

    def merge(self, results, split, found):
        """`results` with each retried piece's result replaced by its parts' results (`found`,
        in `retry`'s order) joined."""
        results = list(results)
        found = iter(found)
        for index, parts in split:
            pieces = [next(found) for _ in parts]
            results[index] = _joined_pieces(pieces, parts, results[index])
        return results

    def assemble(self, results, num_hypotheses=None):
        """The whole-text `Translation` of each text (a list of `num_hypotheses` of them,
        best first, when given), from one result per entry of `sentences`.

        Hypothesis `k` of a text joins hypothesis `k` of each piece (its last one where a
        piece has fewer: an empty piece has one), as `serve` joins the lines of a text.
        """
        if len(results) != len(self.sentences):
            raise ValueError(
                "`results` must hold one result per sentence of the plan. Received: "
                f"{len(results)} results for {len(self.sentences)} sentences"
            )
        results = self._joined_clauses(results)
        per_text = [[] for _ in self.segmented]
        owners = [owner for owner, plan in enumerate(self.segmented) for _ in plan.sentences]
        for owner, result in zip(owners, results, strict=True):
            per_text[owner].append(result if isinstance(result, list) else [result])
        translations = []
        for segmented, pieces in zip(self.segmented, per_text, strict=True):
            ranks = max([len(hypotheses) for hypotheses in pieces] or [1])
            options = [
                _whole_text(segmented, [hyps[min(rank, len(hyps) - 1)] for hyps in pieces])
                for rank in range(min(ranks, num_hypotheses or 1))
            ]
            translations.append(options if num_hypotheses is not None else options[0])
        return translations


    def _joined_clauses(self, results):
        """One result per piece of `segmented` from the results of `sentences` (the clauses
        of a cut piece joined, `clauses`)."""
        if not self.clauses:
            return list(results)
        cut = dict(self.clauses)
        joined, position, piece = [], 0, 0
        while position < len(results):
            parts = cut.get(piece)
            if parts is None:
                joined.append(results[position])
                position += 1
            else:
                found = list(results[position : position + len(parts)])
                joined.append(_joined_pieces(found, parts, found[0]))
                position += len(parts)
            piece += 1
        return joined


def plan_texts(
    texts,
    language=None,
    *,
    segment=True,
    max_pieces=None,
    count_tokens=None,
    prefixes=None,
    segmenter=None,
):
    """Cuts `texts` into the pieces to translate (`TextPlan`).

    Args:
        texts: list of str.
        language: str or `None`. The source language (ISO 639-1, as `"es"`), for the
            segmenter's rules. Defaults to `None` (its default rules).
        segment: bool. Cut each line into sentences, and a sentence too long for the model
            further; `False` translates each line whole, as before 0.4 (a line too long for
            the model is then truncated: `Translation.truncated`). Defaults to `True`.
        max_pieces: int or `None`. The most source word pieces the engine translates whole
            (`Engine.max_source_pieces`); `None`: unknown (truncated pieces are retried).
        count_tokens: callable `(list of str) -> list of int` or `None`: the engine's
            `count_tokens`.
        prefixes: list of str (one per text, `None` or `""` for none) or `None`.
        segmenter: a `segmentation.Segmenter` (or any object with `split(text)`), to reuse one
            across calls. Defaults to `None`: one for `language`.

    Returns:
        `TextPlan`.
    """
    texts = [_text(text, index) for index, text in enumerate(texts)]
    if prefixes is not None and len(prefixes) != len(texts):
        raise ValueError(
            "`prefixes` must hold one prefix per text (None or '' for none). Received: "
            f"{len(prefixes)} prefixes for {len(texts)} texts"
        )
    if not segment:
        segmenter = _WholeLines(language)
    count = None
    if segment and max_pieces is not None and count_tokens is not None:
        # One engine call counts the sentences that may need cutting; `split_long` counts the
        # few parts it tries. A sentence has at most as many word pieces as its UTF-8 bytes
        # plus its words plus one (a piece holds a byte at least, SentencePiece's byte
        # fallback included, or is a word's marker alone): the short ones, most of a
        # server's, are never counted.
        shortest = int(max_pieces * CLAUSE_SHARE)
        first = [segment_text(text, language, segmenter=segmenter) for text in texts]
        sentences = sorted(
            {
                sentence
                for plan in first
                for sentence in plan.sentences
                if _most_pieces(sentence) > shortest
            }
        )
        counts = dict(zip(sentences, count_tokens(sentences) if sentences else [], strict=True))

        def count(text):
            if _most_pieces(text) <= shortest:
                return _most_pieces(text)  # An upper bound: it fits every limit.
            if text not in counts:
                counts[text] = count_tokens([text])[0]
            return counts[text]

    segmented = [
        segment_text(
            text,
            language,
            max_tokens=max_pieces if count is not None else None,
            count_tokens=count,
            segmenter=segmenter,
        )
        for text in texts
    ]
    limit = int(max_pieces * CLAUSE_SHARE) if count is not None else None
    sentences, owners, flat_prefixes, clauses, piece = [], [], [], [], 0
    for owner, plan in enumerate(segmented):
        prefix = None if prefixes is None else prefixes[owner]
        for number, sentence in enumerate(plan.sentences):
            parts = [sentence]
            if limit and count(sentence) > limit:
                parts = _clause_parts(sentence, limit, count)
                if len(parts) > 1:
                    clauses.append((piece, parts))
            sentences += parts
            owners += [owner] * len(parts)
            first = (prefix or "") if number == 0 else ""
            flat_prefixes += [first] + [""] * (len(parts) - 1)
            piece += 1
    return TextPlan(
        sentences,
        flat_prefixes if prefixes is not None else None,
        segmented,
        owners,
        segment,
        clauses,
    )


def _most_pieces(text):
    """An upper bound of the word pieces of `text` under any tokenizer of the package."""
    return len(text.encode("utf-8")) + len(text.split()) + 1


def _clause_parts(sentence, limit, count):
    """`sentence` cut after its clause punctuation into the fewest pieces of at most `limit`
    word pieces the punctuation allows (a clause longer than `limit` stays whole; the
    model reads it, up to its maximum)."""
    bounds = [match.end() for match in _CLAUSE_END.finditer(sentence)] + [len(sentence)]
    pieces, start = [], 0
    while start < len(sentence):
        candidates = [bound for bound in bounds if bound > start]
        end = candidates[0]
        for bound in candidates:
            if count(sentence[start:bound].strip()) > limit:
                break
            end = bound
        pieces.append(sentence[start:end].strip())
        start = end
        while start < len(sentence) and sentence[start].isspace():
            start += 1
    return [piece for piece in pieces if piece]


def plan_for(engine, texts, language=None, *, segment=True, prefixes=None):
    """`plan_texts` for an engine (`keras_transformer.translation.Engine`): its
    `max_source_pieces` and `count_tokens` bound the pieces."""
    return plan_texts(
        texts,
        language,
        segment=segment,
        max_pieces=engine.max_source_pieces,
        count_tokens=engine.count_tokens,
        prefixes=prefixes,
    )


def translate_texts(engine, texts, options=None, *, language=None, segment=True, prefixes=None):
    """Translates whole texts with an engine (`keras_transformer.translation.Engine`).

    Args:
        engine: an engine (`keras_transformer.engines.load_translator`'s).
        texts: a str, or a list of them.
        options: `SearchOptions` or `None`.
        language: str or `None`. The source language, for segmentation.
        segment: bool. Cut lines into sentences. Defaults to `True`.
        prefixes: as `plan_texts`'s (a str for a single text).

    Returns:
        A whole-text `Translation` per text (a list of `num_hypotheses` of them with
        `options.num_hypotheses`); one for a str.
    """
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    if single and prefixes is not None:
        prefixes = [prefixes]
    plan = plan_for(engine, texts, language, segment=segment, prefixes=prefixes)
    num_hypotheses = options.num_hypotheses if options is not None else None

    def translate(sentences, sentence_prefixes):
        return engine.run(sentences, options, sentence_prefixes)

    results = run_plan(plan, translate)
    translations = plan.assemble(results, num_hypotheses)
    return translations[0] if single else translations


def rounds(plan, depth=0):
    """The engine calls a plan takes, as a generator: it yields `(sentences, prefixes)`, is
    sent their results, and returns the plan's results (its sentences, then the pieces an
    engine truncated cut and sent again: `TextPlan.retry`, at most `MAX_RETRIES` deep). One
    driver calls an engine (`run_plan`), the server's awaits its batcher."""
    results = (yield plan.sentences, plan.prefixes) if plan.sentences else []
    if depth >= MAX_RETRIES:
        return results
    again = plan.retry(results)
    if again is None:
        return results
    parts, split = again
    found = yield from rounds(parts, depth + 1)
    return plan.merge(results, split, found)


def run_plan(plan, translate):
    """The results of `plan`'s sentences by `translate(sentences, prefixes)` (`rounds`)."""
    calls = rounds(plan)
    try:
        call = next(calls)
        while True:
            call = calls.send(translate(*call))
    except StopIteration as done:
        return done.value


def _joined_pieces(results, parts, original):
    """One result of a piece from its parts' results (each a `Translation` or a list of
    hypotheses): texts joined with a space, scores added, word alignments shifted."""
    ranks = max(len(part) if isinstance(part, list) else 1 for part in results)
    offsets, words = [], 0
    for part in parts:
        offsets.append(words)
        words += len(part.split())
    hypotheses = []
    for rank in range(ranks):
        chosen = [
            (part[min(rank, len(part) - 1)] if isinstance(part, list) else part) for part in results
        ]
        text = " ".join(piece.text.strip() for piece in chosen if piece.text.strip())
        hypotheses.append(_combine(chosen, text, offsets))
    return hypotheses if isinstance(original, list) else hypotheses[0]


def _whole_text(segmented, pieces):
    """A text's `Translation` from one `Translation` per piece (`Segmented.join` layout)."""
    text = segmented.join([piece.text for piece in pieces])
    return _combine(pieces, text, segmented.word_offsets())


def _combine(pieces, text, source_offsets):
    """A `Translation` of consecutive pieces: `text`, summed scores, truncated if any is,
    word alignments shifted to whole-text words (`source_offsets`: each piece's first
    source word; the target words are counted from the pieces' texts)."""
    links, target_offset, aligned = [], 0, True
    for piece, source_offset in zip(pieces, source_offsets, strict=True):
        if piece.word_alignments is None:
            aligned = False
        else:
            links += [
                (source + source_offset, target + target_offset)
                for source, target in piece.word_alignments
            ]
        target_offset += len(piece.text.split())
    return Translation(
        text=text,
        score=float(sum(piece.score for piece in pieces)),
        tokens=None,
        truncated=any(piece.truncated for piece in pieces),
        source_tokens=None,
        target_tokens=None,
        word_alignments=sorted(set(links)) if aligned and pieces else None,
    )


def _text(text, index):
    if isinstance(text, bytes):
        return text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise ValueError(
            f"Texts must be str (or UTF-8 bytes). Received: texts[{index}]={text!r:.80}"
        )
    return text
