"""The translation contract every engine shares (the Keras `Translator`, the SavedModel and
CTranslate2 engines): the `Engine` protocol and its `SearchOptions` and `Capabilities`, the
translation loop on the way in and out (batching across buckets, n-best lists), and the
`Translation` each engine returns. An engine brings only its search.

Callers (the command line, `keras-transformer serve`, training's samples, the whole-text
layer of `keras_transformer.documents`) talk to any engine through the protocol alone:
`engine.run(sentences, options, prefixes)`, `engine.check(options)`,
`engine.capabilities`, `engine.warmup_requests(max_batch)`, `engine.concurrency` and
`engine.expect(count)`; they never ask an engine what class it is.
"""

import dataclasses
import typing
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from keras_transformer._checks import (
    check_alpha,
    check_int,
    check_positive_int,
    physical_memory_bytes,
)
from keras_transformer.buckets import bucket_batches, bucket_length, padded_batch_size
from keras_transformer.decoding import Sampling, check_sampling
from keras_transformer.text.preprocessor import as_byte_strings


@dataclasses.dataclass
class Translation:
    """One translation (or one hypothesis of an n-best list) with its details, as returned by
    `Translator.translate` and the engines of `keras_transformer.engines` (whose
    `SavedModelTranslator` returns strings only: its `tokens`, `source_tokens` and
    `target_tokens` are `None`).

    Attributes:
        text: str. The translation (`""` for an input without any token).
        score: float. Beam search: log probability divided by the length penalty; greedy
            search (`beam_size=1`): sum of the log probabilities. `0.0` for an empty input.
        tokens: list of int. The generated ids, the end token included when generated.
        truncated: bool. The input was longer than `max_source_length` and was truncated.
        source_tokens: list of str. The encoder input tokens, `[START]` and `[END]` included.
        target_tokens: list of str. The generated tokens (`tokens` as strings).
        attention: float32 NumPy array `(num_decoder_layers, num_heads, len(target_tokens),
            len(source_tokens))`, the cross-attention probabilities with which each target
            token was produced, or `None` unless asked for.
        alignments: list of `(source_index, target_index)` pairs of word pieces (indices into
            `source_tokens` without `[START]`/`[END]`, and into `target_tokens` without the
            end token): each target piece linked to the source piece it attends to most
            (`align`), or `None` unless asked for.
        word_alignments: the same links between words (whitespace-separated words of the
            source and of the translation, counted from 0), sorted, without repeats, or
            `None`.
    """

    text: str
    score: float
    tokens: list
    truncated: bool
    source_tokens: list
    target_tokens: list
    attention: object = None
    alignments: list = None
    word_alignments: list = None


@dataclasses.dataclass
class Scoring:
    """The log probability of a given translation of a source (`score` of any engine).

    Attributes:
        score: float. `log p(translation | source)`: the sum of `token_scores`.
        token_scores: list of float. The log probability of each target piece, then of the
            end token (teacher forcing).
        target_tokens: list of str. The scored pieces, the end token last.
        truncated: bool. The source was longer than `max_source_length` and was truncated.
    """

    score: float
    token_scores: list
    target_tokens: list
    truncated: bool


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """The search a call asks of an engine (`Engine.run`); the server batches together the
    requests whose options are equal.

    Attributes:
        beam_size: int or `None` (the engine's).
        num_hypotheses: int or `None` (the best only; an int: a list of that many per
            sentence, best first).
        sampling_topk, sampling_topp, sampling_temperature: sampling (any set: sampling on).
        seed: int. The sampling seed.
        prefixed: bool. The call gives target prefixes.
        alpha: float or `None` (the engine's length penalty).
        alignments: bool. Fill `Translation.alignments` and `word_alignments`.
    """

    beam_size: int = None
    num_hypotheses: int = None
    sampling_topk: int = None
    sampling_topp: float = None
    sampling_temperature: float = None
    seed: int = 0
    prefixed: bool = False
    alpha: float = None
    alignments: bool = False

    @property
    def sampling(self):
        return any(
            value is not None
            for value in (self.sampling_topk, self.sampling_topp, self.sampling_temperature)
        )

    def arguments(self):
        """The keyword arguments of `engine.translate` for these options (unset ones left out,
        so an engine without sampling, a fixed length penalty or alignments is called without
        those arguments)."""
        names = ("beam_size", "num_hypotheses", "sampling_topk", "sampling_topp")
        arguments = {name: getattr(self, name) for name in names}
        arguments["sampling_temperature"] = self.sampling_temperature
        arguments["alpha"] = self.alpha
        arguments = {name: value for name, value in arguments.items() if value is not None}
        if self.sampling:
            arguments["seed"] = self.seed
        if self.alignments:
            arguments["alignments"] = True
        return arguments


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can search (`Engine.capabilities`), declared instead of probed.

    Attributes:
        fixed_beam_size: int or `None`. The only beam size the engine runs (a SavedModel's,
            fixed at export), or `None` for any.
        max_hypotheses: int or `None`. Most hypotheses per sentence (a SavedModel's n-best
            columns; `0`: no n-best lists), or `None` for up to the beam size.
        sampling: bool. Runs sampling.
        prefixes: bool. Continues target prefixes.
        alignments: bool. Returns word alignments (and tokens).
        scoring: bool. Has `score(sources, translations)`.
        compiles_shapes: bool. Compiles one search per shape (bucket, batch size): the
            warm-up pays before the first request does.
    """

    fixed_beam_size: int = None
    max_hypotheses: int = None
    sampling: bool = True
    prefixes: bool = True
    alignments: bool = True
    scoring: bool = True
    compiles_shapes: bool = False


@dataclasses.dataclass(frozen=True)
class WarmupRequest:
    """One warm-up call (`Engine.warmup_requests`): `engine.run(sentences, options,
    prefixes)`.

    Attributes:
        sentences: list of `str` or `bytes`.
        options: `SearchOptions`.
        prefixes: list (one per sentence) or `None`.
    """

    sentences: list
    options: SearchOptions = SearchOptions()
    prefixes: list = None


@typing.runtime_checkable
class Engine(typing.Protocol):
    """What every translation engine offers (the Keras `Translator`,
    `keras_transformer.engines.SavedModelTranslator` and `CTranslate2Translator`).

    Attributes:
        capabilities: `Capabilities`.
        beam_size: int or `None`. The default beam size.
        alpha: float or `None`. The default length penalty.
        max_source_length: int or `None`. Longest encoder input, `[START]`/`[END]`
            included; longer sources are truncated (flagged in `Translation.truncated`).
        max_source_pieces: int or `None`. The most source word pieces translated whole.
        concurrency: int. Calls worth running at once (a server's worker threads).
    """

    capabilities: Capabilities
    beam_size: int
    alpha: float
    max_source_length: int
    max_source_pieces: int

    @property
    def concurrency(self): ...

    def translate(self, sentences, **search): ...

    def run(self, sentences, options=None, prefixes=None):
        """`translate` with `SearchOptions`: a `Translation` per sentence (a list of them
        with `options.num_hypotheses`)."""

    def check(self, options):
        """Raises a `ValueError` naming the option unless the engine can run that search."""

    def warmup_requests(self, max_batch):
        """The `WarmupRequest`s that compile what a first request would (batches of at most
        `max_batch` sentences); `[]` when nothing is compiled or loaded lazily."""

    def expect(self, count):
        """A hint: the next calls translate about `count` sentences in all (an engine may
        choose how to compile for it)."""

    def count_tokens(self, texts):
        """The number of source word pieces of each of `texts` (a list of `str`), or `None`
        where the engine has no tokenizer in Python (a SavedModel)."""


class EngineBase:
    """The protocol methods an engine with a keyword `translate` gets for free: `run` calls
    `translate` with the options' arguments, `check` checks the options against the
    declared `capabilities` (an engine adds its own bounds), `expect` does nothing and
    `concurrency` is 1."""

    concurrency = 1

    def run(self, sentences, options=None, prefixes=None):
        arguments = (options or SearchOptions()).arguments()
        if prefixes is not None:
            arguments["target_prefix"] = prefixes
        return self.translate(sentences, **arguments)

    def check(self, options):
        check_capabilities(self.capabilities, options, self.beam_size, self.alpha)

    def expect(self, count):
        del count

    def warmup_requests(self, max_batch):
        del max_batch
        return []

    def count_tokens(self, texts):
        del texts
        return None


def check_capabilities(capabilities, options, default_beam_size, default_alpha):
    """Raises a `ValueError` naming the option unless `options` (`SearchOptions`) are valid
    values that `capabilities` can run (with the engine's default beam size and alpha)."""
    sampling = sampling_options(
        options.sampling_topk, options.sampling_topp, options.sampling_temperature
    )
    beam_size = search_beam_size(options.beam_size, default_beam_size, sampling)
    alpha = default_alpha if options.alpha is None else options.alpha
    check_search_options(beam_size, alpha, options.num_hypotheses, sampling, options.seed)
    refused = [
        name
        for name, asked, able in (
            ("sampling", sampling is not None, capabilities.sampling),
            ("target_prefix", options.prefixed, capabilities.prefixes),
            ("alignments", options.alignments, capabilities.alignments),
        )
        if asked and not able
    ]
    if refused:
        raise ValueError(
            "This engine cannot run that search: it has no "
            + ", ".join(refused)
            + ". Received: "
            + ", ".join(f"{name} asked" for name in refused)
        )
    fixed = capabilities.fixed_beam_size
    if fixed is not None and options.beam_size is not None and options.beam_size != fixed:
        raise ValueError(
            f"This engine searches with the beam size {fixed} only. "
            f"Received: beam_size={options.beam_size}"
        )
    most = capabilities.max_hypotheses
    if most is not None and options.num_hypotheses is not None and options.num_hypotheses > most:
        raise ValueError(
            f"This engine returns at most {most} hypotheses per sentence. "
            f"Received: num_hypotheses={options.num_hypotheses}"
        )


def sampling_options(sampling_topk=None, sampling_topp=None, sampling_temperature=None):
    """The `decoding.Sampling` of a call's sampling arguments (checked), or `None` when none
    is given: sampling is on as soon as one is (`sampling_topk=None`/`0` samples from the
    whole vocabulary, `1` is greedy search)."""
    if sampling_topk is None and sampling_topp is None and sampling_temperature is None:
        return None
    return check_sampling(
        Sampling(
            0 if sampling_topk is None else sampling_topk,
            1.0 if sampling_topp is None else sampling_topp,
            1.0 if sampling_temperature is None else sampling_temperature,
        )
    )


def search_beam_size(beam_size, default, sampling=None):
    """The beam size of a `translate` call (every engine, and the command line): `beam_size`
    when given, else `1` when it samples (sampling draws one token at a time), else the
    engine's `default`."""
    if beam_size is not None:
        return beam_size
    return 1 if sampling is not None else default


def check_search_options(beam_size, alpha, num_hypotheses, sampling=None, seed=0):
    """Checks the search options of a `translate` call (any engine)."""
    check_positive_int("beam_size", beam_size)
    check_alpha(alpha)
    if sampling is not None:
        if beam_size != 1:
            raise ValueError(
                "Sampling (`sampling_topk`, `sampling_topp`, `sampling_temperature`) draws one "
                "token at a time: it runs with beam_size=1 (the default when sampling). "
                f"Received: beam_size={beam_size}"
            )
        check_int("seed", seed, minimum=0)
        if seed >= 2**31:
            raise ValueError(f"`seed` must be below 2**31. Received: seed={seed}")
    if num_hypotheses is not None and (
        isinstance(num_hypotheses, bool)
        or not isinstance(num_hypotheses, int)
        or not 1 <= num_hypotheses <= beam_size
    ):
        raise ValueError(
            f"`num_hypotheses` must be an int from 1 to the beam size ({beam_size}). "
            f"Received: num_hypotheses={num_hypotheses!r}"
        )


# Beam search stops a sentence once `beam_size * PATIENCE` hypotheses have ended
# (`decoding.beam_search`'s `patience`; CTranslate2's rule and option), in every engine: the
# Keras `Translator` and CTranslate2 then give the same outputs (1,000 of 1,000 Bible test
# verses; with 1, 14 % differed). Against the exact stop (`patience=None`), 2 took half the CPU
# on those verses at the same BLEU (30.17 against 30.18). n-best lists search with the same
# patience: they are read from the same compiled searches (a server's warm-up covers them).
PATIENCE = 2
# Kept for code written against 0.4 (n-best lists searched with 4 there): the same as
# `PATIENCE` now.
N_BEST_PATIENCE = PATIENCE


# The settings that size a decoding batch (`check_decoding_memory`).
DECODING_SIZES = ("beam_size", "max_source_length", "extra_length", "batch_size")


def check_decoding_memory(sizes, num_decoder_layers, d_model, target_vocabulary_size):
    """Refuses batch, beam and length settings whose decoding state (a batch of the longest
    inputs: cached keys and values, sequences and logits) cannot fit in this machine's memory.

    Every engine checks a search's settings here before it runs (a `beam_size` of a billion
    used to reach the search: an XLA overflow or a 173 GiB allocation).

    Args:
        sizes: dict with the int `DECODING_SIZES`: `beam_size`, `max_source_length`,
            `extra_length`, `batch_size`.
        num_decoder_layers: int. `0` where unknown (the bound then counts the ids and
            logits only).
        d_model: int. Likewise.
        target_vocabulary_size: int.

    Raises:
        ValueError: a size is not a positive int, or the state needs more bytes than the
            machine has (the message gives both and the settings).
    """
    for name in DECODING_SIZES:
        check_positive_int(name, sizes[name])
    rows = padded_batch_size(sizes["batch_size"]) * sizes["beam_size"]
    length = sizes["max_source_length"] + sizes["extra_length"]
    # Per row: self-attention and cross-attention keys and values of every decoder layer,
    # the generated ids and one step's logits, all 4 bytes wide.
    per_row = 4 * num_decoder_layers * d_model * length + length + target_vocabulary_size
    needed = 4 * rows * per_row
    available = physical_memory_bytes()
    if needed > available:
        received = ", ".join(f"{name}={sizes[name]}" for name in DECODING_SIZES)
        raise ValueError(
            f"Decoding a batch with these settings needs about {needed} bytes, more than this "
            f"machine's {available} bytes of memory. Received: {received}"
        )


def run_translation(
    preprocessor,
    sentences,
    search,
    batch_size,
    extra_length,
    num_hypotheses,
    attention=None,
    workers=1,
    target_prefix=None,
    alignments=False,
    plan_shapes=None,
):
    """The steps every translation engine shares, around its own search.

    Sentences go through `preprocessor.generate_preprocess` (the translation contract); the
    non-empty ones are cut, in length order, into batches of `batch_size`, each padded to the
    bucket of its longest source (`keras_transformer.buckets.bucket_batches`: one batch
    shape per bucket, and one more at most) and handed to `search`, `workers`
    batches at a time; the hypotheses are detokenized with
    `preprocessor.generate_postprocess`. An empty sentence translates to `""` with score `0.0`
    without any search.

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        sentences: a `str` (or `bytes`), or a list / NumPy array of them.
        search: callable `(source_ids, bucket, max_lengths, prefixes, batch_number) ->
            hypotheses`: `source_ids` a list of lists of int (`[START] pieces [END]`,
            unpadded), `bucket` their padded length, `max_lengths` the most tokens of each
            one's translation (the bucket of that source alone + `extra_length` + the length
            of its prefix: the same whatever it is batched with), `prefixes` `None` or a list
            of lists of int (each source's target prefix pieces, maybe empty), `batch_number`
            an int that tells the batches of a call apart (sampling seeds); for each source, a
            list of `(tokens, score)` or `(tokens, score, attention)` (`attention` the `(target
            tokens, source tokens)` alignment probabilities, for `alignments`), best first,
            `tokens` trimmed after the end token and starting with the prefix.
        batch_size: int. Most sources per `search` call.
        extra_length: int. A translation has at most its source's bucket length +
            `extra_length` tokens.
        num_hypotheses: int or `None`, as in `Translator.translate`.
        attention: callable `(list of source_ids, list of tokens) -> list of arrays` (one
            call for every hypothesis: it batches them), to fill `Translation.attention`.
            Defaults to `None`.
        workers: int. Batches searched at once, each by its own thread (`search` must then be
            thread-safe). The results do not depend on it. Defaults to `1`.
        target_prefix: `None`, or one `str` (`bytes`) per sentence (a single one for a single
            sentence; `None` or `""` for none): each translation starts with the word pieces
            of its prefix and continues from there. A sentence without any token still
            translates to `""`. Defaults to `None`.
        alignments: bool. Fill `Translation.alignments` and `word_alignments` (`align`), from
            the hypotheses' attention (`search`'s third element, else `attention`'s last
            layer averaged over heads). Defaults to `False`.
        plan_shapes: callable `(buckets) -> {bucket: length}`, given the bucket of each of
            the call's batches: the padded length each is searched at, at least its bucket (a
            compiled engine searches several buckets at one length to compile fewer shapes;
            each translation still has its own `max_lengths`, so the output is the same).
            Defaults to `None`: each batch at its bucket.

    Returns:
        As `Translator.translate`.
    """
    single = isinstance(sentences, (str, bytes))
    strings = as_byte_strings([sentences] if single else sentences)
    if not strings:
        return []
    blank = [preprocessor.is_blank(string) for string in strings]
    if attention is None and target_prefix is None and any(blank):
        # An empty or whitespace line has no token: `""` without the preprocessor (a
        # TensorFlow call per request: 100,000 empty lines took minutes) or a search.
        rest = [string for string, no_token in zip(strings, blank, strict=True) if not no_token]
        options = (search, batch_size, extra_length, num_hypotheses, None, workers)
        found = iter(
            run_translation(preprocessor, rest, *options, plan_shapes=plan_shapes) if rest else []
        )
        results = []
        for no_token in blank:
            if not no_token:
                results.append(next(found))
                continue
            empty = _empty_translation(preprocessor)
            results.append([empty] if num_hypotheses is not None else empty)
        return results[0] if single else results
    prefixes = _prefix_ids(preprocessor, target_prefix, single, len(strings))
    source_ids, truncated, empty = preprocessor.encode_for_search(strings)
    lengths = {index: len(ids) for index, ids in enumerate(source_ids) if not empty[index]}
    found = {}  # index -> [(tokens, score[, attention])], best first

    def run(numbered):
        batch_number, (bucket, indices) = numbered
        max_lengths = [
            bucket_length(lengths[index], preprocessor.bucket_boundaries)
            + extra_length
            + (len(prefixes[index]) if prefixes else 0)
            for index in indices
        ]
        return indices, search(
            [source_ids[index] for index in indices],
            bucket,
            max_lengths,
            [prefixes[index] for index in indices] if prefixes else None,
            batch_number,
        )

    batches = bucket_batches(lengths, preprocessor.bucket_boundaries, batch_size)
    if plan_shapes is not None:
        lengths_of = plan_shapes([bucket for bucket, _ in batches])
        batches = [(lengths_of[bucket], indices) for bucket, indices in batches]
    # Numbered in a fixed order (their first sentence), whatever order they run in.
    numbers = {
        tuple(indices): number
        for number, (_, indices) in enumerate(sorted(batches, key=lambda batch: min(batch[1])))
    }
    batches = [(numbers[tuple(batch[1])], batch) for batch in _search_order(batches)]
    for indices, hypotheses in _map(run, batches, workers):
        for index, options in zip(indices, hypotheses, strict=True):
            found[index] = options[: num_hypotheses or 1]
    texts = _detokenize(
        preprocessor, [option[0] for index in sorted(found) for option in found[index]]
    )
    targets, results = preprocessor.targets, []
    weights_of = {}  # (index, rank) -> the hypothesis' attention, all found in one call
    if attention:
        keys = [(index, rank) for index in sorted(found) for rank in range(len(found[index]))]
        computed = attention(
            [source_ids[index] for index, _ in keys],
            [found[index][rank][0] for index, rank in keys],
        )
        weights_of = dict(zip(keys, computed, strict=True))
    for index, ids in enumerate(source_ids):
        source_tokens = [preprocessor.tokenizer.id_to_token(i) for i in ids]
        hypotheses = []
        for rank, (tokens, score, *matrix) in enumerate(found.get(index, [([], 0.0)])):
            target_tokens = [targets.id_to_token(i) for i in tokens]
            weights = weights_of.get((index, rank))
            translation = Translation(
                text=next(texts) if index in found else "",
                score=float(score),
                tokens=tokens,
                truncated=bool(truncated[index]),
                source_tokens=list(source_tokens),
                target_tokens=target_tokens,
                attention=weights,
            )
            if alignments:
                if matrix:
                    matrix = np.asarray(matrix[0], "float32")
                elif weights is not None:
                    matrix = weights[-1].mean(axis=0)  # last layer, heads averaged
                else:
                    matrix = np.zeros((len(tokens), len(ids)), "float32")
                pieces = target_tokens
                if tokens and tokens[-1] == targets.end_id:
                    pieces = target_tokens[:-1]
                translation.alignments, translation.word_alignments = align(
                    matrix, source_tokens[1:-1], pieces
                )
            hypotheses.append(translation)
        results.append(hypotheses if num_hypotheses is not None else hypotheses[0])
    return results[0] if single else results


def _empty_translation(preprocessor):
    """The translation of an empty sentence, as the preprocessor and a search would give it:
    `""`, score `0.0`, source tokens `[START] [END]`."""
    tokenizer = preprocessor.tokenizer
    source_tokens = [
        tokenizer.id_to_token(tokenizer.start_id),
        tokenizer.id_to_token(tokenizer.end_id),
    ]
    return Translation("", 0.0, [], False, source_tokens, [], None)


def align(attention, source_pieces, target_pieces):
    """Word-piece and word alignments from attention probabilities.

    Each target piece is linked to the source piece it attends to most (argmax, the source's
    `[START]` and `[END]` left out): the usual "hard" alignment read from a Transformer's
    cross-attention (Garg et al., 2019 use the average of one layer's heads; every engine
    here gives the last decoder layer's cross-attention averaged over its heads). Pieces
    are grouped into words: a WordPiece piece starting with `##` continues its word; when the
    pieces carry SentencePiece's word marker `▁`, a piece without it continues its word.

    Args:
        attention: float array `(target tokens, source tokens)`: rows for the target pieces
            (and maybe the end token, ignored), columns for `[START] source pieces [END]`.
        source_pieces: list of str, the source pieces (without `[START]`/`[END]`).
        target_pieces: list of str, the target pieces (without the end token).

    Returns:
        `(piece_pairs, word_pairs)`: lists of `(source_index, target_index)`; piece pairs in
        target order, word pairs sorted without repeats.

    Example:

    >>> align([[0.1, 0.1, 0.7, 0.1], [0.1, 0.6, 0.2, 0.1]], ["▁a", "▁b"], ["▁x", "▁y"])
    ([(1, 0), (0, 1)], [(0, 1), (1, 0)])
    """
    attention = np.asarray(attention, "float32")
    if not source_pieces or not target_pieces:
        return [], []
    inner = attention[: len(target_pieces), 1 : 1 + len(source_pieces)]
    links = [(int(np.argmax(row)), target) for target, row in enumerate(inner)]
    source_words, target_words = _word_indices(source_pieces), _word_indices(target_pieces)
    words = sorted({(source_words[source], target_words[target]) for source, target in links})
    return links, words


def _word_indices(pieces):
    """The word of each piece, counted from 0."""
    marked = any(piece.startswith("\u2581") for piece in pieces)
    words, word = [], -1
    for position, piece in enumerate(pieces):
        continues = piece.startswith("##") or (marked and not piece.startswith("\u2581"))
        if position == 0 or not continues:
            word += 1
        words.append(max(word, 0))
    return words


def run_scoring(preprocessor, sources, translations, score_batch, batch_size):
    """The steps every engine shares to score given translations (`score`).

    Sources go through the translation contract (`generate_preprocess`: `[START] pieces
    [END]`, truncated to `max_source_length`, flagged); translations are the target pieces
    (not truncated), scored with the end token. Batches of `batch_size` pairs, cut in source
    length order, go to `score_batch`, the longest first.

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        sources: a `str` (`bytes`), or a list of them.
        translations: as many translations, one per source.
        score_batch: callable `(source_ids, target_ids) -> token scores`: lists of lists of
            int (the sources with `[START]`/`[END]`, the target pieces without them); for each
            pair, the log probability of each target piece and then of the end token.
        batch_size: int.

    Returns:
        A `Scoring` for one pair, a list of them for lists.
    """
    single = isinstance(sources, (str, bytes))
    sources = as_byte_strings([sources] if single else sources)
    translations = as_byte_strings([translations] if single else translations)
    if len(sources) != len(translations):
        raise ValueError(
            "`translations` must hold one translation per source. Received: "
            f"{len(sources)} sources and {len(translations)} translations"
        )
    if not sources:
        return []
    source_ids, truncated, _ = preprocessor.encode_for_search(sources)
    targets = preprocessor.targets
    target_ids = targets.tokenize(translations).to_list()
    order = sorted(range(len(sources)), key=lambda index: (len(source_ids[index]), index))
    scores = {}
    # The longest batch first: a compiled engine can pad shorter ones to its shape.
    for start in reversed(range(0, len(order), batch_size)):
        indices = order[start : start + batch_size]
        found = score_batch([source_ids[i] for i in indices], [target_ids[i] for i in indices])
        scores.update(zip(indices, found, strict=True))
    end_token = targets.id_to_token(targets.end_id)
    results = [
        Scoring(
            score=float(np.sum(np.asarray(scores[index], "float64"))),
            token_scores=[float(value) for value in scores[index]],
            target_tokens=[targets.id_to_token(i) for i in target_ids[index]] + [end_token],
            truncated=bool(truncated[index]),
        )
        for index in range(len(sources))
    ]
    return results[0] if single else results


def _prefix_ids(preprocessor, target_prefix, single, count):
    """Each sentence's target prefix as word-piece ids (`[]` for none), or `None`."""
    if target_prefix is None:
        return None
    prefixes = [target_prefix] if single else list(target_prefix)
    if single and not isinstance(target_prefix, (str, bytes)):
        raise ValueError(
            "`target_prefix` of a single sentence must be a str. "
            f"Received: target_prefix={target_prefix!r}"
        )
    if len(prefixes) != count:
        raise ValueError(
            "`target_prefix` must hold one prefix per sentence (None or '' for none). "
            f"Received: {count} sentences and {len(prefixes)} prefixes"
        )
    strings = as_byte_strings([b"" if prefix is None else prefix for prefix in prefixes])
    ids = preprocessor.targets.tokenize(strings).to_list()
    longest = max(preprocessor.bucket_boundaries)
    for index, pieces in enumerate(ids):
        if len(pieces) > longest:
            raise ValueError(
                f"A target prefix may have at most {longest} word pieces (the longest "
                f"bucket). Received: target_prefix[{index}] with {len(pieces)}"
            )
    return [[int(piece) for piece in pieces] for pieces in ids]


def warmup_plan(preprocessor, max_batch_size):
    """The calls that compile every search shape of a compiled engine, before a request does.

    Each source bucket × each power-of-two batch size up to `max_batch_size` gets a default
    search. Then one n-best call (1 row, shortest bucket): it runs the searches the default
    one compiles, but the first call of a SavedModel signature also pays a one-time setup of
    its graph, which this call absorbs. The sentences repeat one vocabulary word that is a
    single word piece, so that each call's longest row lands in its bucket (checked with the
    preprocessor itself). Target-prefix searches compile searches of their own (the prefix
    forced): the same calls again, each sentence with a one-piece target prefix (a prefix no
    longer than its source keeps the source's bucket).

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        max_batch_size: int. The largest batch covered, rounded up to a power of two.

    Returns:
        A list of `(kind, sentences, prefixes)`: `kind` `"default"` or `"n_best"`,
        `sentences` a list of `bytes`, `prefixes` `None` or one `bytes` per sentence; for each
        bucket (shortest first), batches of 1, 2, 4, ..., `padded_batch_size(max_batch_size)`
        copies of one sentence in that bucket; then the n-best call; then the prefixed calls.
    """
    sentences = _bucket_sentences(preprocessor)
    batch_sizes, size = [], 1
    while size <= padded_batch_size(max_batch_size):
        batch_sizes.append(size)
        size *= 2
    shapes = [(bucket, rows) for bucket in preprocessor.bucket_boundaries for rows in batch_sizes]
    calls = [("default", [sentences[bucket]] * rows, None) for bucket, rows in shapes]
    calls.append(("n_best", [sentences[preprocessor.bucket_boundaries[0]]], None))
    prefix = _one_piece_word(preprocessor.targets)
    calls += [("default", [sentences[bucket]] * rows, [prefix] * rows) for bucket, rows in shapes]
    return calls


def warmup_requests(preprocessor, max_batch_size):
    """`warmup_plan` as `WarmupRequest`s (an engine's `warmup_requests`)."""
    return [
        WarmupRequest(
            sentences, SearchOptions(num_hypotheses=1 if kind == "n_best" else None), prefixes
        )
        for kind, sentences, prefixes in warmup_plan(preprocessor, max_batch_size)
    ]


def _one_piece_word(tokenizer):
    """A word of `tokenizer`'s vocabulary that it encodes as one word piece (`bytes`)."""
    for word in _words(tokenizer)[:200]:
        if len(tokenizer.tokenize([word]).to_list()[0]) == 1:
            return word.encode("utf-8")
    raise ValueError(
        "Cannot write the warm-up requests: no word of the target vocabulary is a single word "
        f"piece. Received: vocabulary_size={tokenizer.vocabulary_size()}"
    )


def _words(tokenizer):
    """The alphabetic tokens of `tokenizer`'s vocabulary, special tokens excepted, as words
    (SentencePiece marks a word's first piece with "▁", U+2581: "▁casa" is the word "casa")."""
    special = {tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id}
    return [
        token.removeprefix("\u2581")
        for index, token in enumerate(tokenizer.get_vocabulary())
        if index not in special and token.removeprefix("\u2581").isalpha()
    ]


def _bucket_sentences(preprocessor):
    """`{bucket: sentence}`: a sentence whose encoding fills each bucket (its longest fit)."""
    tokenizer = preprocessor.tokenizer
    words = _words(tokenizer)
    boundaries = preprocessor.bucket_boundaries
    added = 2 if preprocessor.source_start_token else 1  # [START] (if any) and [END]
    for word in words[:200]:
        # `[START] word × (bucket - 2) [END]` fills a bucket when the word is one piece.
        sentences = [" ".join([word] * (bucket - added)) for bucket in boundaries]
        encoded, _ = preprocessor.encode_source(sentences)
        lengths = encoded.row_lengths().numpy().tolist()
        if lengths == list(boundaries):
            return dict(zip(boundaries, [sentence.encode("utf-8") for sentence in sentences]))
    raise ValueError(
        "Cannot write the warm-up requests: no word of the source vocabulary is a single word "
        f"piece. Received: vocabulary_size={tokenizer.vocabulary_size()}"
    )


def _search_order(batches):
    """`batches` (`(bucket, indices)`) in the order to search them: the first batch of each
    shape, then the others, each part longest bucket first.

    A shape's first batch traces and compiles it (XLA, `jax.jit`): started early, the
    compiles overlap with searches of shapes already compiled, instead of each making the
    other worker wait on the way up the buckets; the short batches last fill the end.
    Measured on 1,000 Bible verses (TensorFlow, two workers): first call 49-59 s instead of
    61 s, the second unchanged (29 s).
    """
    seen, firsts, others = set(), [], []
    for bucket, indices in sorted(batches, key=lambda batch: -batch[0]):
        shape = (bucket, padded_batch_size(len(indices)))
        (others if shape in seen else firsts).append((bucket, indices))
        seen.add(shape)
    return firsts + others


def _map(function, items, workers):
    """`map(function, items)`, in order, run by `workers` threads when that is more than one.

    The compiled searches (XLA, `jax.jit`) release the GIL and use about one core each on a
    CPU, so two batches at once keep two cores busy."""
    if workers <= 1 or len(items) <= 1:
        return map(function, items)

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as executor:
        return list(executor.map(function, items))


def _detokenize(preprocessor, sequences):
    """An iterator over the texts of `sequences` (lists of ids), in order."""
    if not sequences:
        return iter(())
    pad_id = preprocessor.targets.pad_id
    longest = max(1, max(len(tokens) for tokens in sequences))
    rows = [tokens + [pad_id] * (longest - len(tokens)) for tokens in sequences]
    return iter(preprocessor.decode_for_search(rows))
