"""Compiled, bucketed generation with a `Transformer`: cached greedy and beam search, and an
uncached greedy reference.

One way to ask for greedy search: `beam_size=1`. `max_new_tokens` is the number of tokens to
generate (the end token included); `max_length` in this package is always the longest kept
sequence (`[START]`/`[END]` included), as in `make_dataset` and the training config.

`Generator` turns a model into a function `encoder_inputs (batch, source_length) int32 ->
(sequences, scores)` and compiles it once per input shape, in the way each backend compiles:

- TensorFlow: `tf.function(jit_compile=True)` (XLA). The variables are captured by reference,
  so later weight updates are seen without retracing.
- JAX: `jax.jit` of a pure function of the variable values and the inputs: the model runs
  inside `keras.StatelessScope(state_mapping=...)`, so the weights are arguments of the compiled
  function, never constants baked into it.
- PyTorch: eager, under `torch.no_grad()`.

A second call with the same shapes and options reuses the compiled function
(`Generator.trace_count` counts the traces: one per options and input shape). To keep the
number of shapes bounded, callers pad
source lengths to `bucket_length(length, boundaries)` and batch sizes to
`padded_batch_size(batch_size)` (see `keras_transformer.Translator`).

The paper (§6.1) sets the maximum output length to the input length + 50; here it is the
(padded) source length + `extra_length` new tokens.
"""

import functools
import threading

import keras
import numpy as np
from keras import ops

from keras_transformer import _backend
from keras_transformer._checks import check_alpha, check_int, check_positive_int

# The 0.2.0 path of the bucketing rules, kept for one release: `keras_transformer.buckets`.
from keras_transformer.buckets import bucket_length, padded_batch_size  # noqa: F401
from keras_transformer.decoding import (
    BeamCache,
    Sampling,
    beam_search,
    check_patience,
    check_sampling,
    greedy_search,
    select_rows,
)
from keras_transformer.layers.token_ids import check_token_ids


def generate(
    model,
    encoder_inputs,
    start_id,
    end_id,
    max_new_tokens,
    beam_size=4,
    alpha=0.6,
    pad_id=0,
    max_lengths=None,
    prefix=None,
    sampling=None,
    seed=None,
    patience=None,
    shrink_by=16,
    grow_cache_from=16,
):
    """Encodes `encoder_inputs` and searches for their translations (not compiled).

    The building block that `Generator` compiles. Every argument but `model` and
    `encoder_inputs` must be a Python value. The decoder keeps a key/value cache
    (`cached_next_logits`).

    Args:
        model: `keras_transformer.Transformer`.
        encoder_inputs: int32 `(batch, source_length)`, 0 = padding.
        start_id: int. Decoder start token.
        end_id: int. End token.
        max_new_tokens: int. Most tokens to generate, the end token included.
        beam_size: int. Beams; `1` runs greedy search (`decoding.greedy_search`), more
            `decoding.beam_search`. Defaults to `4`.
        alpha: float. Length penalty of beam search (unused by greedy search). Defaults to
            `0.6`.
        pad_id: int. Defaults to `0`.
        max_lengths: optional int tensor `(batch,)`: the most tokens of each row, each in
            `1 .. max_new_tokens` (see `decoding.beam_search`). Defaults to `None`:
            `max_new_tokens` for every row.
        prefix: optional int tensor `(batch, prefix_length)`: the target prefix of each row,
            `-1` after it (`decoding.greedy_search`). Defaults to `None`.
        sampling: optional `decoding.Sampling` (greedy search only). Defaults to `None`.
        seed: the seed of `sampling` (`decoding.greedy_search`). Defaults to `None`.
        patience: optional number `>= 1`: beam search stops a row once `round(patience *
            beam_size)` hypotheses have ended (`decoding.beam_search`). Defaults to `None`:
            the exact stop.
        shrink_by: int `>= 2` or `None`: the batch of a beam or greedy search (not sampling)
            shrinks as it finishes (`decoding.beam_search`). Defaults to `16`.
        grow_cache_from: optional int `>= 1`: the self-attention cache of a beam search
            first holds this many positions and doubles each time the search reaches its
            end, up to `max_new_tokens` (`cache_lengths`); a step attends over the positions
            the cache holds, so early steps read a short cache (one more compiled loop per
            doubling; results unchanged). Greedy search, and a search of one source, keep a
            cache of `max_new_tokens` positions. `None`: `max_new_tokens` positions from the
            start. Defaults to `16`.

    Returns:
        `(sequences, scores)`, best first: int32 `(batch, beam_size, max_new_tokens)` and
        float32 `(batch, beam_size)`. Beam search scores are log probabilities divided by the
        length penalty; greedy search scores (`beam_size=1`) the plain sums of the token log
        probabilities. Sequences hold no start token; they end with `end_id` followed by
        `pad_id` (unless cut at `max_new_tokens`).
    """
    # Beam search only: greedy search attends over one slot, its attention is a small part
    # of a step (Bible verses: 8 % less CPU for a first call 64 % longer on TensorFlow). And
    # not for one source: a server is ready once its one-sentence searches are compiled
    # (`serve --background-warmup`), and their three more loops doubled that wait.
    rows = ops.shape(encoder_inputs)[0]
    grows = beam_size > 1 and not (isinstance(rows, int) and rows < 2)
    lengths = cache_lengths(grow_cache_from, max_new_tokens) if grows else []
    next_logits, cache = cached_next_logits(
        model,
        encoder_inputs,
        max_new_tokens,
        beam_size=beam_size,
        cache_length=lengths[0] if lengths else None,
    )
    growth = {"cache_lengths": lengths, "grow_cache": grow_cache} if lengths else {}
    start_tokens = ops.full((rows,), start_id, dtype="int32")
    if beam_size == 1:
        sequences, scores = greedy_search(
            next_logits,
            cache,
            start_tokens,
            max_new_tokens,
            end_id,
            pad_id,
            max_lengths,
            prefix=prefix,
            sampling=sampling,
            seed=seed,
            select_sources=functools.partial(select_sources, beam_size=1),
            shrink_by=shrink_by,
            **growth,
        )
        return sequences[:, None], scores[:, None]
    if sampling is not None:
        raise ValueError(f"Sampling needs `beam_size=1`. Received: beam_size={beam_size}")
    return beam_search(
        next_logits,
        cache,
        start_tokens,
        max_new_tokens,
        end_id,
        beam_size=beam_size,
        alpha=alpha,
        pad_id=pad_id,
        max_lengths=max_lengths,
        prefix=prefix,
        patience=patience,
        select_sources=functools.partial(select_sources, beam_size=beam_size),
        shrink_by=shrink_by,
        **growth,
    )


def cache_lengths(grow_cache_from, max_new_tokens):
    """The lengths a growing cache has before `max_new_tokens` (`generate`'s
    `grow_cache_from`, doubled while below `max_new_tokens`; `[]`: no growth).

    >>> cache_lengths(16, 100), cache_lengths(16, 16), cache_lengths(None, 100)
    ([16, 32, 64], [], [])
    """
    if grow_cache_from is None:
        return []
    check_positive_int("grow_cache_from", grow_cache_from)
    lengths = []
    while grow_cache_from < max_new_tokens:
        lengths.append(grow_cache_from)
        grow_cache_from *= 2
    return lengths


def grow_cache(cache, length):
    """`cached_next_logits`' cache in the decoding layout (`by_head`) with room for
    `length` positions per beam slot, those written kept where a step reads them (`decoding`'s
    `grow_cache`)."""

    def grow(tree):
        if isinstance(tree, dict) and "key_by_head" in tree:
            group = int(tree["group"].shape[0])
            keys, values = tree["key_by_head"], tree["value_by_head"]
            heads, rows, key_dim, k_len = ops.shape(keys)
            old = k_len // group
            keys = ops.reshape(keys, (heads, rows, key_dim, group, old))
            keys = ops.pad(keys, [(0, 0)] * 4 + [(0, length - old)])
            values = ops.reshape(values, (heads, rows, group, old, ops.shape(values)[-1]))
            values = ops.pad(values, [(0, 0)] * 3 + [(0, length - old), (0, 0)])
            return {
                **tree,
                # Made anew, as in `select_sources`: TensorFlow's XLA bridge fails on one
                # constant carried by several loops.
                "group": ops.zeros((group,), "int32"),
                "key_by_head": ops.reshape(keys, (heads, rows, key_dim, group * length)),
                "value_by_head": ops.reshape(values, (heads, rows, group * length, -1)),
            }
        if isinstance(tree, dict):
            return {name: grow(value) for name, value in tree.items()}
        return type(tree)(grow(value) for value in tree)

    return cache._replace(slots=grow(cache.slots))


def _slot_length(slots, beam_size):
    """The positions per beam slot of `cached_next_logits`' by-head self-attention cache."""
    return int(ops.shape(slots[0]["value_by_head"])[2]) // beam_size


def cached_next_logits(
    model, encoder_inputs, max_new_tokens, beam_size=1, by_head=True, cache_length=None
):
    """Encodes `encoder_inputs`: the `(next_logits, cache)` that `decoding`'s searches take.

    `next_logits` runs `model.decode_step` on one token. The cache, which the searches carry
    from step to step, holds each decoder block's self-attention keys/values (`max_new_tokens`
    positions, filled step by step). What never changes, each block's cross-attention
    keys/values (computed here, once) and the source padding mask, is kept one row per
    source: `next_logits` may be called with `group * batch` rows (beam search's `beam_size`
    beams per source, consecutive), and each group of rows then attends to its source's row.
    In the decoding layout (`by_head`) it travels in the cache (a `decoding.BeamCache`'s
    `sources`, for greedy search too, whose `slots` are then the rows), so that a shrinking
    search selects it with the rest (`select_sources`); with `by_head=False` it stays with
    `next_logits` and the cache is the self-attention keys/values only.

    With `beam_size > 1` the cache is a `decoding.BeamCache`: the keys/values stay in their
    beam slot (`slots`, never reordered) and `hypotheses` holds, for each hypothesis and
    position, the slot where that position of its past was written. The self-attention of a
    beam reads the keys/values of all `beam_size` slots of its source, masked to its own past
    (`MultiHeadAttention`'s grouped cache): a step costs `beam_size` times the (small)
    attention arithmetic of a reordered cache, and no copy of the whole cache.

    `by_head=True` (the default) keeps the keys and values in `MultiHeadAttention`'s decoding
    layout (heads first, `init_cache(group=beam_size)`), which a step reads without
    transposing the cache (on TensorFlow's XLA those copies were 40 % of a Bible beam-search
    step). Such a cache has no batch axis 0: with `beam_size=1` it serves `greedy_search`,
    which never reorders. `by_head=False` gives the batch-major cache, which any search may
    reorder (`beam_search` over the `beam_size=1` cache reorders it).

    `cache_length` (by-head layout only) makes the self-attention cache that many positions
    long at first (`grow_cache` lengthens it; a step attends over the positions it holds).
    Defaults to `None`: `max_new_tokens`.
    """
    if cache_length is not None and not by_head:
        raise ValueError(
            "`cache_length` needs the decoding layout (`by_head=True`). Received: "
            f"cache_length={cache_length!r}, by_head={by_head!r}"
        )
    encoder_outputs, padding_mask = model.encode(encoder_inputs, training=False)
    # Built once here, not at every step: the cross-attention masks (in the cache) and
    # the position encodings.
    layers = model.init_cache(
        encoder_outputs,
        max_new_tokens if cache_length is None else cache_length,
        padding_mask,
        group=beam_size if by_head else None,
    )
    encodings = model.decoding_encodings(max_new_tokens)
    cross = [layer["cross"] for layer in layers]
    own = [layer["self"] for layer in layers]

    def step(tokens, cache, index, mask=None, cross=cross, padding_mask=padding_mask):
        layers = [
            {"self": mine, "cross": shared} for mine, shared in zip(cache, cross, strict=True)
        ]
        logits, layers = model.decode_step(
            tokens, layers, index, padding_mask, mask, encoding_table=encodings
        )
        return logits, [layer["self"] for layer in layers]

    if beam_size == 1 and not by_head:
        return step, own
    if beam_size == 1:
        # Greedy search never reorders: the slots are the rows; what is read per source
        # (cross-attention, padding mask) travels in the cache, for a shrinking search.

        def next_logits_of_rows(tokens, cache, index):
            cross, padding_mask = cache.sources
            logits, own = step(tokens, cache.slots, index, None, cross, padding_mask)
            return logits, cache._replace(slots=own)

        return next_logits_of_rows, BeamCache((), own, (cross, padding_mask))
    if not by_head:  # The slots of every hypothesis (the by-head cache holds them already).
        own = keras.tree.map_structure(lambda leaf: ops.repeat(leaf, beam_size, axis=0), own)
    positions = ops.arange(max_new_tokens, dtype="int32")  # (max_new_tokens,)
    slot_ids = ops.arange(beam_size, dtype="int32")[None, :, None]  # (1, beam, 1)

    def next_logits(tokens, cache, index):
        rows = ops.shape(tokens)[0]
        slots = ops.arange(rows, dtype="int32") % beam_size  # (rows,): each row's own slot
        history = ops.where(positions[None, :] == index, slots[:, None], cache.hypotheses)
        # The positions the cache holds now (a growing cache: fewer than max_new_tokens).
        length = _slot_length(cache.slots, beam_size) if by_head else max_new_tokens
        # Row r may attend to slot j's position p when its past at p was written in slot j.
        mask = ops.logical_and(
            ops.equal(history[:, None, :length], slot_ids),
            (positions[:length] <= index)[None, None, :],
        )  # (rows, beam, length)
        mask = ops.reshape(mask, (rows, 1, beam_size * length))
        cross, padding_mask = cache.sources
        logits, own = step(tokens, cache.slots, index, mask, cross, padding_mask)
        return logits, cache._replace(hypotheses=history, slots=own)

    rows = ops.shape(encoder_inputs)[0]
    history = ops.zeros((rows, max_new_tokens), "int32")  # repeated per beam by the search
    # `own`: beam_size rows per source already; the cross-attention caches and the padding
    # mask in `sources`, so that a shrinking search selects them (`select_sources`).
    return next_logits, BeamCache(history, own, (cross, padding_mask))


def select_sources(cache, sources, beam_size):
    """`decoding.beam_search`'s `select_sources` for `cached_next_logits`' `BeamCache`: the
    cache of the batch elements `sources` (int32 `(k,)`), in either layout.

    The decoding layout (`by_head`) keeps the batch on axis 1 of its `*_by_head` keys and
    values (heads first) and a static `group` of no batch; every other leaf has it on axis 0,
    one row per hypothesis in `slots` (batch-major layout), one per source elsewhere.
    """

    def select(tree, per_hypothesis):
        if isinstance(tree, dict):
            # `group` (static, all zeros) is made anew: TensorFlow's XLA bridge failed on one
            # constant carried by three loops ("Cannot find body function ..._const_0").
            return {
                name: ops.zeros(ops.shape(value), "int32")
                if name == "group"
                else ops.take(value, sources, axis=1)
                if name.endswith("_by_head")
                else select(value, per_hypothesis)
                for name, value in tree.items()
            }
        if isinstance(tree, (list, tuple)):
            return type(tree)(select(value, per_hypothesis) for value in tree)
        if per_hypothesis:
            return select_rows(tree, sources, beam_size)
        return ops.take(tree, sources, axis=0)

    return BeamCache(
        hypotheses=select_rows(cache.hypotheses, sources, beam_size),
        slots=select(cache.slots, per_hypothesis=True),
        sources=select(cache.sources, per_hypothesis=False),
    )


def generate_uncached_greedy(
    model, encoder_inputs, start_id, end_id, max_new_tokens, pad_id=0, max_lengths=None
):
    """Greedy search without a cache: the slow reference the cached searches are tested and
    benchmarked against.

    Every step re-runs `model.decode` over the whole prefix, held in a static
    `(batch, max_new_tokens)` buffer. Arguments and results as `generate` with `beam_size=1`.
    """
    encoder_outputs, padding_mask = model.encode(encoder_inputs, training=False)
    batch_size = ops.shape(encoder_inputs)[0]

    def next_logits(tokens, buffer, index):
        buffer = ops.slice_update(
            buffer, [ops.zeros((), "int32"), index], tokens
        )  # (batch, max_new_tokens), tokens 0 .. index written
        logits = model.decode(
            buffer, encoder_outputs, padding_mask, training=False
        )  # (batch, max_new_tokens, vocab)
        return ops.take(logits, index, axis=1), buffer  # (batch, vocab)

    sequences, scores = greedy_search(
        next_logits,
        ops.full((batch_size, max_new_tokens), pad_id, dtype="int32"),
        ops.full((batch_size,), start_id, dtype="int32"),
        max_new_tokens,
        end_id,
        pad_id,
        max_lengths,
    )
    return sequences[:, None], scores[:, None]


def trim(sequence, end_id, pad_id):
    """Generated ids up to and including the end token (or up to trailing padding).

    Example:

    >>> trim([5, 6, 2, 0, 0], end_id=2, pad_id=0), trim([5, 0, 0], end_id=2, pad_id=0)
    ([5, 6, 2], [5])
    """
    tokens = [int(token) for token in sequence]
    if end_id in tokens:
        return tokens[: tokens.index(end_id) + 1]
    while tokens and tokens[-1] == pad_id:
        tokens.pop()
    return tokens


# `cross_attentions` pads the widths of its batches to multiples of this.
ATTENTION_WIDTH_STEP = 8


def cross_attention(model, start_id, source_ids, tokens):
    """Cross-attention probabilities with which `model` produced `tokens` from `source_ids`.

    One uncached decoder pass over `[START] tokens[:-1]` (teacher forcing), for plotting
    (`cross_attentions` computes many in batches).

    Args:
        model: `keras_transformer.Transformer`.
        start_id: int. Decoder start token.
        source_ids: list of int. The encoder input, `[START]` and `[END]` included.
        tokens: list of int. The generated tokens.

    Returns:
        float32 NumPy array `(num_decoder_layers, num_heads, len(tokens), len(source_ids))`,
        or `None` when `tokens` is empty.
    """
    return cross_attentions(model, start_id, [source_ids], [tokens], batch_size=1)[0]


def cross_attentions(model, start_id, sources, targets, batch_size=32):
    """`cross_attention` of each `(sources[i], targets[i])`, in padded batches of
    `batch_size` pairs of similar lengths: one uncached decoder pass per batch.

    Padding changes nothing: padded source positions are masked (attention 0, cut off), and
    the padding after a target comes after every real position (causal self-attention).
    Every batch has `batch_size` rows (the last repeats its first) and widths rounded up to
    multiples of `ATTENTION_WIDTH_STEP`: few distinct shapes, which matters where each new
    shape compiles its operations (JAX).

    Returns:
        A list with, for each pair, the array of `cross_attention` (`None` for empty tokens).
    """
    found = [None] * len(sources)
    rows = sorted(
        (row for row, tokens in enumerate(targets) if tokens),
        key=lambda row: (len(sources[row]), len(targets[row])),
    )
    step = ATTENTION_WIDTH_STEP
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        source_width = -(-max(len(sources[row]) for row in batch) // step) * step
        target_width = -(-max(len(targets[row]) for row in batch) // step) * step
        padded_rows = batch + [batch[0]] * (batch_size - len(batch))
        encoder_inputs = np.zeros((len(padded_rows), source_width), "int32")
        decoder_inputs = np.zeros((len(padded_rows), target_width), "int32")
        for index, row in enumerate(padded_rows):
            encoder_inputs[index, : len(sources[row])] = sources[row]
            decoder_inputs[index, : len(targets[row])] = [start_id, *targets[row][:-1]]
        with _backend.no_grad():
            encoder_outputs, padding_mask = model.encode(encoder_inputs, training=False)
            _, scores = model.decode(
                decoder_inputs, encoder_outputs, padding_mask, return_attention_scores=True
            )
        stacked = np.stack([ops.convert_to_numpy(layer) for layer in scores]).astype("float32")
        for index, row in enumerate(batch):
            found[row] = stacked[:, index, :, : len(targets[row]), : len(sources[row])].copy()
    return found


class Generator:
    """Compiled batched generation with a `Transformer`, one compiled function per shape.

    Compiles `generate` for the current Keras backend (`tf.function(jit_compile=True)` on
    TensorFlow, `jax.jit` with the variable values passed as arguments on JAX, eager under
    `torch.no_grad()` on PyTorch) and caches the compiled function by search options; each
    backend then traces once per input shape, with static shapes (on TensorFlow a trace with
    a dynamic batch and length had twice the graph operations and took ~1.2 s longer to
    trace and compile, measured on the `make bible` translator). A call with a shape and
    options already seen does not retrace (`trace_count` stays put).

    Args:
        model: `keras_transformer.Transformer`.
        start_id: int. Decoder start token id.
        end_id: int. End token id.
        pad_id: int. Padding id. Defaults to `0`.
        extra_length: int. With `max_new_tokens=None`, generate at most `source_length +
            extra_length` tokens (paper §6.1: input length + 50). Defaults to `50`.
        jit_compile: bool. Compile (TensorFlow, JAX). `False` runs eagerly. Defaults to `True`.
        shrink_by: int `>= 2` or `None`. A search (beam or greedy, not sampling) goes on with
            a batch this many times smaller once at most `1 / shrink_by` of its rows are
            still searching (`decoding.beam_search`'s `shrink_by`): the results are the same,
            and a batch no longer pays full steps for its one long output. `None`: the whole
            batch to the end. Defaults to `16`.
        grow_cache_from: int `>= 1` or `None`. The self-attention cache of a beam search
            of two sources or more first holds this many positions and doubles each time the search reaches its
            end (`generate`'s `grow_cache_from`): early steps attend over a short cache. The
            results are the same (scores up to float rounding); each doubling is one more
            compiled loop; searches that are not compiled (`jit_compile=False`, PyTorch)
            keep the whole cache. `None`: `max_new_tokens` positions from the start.
            Defaults to `16` (the 1,000 Bible test verses, beam 4: 18-20 % less CPU, first
            calls 15 % (JAX) and 42 % (TensorFlow) longer).

    Call arguments:
        encoder_inputs: int `(batch, source_length)` NumPy array or tensor, 0 = padding, ids
            below `model.vocabulary_size` (checked before compiling: a `ValueError` names the first
            bad id). Pad lengths and batch sizes to a few values (`bucket_length`,
            `padded_batch_size`) to bound the number of compiled shapes.
        beam_size: int. Beams; `1` runs greedy search. Defaults to `4`.
        alpha: float. Length penalty of beam search. Defaults to `0.6`.
        max_new_tokens: int. Most tokens to generate, the end token included. Defaults to
            `None`: `source_length + extra_length`.
        max_lengths: optional int `(batch,)` array: the most tokens of each row, each in
            `1 .. max_new_tokens`; a row then gets what it would searched alone with
            `max_new_tokens=max_lengths[row]`, so sources of different lengths can share a
            batch (and a compiled shape) and still keep their own maximum output length.
            Defaults to `None`: `max_new_tokens` for every row.
        patience: optional number `>= 1`: beam search stops a row once `round(patience *
            beam_size)` hypotheses have ended (`decoding.beam_search`). Defaults to `None`:
            the exact stop.

    Returns:
        `(sequences, scores)` NumPy arrays, as from `generate`: `(batch, beam_size,
        max_new_tokens)` and `(batch, beam_size)`, best first.

    Example:

    >>> import numpy as np
    >>> from keras_transformer import Transformer
    >>> model = Transformer.from_preset("tiny", vocabulary_size=20)
    >>> generator = Generator(model, start_id=1, end_id=2, extra_length=4)
    >>> sequences, scores = generator(np.array([[5, 6, 7, 0]], "int32"), beam_size=1)
    >>> sequences.shape
    (1, 1, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1.
    """

    def __init__(
        self,
        model,
        start_id,
        end_id,
        pad_id=0,
        extra_length=50,
        jit_compile=True,
        shrink_by=16,
        grow_cache_from=16,
    ):
        check_positive_int("extra_length", extra_length)
        if grow_cache_from is not None:
            check_positive_int("grow_cache_from", grow_cache_from)
        if shrink_by is not None:
            check_int("shrink_by", shrink_by, minimum=2)
        for name, value in (("start_id", start_id), ("end_id", end_id), ("pad_id", pad_id)):
            check_token_ids(value, model.target_vocabulary_size, name)
        self.model = model
        self.start_id = int(start_id)
        self.end_id = int(end_id)
        self.pad_id = int(pad_id)
        self.extra_length = extra_length
        self.jit_compile = bool(jit_compile)
        self.shrink_by = shrink_by
        self.grow_cache_from = grow_cache_from
        self.trace_count = 0
        self._functions = {}
        # The vehicle of sampling's `keras.random` draws: its state is an input of the
        # compiled search (`seed_state`), never read or advanced itself.
        self._seed_generator = keras.random.SeedGenerator(0)
        # A Translator may search several batches at once, from several threads.
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()

    def _compiled(self):
        """Whether this generator's searches are compiled by XLA (TensorFlow, JAX)."""
        return self.jit_compile and keras.backend.backend() in ("tensorflow", "jax")

    def __call__(
        self,
        encoder_inputs,
        beam_size=4,
        alpha=0.6,
        max_new_tokens=None,
        max_lengths=None,
        prefix=None,
        sampling=None,
        seed=0,
        patience=None,
    ):
        return self._run(
            encoder_inputs,
            max_new_tokens,
            beam_size,
            alpha,
            max_lengths,
            prefix,
            sampling,
            seed,
            patience,
        )

    def uncached_greedy(self, encoder_inputs, max_new_tokens=None, max_lengths=None):
        """Compiled `generate_uncached_greedy`: the slow reference for tests and benchmarks.

        Arguments and results as a call with `beam_size=1`.
        """
        return self._run(encoder_inputs, max_new_tokens, None, 0.0, max_lengths)

    def function(
        self, max_new_tokens, beam_size=4, alpha=0.6, prefix=False, sampling=None, patience=None
    ):
        """The compiled `(encoder_inputs, max_lengths[, prefix][, seed]) -> (sequences,
        scores)` function for these options (`max_lengths`: int32 `(batch,)`, each in
        `1 .. max_new_tokens`; with `prefix=True`, `prefix` int32 `(batch, prefix_length)`,
        `-1` after each row's prefix; with `sampling`, `seed` the `(2,)` seed state,
        `seed_state(seed)`).

        `patience` (beam search's stop, `decoding.beam_search`) is part of the compiled
        search: one compilation per value.

        The values of `sampling` are inputs of the compiled search, not part of it: every
        temperature shares one compilation, and every top-k/top-p cut another (at most two
        sampling searches per shape, whatever values callers send).

        On TensorFlow it is a `tf.function` (or a function calling one) that can also be
        called inside another `tf.function` (the SavedModel export does).
        """
        check_positive_int("beam_size", beam_size)
        check_alpha(alpha)
        sampling = check_sampling(sampling)
        if sampling is not None and beam_size != 1:
            raise ValueError(f"Sampling needs `beam_size=1`. Received: beam_size={beam_size}")
        alpha = 0.0 if beam_size == 1 else alpha
        patience = check_patience(patience) if beam_size > 1 else None
        mode = self._sampling_mode(sampling)
        function = self._function(max_new_tokens, beam_size, alpha, bool(prefix), mode, patience)
        if sampling is None:
            return function
        vocabulary_size = self.model.target_vocabulary_size
        values = np.array(
            [min(sampling.top_k, vocabulary_size), sampling.top_p, sampling.temperature],
            "float32",
        )

        def sample(encoder_inputs, max_lengths, *extras):
            return function(encoder_inputs, max_lengths, *extras, values)

        return sample

    def seed_state(self, seed):
        """The `(2,)` seed state a compiled sampling search takes for the int `seed` (or a
        pair of ints, used as given)."""
        dtype = keras.backend.standardize_dtype(self._seed_generator.state.dtype)
        pair = [seed, 0] if np.ndim(seed) == 0 else list(seed)
        return np.array(pair, "int64").astype(dtype)

    def score(self, encoder_inputs, decoder_inputs, labels):
        """Compiled `token_log_probs`: the log probability of each label, teacher-forced.

        Args:
            encoder_inputs: int `(batch, source_length)`, 0 = padding.
            decoder_inputs: int `(batch, target_length)`: `[START] y`, 0 = padding.
            labels: int `(batch, target_length)`: `y [END]`, 0 = padding.

        Returns:
            float32 NumPy array `(batch, target_length)`: `log p(labels[b, t] | source,
            labels[b, :t])`, 0 at padding.
        """
        arrays = [encoder_inputs, decoder_inputs, labels]
        check_token_ids(encoder_inputs, self.model.vocabulary_size, "encoder_inputs")
        for name, value in (("decoder_inputs", decoder_inputs), ("labels", labels)):
            check_token_ids(value, self.model.target_vocabulary_size, name)
        # One function per shape, as the searches (TensorFlow warns when one function
        # retraces for a sixth shape).
        key = ("score", *np.shape(encoder_inputs), *np.shape(decoder_inputs))
        with self._lock:
            if key not in self._functions:
                model = self.model

                def run(encoder_inputs, decoder_inputs, labels):
                    return token_log_probs(model, encoder_inputs, decoder_inputs, labels)

                self._functions[key] = _backend.compile_inference(
                    run, model.variables, self.jit_compile
                )
            function = self._functions[key]
        return ops.convert_to_numpy(function(*[ops.cast(array, "int32") for array in arrays]))

    # === Helpers ===
    def _run(
        self,
        encoder_inputs,
        max_new_tokens,
        beam_size,
        alpha,
        max_lengths,
        prefix=None,
        sampling=None,
        seed=0,
        patience=None,
    ):
        if len(encoder_inputs.shape) != 2:
            raise ValueError(
                "`encoder_inputs` must have shape (batch, source_length). "
                f"Received: encoder_inputs.shape={tuple(encoder_inputs.shape)}"
            )
        if max_new_tokens is None:
            max_new_tokens = int(encoder_inputs.shape[1]) + self.extra_length
        max_lengths = _check_max_lengths(max_lengths, encoder_inputs.shape[0], max_new_tokens)
        extras = []
        if prefix is not None:
            prefix = np.asarray(ops.convert_to_numpy(prefix))
            if (
                prefix.ndim != 2
                or prefix.shape[0] != encoder_inputs.shape[0]
                or prefix.shape[1] > max_new_tokens
            ):
                raise ValueError(
                    f"`prefix` must have shape (batch={encoder_inputs.shape[0]}, "
                    f"prefix_length <= max_new_tokens={max_new_tokens}). "
                    f"Received: prefix.shape={prefix.shape}"
                )
            check_token_ids(np.maximum(prefix, 0), self.model.target_vocabulary_size, "prefix")
            extras.append(prefix.astype("int32"))
        if beam_size is None:  # The uncached reference.
            function = self._function(max_new_tokens, None, 0.0, False, None, None)
        else:
            function = self.function(
                max_new_tokens, beam_size, alpha, prefix is not None, sampling, patience
            )
        if sampling is not None:
            extras.append(self.seed_state(seed))
        # Here, eagerly: inside the compiled search the values cannot be checked.
        check_token_ids(encoder_inputs, self.model.vocabulary_size, "encoder_inputs")
        sequences, scores = function(ops.cast(encoder_inputs, "int32"), max_lengths, *extras)
        return ops.convert_to_numpy(sequences), ops.convert_to_numpy(scores)

    def _sampling_mode(self, sampling):
        """The compiled program a `Sampling` needs: `None` (no sampling), `"temperature"`
        (no cut) or `"cut"` (top-k or top-p); its values are inputs of that program."""
        if sampling is None:
            return None
        vocabulary_size = self.model.target_vocabulary_size
        cut = 0 < sampling.top_k < vocabulary_size or sampling.top_p < 1.0
        return "cut" if cut else "temperature"

    def _function(self, max_new_tokens, beam_size, alpha, prefix, sampling, patience):
        check_positive_int("max_new_tokens", max_new_tokens)
        key = (int(max_new_tokens), beam_size, float(alpha), prefix, sampling, patience)
        with self._lock:
            if key not in self._functions:
                self._functions[key] = self._compile(*key)
            return self._functions[key]

    def _compile(self, max_new_tokens, beam_size, alpha, prefix, sampling, patience):
        model = self.model
        ids = dict(start_id=self.start_id, end_id=self.end_id, pad_id=self.pad_id)
        generator = self._seed_generator

        def run(encoder_inputs, max_lengths, *extras):
            encoder_inputs = ops.cast(encoder_inputs, "int32")
            max_lengths = ops.cast(max_lengths, "int32")
            if beam_size is None:
                return generate_uncached_greedy(
                    model,
                    encoder_inputs,
                    **ids,
                    max_new_tokens=max_new_tokens,
                    max_lengths=max_lengths,
                )
            extras = list(extras)
            prefix_ids = ops.cast(extras.pop(0), "int32") if prefix else None
            seed = (generator, extras.pop(0)) if sampling is not None else None
            values = None
            if sampling == "temperature":  # `values`: (top_k, top_p, temperature) float32.
                values = Sampling(temperature=ops.cast(extras.pop(0), "float32")[2])
            elif sampling == "cut":
                given = ops.cast(extras.pop(0), "float32")
                values = Sampling(ops.cast(given[0], "int32"), given[1], given[2])
            return generate(
                model,
                encoder_inputs,
                **ids,
                max_new_tokens=max_new_tokens,
                beam_size=beam_size,
                alpha=alpha,
                max_lengths=max_lengths,
                prefix=prefix_ids,
                sampling=values,
                seed=seed,
                patience=patience,
                shrink_by=self.shrink_by,
                # Compiled searches only (XLA): a JAX test worker crashed twice (an abort,
                # then a segfault) reading an eager search's grown loop back from the shared
                # persistent cache; cause not found. PyTorch's eager search keeps its cache too.
                grow_cache_from=self.grow_cache_from if self._compiled() else None,
            )

        def count_trace():
            with self._count_lock:  # Two shapes may trace at once, from two threads.
                self.trace_count += 1

        return _backend.compile_inference(run, model.variables, self.jit_compile, count_trace)


def token_log_probs(model, encoder_inputs, decoder_inputs, labels):
    """The log probability of each label under teacher forcing (forced decoding, scoring).

    One uncached decoder pass over `decoder_inputs`: the same computation as training's
    forward pass (dropout off), so `-sum(token_log_probs)` over the non-padding labels is the
    cross-entropy the model is trained on, without label smoothing.

    Args:
        model: `keras_transformer.Transformer`.
        encoder_inputs: int32 `(batch, source_length)`, 0 = padding.
        decoder_inputs: int32 `(batch, target_length)`, `[START] y`, 0 = padding.
        labels: int32 `(batch, target_length)`, `y [END]`, 0 = padding.

    Returns:
        float32 `(batch, target_length)`: `log p(labels[b, t] | ...)`, 0 where a label is 0.
    """
    encoder_outputs, padding_mask = model.encode(encoder_inputs, training=False)
    logits = ops.cast(model.decode(decoder_inputs, encoder_outputs, padding_mask), "float32")
    log_probs = ops.log_softmax(logits, axis=-1)  # (batch, target_length, vocab)
    picked = ops.take_along_axis(log_probs, ops.cast(labels, "int32")[:, :, None], axis=-1)
    return ops.where(ops.not_equal(labels, 0), picked[:, :, 0], 0.0)


def _check_max_lengths(max_lengths, batch_size, max_new_tokens):
    """`max_lengths` as an int32 NumPy array `(batch_size,)` in `1 .. max_new_tokens`
    (`max_new_tokens` for every row when `None`); a `ValueError` names a bad value."""
    if max_lengths is None:
        return np.full((batch_size,), max_new_tokens, "int32")
    values = np.asarray(ops.convert_to_numpy(max_lengths))
    if (
        values.shape != (batch_size,)
        or not np.issubdtype(values.dtype, np.integer)
        or values.min(initial=1) < 1
        or values.max(initial=1) > max_new_tokens
    ):
        raise ValueError(
            f"`max_lengths` must be {batch_size} ints (one per row of `encoder_inputs`) in "
            f"1 .. max_new_tokens={max_new_tokens}. Received: max_lengths={values.tolist()!r}"
        )
    return values.astype("int32")
