"""Batched greedy and beam search over a next-token-logits callable.

The search functions never see a model. They see one callable,

```
next_logits(tokens, cache, index) -> (logits, new_cache)
```

- `tokens`: int32 `(batch, 1)`, the token at decoder position `index`.
- `cache`: a pytree (nested dict / list / tuple) of tensors, each with the batch on axis 0
  (for example the self-attention keys and values of every decoder block and the encoder
  output with its padding mask).
- `index`: int32 scalar tensor, the position of `tokens`.
- `logits`: float `(batch, vocabulary_size)`, the scores of the token at position `index + 1`.
- `new_cache`: the same structure, shapes and dtypes as `cache`.

Both searches are written with `keras.ops.while_loop` over static shapes only, so they run
eagerly on every backend and trace once inside `tf.function(jit_compile=True)` or `jax.jit`
(with `max_new_tokens` and `beam_size` fixed by the caller, as they are Python ints).

Both searches can continue a given target prefix (`prefix`: the first tokens of each row are
forced, ragged across the batch, inside the same loop), and greedy search can sample instead of
taking the most probable token (`sampling`: top-k, top-p (nucleus), temperature, drawn with
`keras.random.categorical` from a seed carried in the loop state, so a seeded search is
reproducible and compiles like the others).

Scores are natural-log probabilities. Greedy search returns the plain sum of the log
probabilities of the chosen tokens. Beam search returns that sum divided by the GNMT length
penalty (Wu et al., 2016), the setting the Transformer paper uses for translation
(beam size 4, `alpha=0.6`).
"""

import functools
import math
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer._checks import check_alpha, check_int

# A log probability that marks "no hypothesis here". Finite (so arithmetic on it never makes
# NaN), far below any real log probability, and representable in float32.
_INVALID_LOG_PROB = -1.0e7
# Used to stop a hypothesis that has just produced the end token from staying alive. Lower
# than any invalid hypothesis can drift to, so such a candidate never displaces one.
_FORBIDDEN_LOG_PROB = -1.0e9
# The smallest sampling temperature: float32 logits (tens at most) divided by it stay finite
# (1e-300 was 0 in float32: a division by zero inside the compiled search).
MIN_TEMPERATURE = 1e-6


class BeamCache(NamedTuple):
    """A beam-search cache in parts: one reordered with the hypotheses, the others left in place.

    `beam_search` gathers the rows of every leaf of a plain cache whenever it reselects the
    alive hypotheses. A `BeamCache` asks it to gather `hypotheses` only (given, like a plain
    cache, as for one beam: the search repeats its rows `beam_size` times); `slots` is given
    for all `batch * beam_size` hypotheses, in whatever layout `next_logits` reads, and the
    search never repeats, reorders or reads it: slot rows stay where they are (row `b * beam_size + k` stays beam slot `k` of example `b`, whichever
    hypothesis holds it). A `next_logits` that records in `hypotheses` which slot holds each
    position of a hypothesis' past can then read that past where it was written, instead of
    having the search copy it from row to row at every step (see
    `keras_transformer.generation.cached_next_logits`). `sources` (optional) holds what
    `next_logits` reads once per batch element (the encoder's keys and values), so that a
    shrinking search (`beam_search`'s `select_sources`) selects it with the rest.
    """

    hypotheses: Any  # pytree of tensors, batch rows (repeated per beam): reordered with the beams
    slots: Any  # pytree of tensors for all batch * beam rows, any layout: passed on untouched
    sources: Any = ()  # pytree of tensors per batch element, any layout: passed on untouched


class Sampling(NamedTuple):
    """How `greedy_search` samples each next token instead of taking the most probable one.

    The logits are divided by `temperature`, cut to the `top_k` most probable tokens (`0`: all)
    and then to the smallest set of the most probable whose probabilities sum to at least
    `top_p` (nucleus sampling; `1.0`: no cut), and one token is drawn from what is left.
    `Sampling(top_k=1)` is greedy search. Scores stay the log probabilities of the model
    (temperature 1, no cut) of the tokens drawn.

    Attributes:
        top_k: int `>= 0`. Defaults to `0`: the whole vocabulary.
        top_p: float in `(0, 1]`. Defaults to `1.0`.
        temperature: float `>= MIN_TEMPERATURE` (1e-6). Defaults to `1.0`.

    A compiled caller may give scalar tensors instead (checked before, not here): one
    compiled search then serves every value (`keras_transformer.generation.Generator` does,
    so that new values compile nothing). A tensor `top_k` or `top_p` cuts the whole
    vocabulary sorted at each step; a Python `0`/`1.0` cuts nothing.
    """

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0


def check_sampling(sampling):
    """`sampling` (a `Sampling` or `None`) checked; a `ValueError` names a bad field."""
    if sampling is None:
        return None
    if not isinstance(sampling, Sampling):
        raise ValueError(
            f"`sampling` must be a `Sampling` or None. Received: sampling={sampling!r}"
        )
    if any(_is_tensor(value) for value in sampling):
        return sampling  # A compiled caller's run-time values, checked by that caller.
    check_int("sampling_topk", sampling.top_k, minimum=0)
    top_p, temperature = sampling.top_p, sampling.temperature
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"`sampling_topp` must be in (0, 1]. Received: sampling_topp={top_p!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not MIN_TEMPERATURE <= temperature < float("inf")
    ):
        raise ValueError(
            f"`sampling_temperature` must be a finite number >= {MIN_TEMPERATURE} (float32 "
            f"logits divided by less overflow). Received: sampling_temperature={temperature!r}"
        )
    return Sampling(int(sampling.top_k), float(top_p), float(temperature))


class _GreedyState(NamedTuple):
    """Loop state of `greedy_search`."""

    index: Any  # int32 scalar: the decoder position of `tokens`
    tokens: Any  # int32 (batch,): the last tokens
    cache: Any  # pytree of tensors, batch on axis 0
    sequences: Any  # int32 (batch, max_new_tokens)
    scores: Any  # float32 (batch,): sum of log probabilities
    finished: Any  # bool (batch,)
    seed: Any  # (2,) state of the random seed (sampling; unused otherwise)


class _BeamState(NamedTuple):
    """Loop state of `beam_search`: the alive and the finished hypotheses."""

    index: Any  # int32 scalar: the decoder position of `alive_tokens`
    alive_tokens: Any  # int32 (batch, beam): the last tokens
    alive_sequences: Any  # int32 (batch, beam, max_new_tokens)
    alive_log_probs: Any  # float32 (batch, beam)
    cache: Any  # pytree of tensors, (batch * beam) rows on axis 0
    finished_sequences: Any  # int32 (batch, beam, max_new_tokens)
    finished_scores: Any  # float32 (batch, beam): length-penalised
    finished_flags: Any  # bool (batch, beam): whether the slot holds a hypothesis
    ended: Any  # int32 (batch,): how many hypotheses have ended so far


def _while_loop(condition, body, state):
    """`ops.while_loop` over a NamedTuple state, handed to the backends as a plain tuple
    (`condition(state)`, `body(state) -> state`)."""
    state_type = type(state)
    final = ops.while_loop(
        lambda *fields: condition(state_type(*fields)),
        lambda *fields: tuple(body(state_type(*fields))),
        tuple(state),
    )
    return state_type(*final)


def length_penalty(length, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha`.

    Beam search divides the log probability of a hypothesis by this number, so that longer
    hypotheses (whose log probabilities are sums of more negative terms) are not always
    beaten by shorter ones. `alpha=0` turns the penalty off (it is then exactly 1).

    Args:
        length: int or int/float tensor of any shape. Number of generated tokens, counting
            the end token.
        alpha: float. Strength of the penalty, `>= 0`. The Transformer paper uses 0.6.

    Returns:
        A float32 tensor with the shape of `length`.

    Example:

    >>> float(length_penalty(1, alpha=0.6))
    1.0
    >>> round(float(length_penalty(7, alpha=1.0)), 4)
    2.0

    References:
        - [Wu et al., 2016](https://arxiv.org/abs/1609.08144), eq. 14.
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1.
    """
    check_alpha(alpha)
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, float(alpha))


def greedy_search(
    next_logits,
    cache,
    start_tokens,
    max_new_tokens,
    end_id,
    pad_id=0,
    max_lengths=None,
    prefix=None,
    sampling=None,
    seed=None,
    select_sources=None,
    shrink_by=16,
    cache_lengths=None,
    grow_cache=None,
):
    """Batched greedy decoding: at every step take the most probable next token.

    A sequence is finished once it produces `end_id`; later positions hold `pad_id` and add
    nothing to its score. The loop stops as soon as every sequence is finished (or has
    `max_lengths` tokens), or after `max_new_tokens` steps.

    Args:
        next_logits: callable `(tokens, cache, index) -> (logits, new_cache)`, see the module
            docstring. Called once per step on the whole batch.
        cache: pytree of tensors, each with the batch on axis 0. Passed to the first call of
            `next_logits`. May be empty (`{}`).
        start_tokens: int tensor `(batch,)`. The token at position 0 (for example the start
            of sequence id).
        max_new_tokens: int `>= 1`. Number of tokens to generate, the end token included.
        end_id: int. End-of-sequence token id.
        pad_id: int. Written after the end token. Defaults to 0.
        max_lengths: optional int tensor `(batch,)`, each in `1 .. max_new_tokens` (not
            checked here): the most tokens of each sequence. A sequence then equals its
            search alone with `max_new_tokens=max_lengths[b]`, padded. Defaults to `None`:
            `max_new_tokens` for all.
        prefix: optional int tensor `(batch, prefix_length)`, `prefix_length <= max_new_tokens`:
            the first generated tokens of each row are forced to its prefix, read up to its
            first negative entry (pad ragged prefixes with `-1`; a row of `-1` has none). The
            forced tokens are part of `sequences` and their log probabilities of `scores`;
            the search continues from them. A prefix holds no `end_id`. Defaults to `None`.
        sampling: optional `Sampling`: draw each token (not forced by `prefix`) at random
            instead of taking the most probable. Defaults to `None`: greedy.
        seed: with `sampling`, a `keras.random.SeedGenerator` (its state seeds the first
            draw; it is not advanced) or a pair `(generator, state)`, `state` an int tensor
            `(2,)` used in place of the generator's state (a compiled caller passes it as an
            input). The same seed, inputs and batch give the same samples. Defaults to `None`.
        select_sources: optional callable `(cache, sources) -> cache`, the cache of the batch
            elements `sources` (int32 `(k,)`): the batch shrinks as it finishes, as in
            `beam_search` (not when sampling, whose draws are the whole batch's). Defaults to
            `None`: the whole batch to the end.
        shrink_by: int `>= 2`, or `None` (do not shrink). Defaults to `16`.
        cache_lengths: optional increasing ints below `max_new_tokens`, with `grow_cache`: a
            cache that grows as the search writes it, as in `beam_search`. Defaults to `None`.
        grow_cache: callable `(cache, length) -> cache`, with `cache_lengths`.

    Returns:
        A tuple `(sequences, scores)`:

        - `sequences`: int32 `(batch, max_new_tokens)`, the generated tokens without the start
          token, the end token included, `pad_id` after it.
        - `scores`: float32 `(batch,)`, the sum of the log probabilities of the generated
          tokens, up to and including the end token.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> # A bigram "model": the next-token logits depend only on the previous token.
    >>> table = ops.convert_to_tensor(np.log(np.array([
    ...     [0.1, 0.1, 0.1, 0.7],  # after 0 (pad)
    ...     [0.1, 0.1, 0.1, 0.7],  # after 1 (end)
    ...     [0.1, 0.1, 0.1, 0.7],  # after 2 (start)
    ...     [0.1, 0.6, 0.1, 0.2],  # after 3
    ... ], "float32")))
    >>> def next_logits(tokens, cache, index):
    ...     return ops.take(table, tokens[:, 0], axis=0), cache
    >>> sequences, scores = greedy_search(
    ...     next_logits, {}, ops.array([2], "int32"), max_new_tokens=4, end_id=1)
    >>> ops.convert_to_numpy(sequences).tolist()
    [[3, 1, 0, 0]]
    >>> round(float(scores[0]), 4) == round(float(np.log(0.7) + np.log(0.6)), 4)
    True

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 3.
    """
    _check_max_new_tokens(max_new_tokens)
    end_id = _check_token_id(end_id, "end_id")
    pad_id = _check_token_id(pad_id, "pad_id")
    start_tokens = _check_start_tokens(start_tokens)
    if max_lengths is not None:
        max_lengths = ops.cast(max_lengths, "int32")
    prefix = _check_prefix(prefix, max_new_tokens)
    sampling = check_sampling(sampling)
    generator, seed_state = _check_seed(seed, sampling)

    if shrink_by is not None:
        check_int("shrink_by", shrink_by, minimum=2)
    lengths = _check_cache_lengths(cache_lengths, grow_cache, max_new_tokens)

    batch_size = ops.shape(start_tokens)[0]
    positions = ops.arange(max_new_tokens, dtype="int32")[None, :]  # (1, max_new_tokens)

    def stopped(finished, index, max_lengths):
        """Finished, or at its own most tokens."""
        if max_lengths is None:
            return finished
        return ops.logical_or(finished, ops.greater_equal(index, max_lengths))

    def search(state, length, max_lengths, prefix, next_rows):
        """Runs the loop until every row is done, or (`next_rows`) until at most
        `next_rows` rows are still searching, or the step index reaches `length`."""

        def condition(state):
            done = stopped(state.finished, state.index, max_lengths)
            return _go_on(state.index, done, length, next_rows)

        def body(state):
            index, finished = state.index, state.finished
            logits, cache = next_logits(state.tokens[:, None], state.cache, index)
            logits = ops.cast(logits, "float32")  # (batch, vocab)
            seed = state.seed
            if sampling is None:
                next_tokens = ops.cast(ops.argmax(logits, axis=-1), "int32")  # (batch,)
            else:
                next_tokens, seed = _sample(logits, sampling, generator, seed)
            if prefix is not None:
                forced, forced_tokens = _forced(prefix, index)
                next_tokens = ops.where(forced, forced_tokens, next_tokens)
            token_logits = ops.take_along_axis(logits, next_tokens[:, None], axis=-1)
            token_log_probs = _log_softmax_of(token_logits, logits)[:, 0]
            # A finished (or cut) sequence is frozen: no score, padding tokens.
            frozen = stopped(finished, index, max_lengths)
            scores = state.scores + ops.where(frozen, 0.0, token_log_probs)
            next_tokens = ops.where(frozen, pad_id, next_tokens)
            sequences = ops.where(positions == index, next_tokens[:, None], state.sequences)
            finished = ops.logical_or(finished, ops.equal(next_tokens, end_id))
            return _GreedyState(index + 1, next_tokens, cache, sequences, scores, finished, seed)

        return _while_loop(condition, body, state)

    state = _GreedyState(
        index=ops.convert_to_tensor(0, "int32"),
        tokens=start_tokens,
        cache=cache,
        sequences=ops.full((batch_size, max_new_tokens), pad_id, dtype="int32"),
        scores=ops.zeros((batch_size,), dtype="float32"),
        finished=ops.zeros((batch_size,), dtype="bool"),
        seed=seed_state,
    )

    def grow(state, length):
        seed = state.seed
        if sampling is None:  # Unused, made anew (see the shrinking loops below).
            seed = ops.zeros(ops.shape(seed), keras.backend.standardize_dtype(seed.dtype))
        return state._replace(cache=grow_cache(state.cache, length), seed=seed)

    shrinks = select_sources is not None and sampling is None
    sizes = _shrinking_sizes(batch_size, shrink_by if shrinks else None)
    if len(sizes) == 1:
        state = _grown_search(
            state,
            lengths,
            grow,
            functools.partial(search, max_lengths=max_lengths, prefix=prefix, next_rows=None),
        )
        return state.sequences, state.scores

    # As in `beam_search`: a stopped row never changes, so the batch goes on with the rows
    # still searching (and some stopped ones) once few are left.
    sequences, scores = state.sequences, state.scores
    elements = ops.arange(batch_size, dtype="int32")  # The batch row of each row.
    for rows, next_rows in zip(sizes, [*sizes[1:], None], strict=True):
        state = _grown_search(
            state,
            lengths if rows == batch_size else lengths[-1:],
            grow,
            functools.partial(search, max_lengths=max_lengths, prefix=prefix, next_rows=next_rows),
        )
        sequences = ops.scatter_update(sequences, elements[:, None], state.sequences)
        scores = ops.scatter_update(scores, elements[:, None], state.scores)
        if next_rows is None:
            break
        searching = ops.logical_not(stopped(state.finished, state.index, max_lengths))
        keep = _searching_first(searching, rows, next_rows)

        def take(value, keep=keep):
            return ops.take(value, keep, axis=0)

        state = _GreedyState(
            index=state.index,
            tokens=take(state.tokens),
            cache=select_sources(state.cache, keep),
            sequences=take(state.sequences),
            scores=take(state.scores),
            finished=take(state.finished),
            # Unused (no sampling here), and made anew: TensorFlow's XLA bridge failed on one
            # constant carried by three loops ("Cannot find body function ..._const_0").
            seed=ops.zeros(
                ops.shape(state.seed), keras.backend.standardize_dtype(state.seed.dtype)
            ),
        )
        elements = take(elements)
        if max_lengths is not None:
            max_lengths = take(max_lengths)
        if prefix is not None:
            prefix = take(prefix)
    return sequences, scores


def beam_search(
    next_logits,
    cache,
    start_tokens,
    max_new_tokens,
    end_id,
    beam_size=4,
    alpha=0.6,
    pad_id=0,
    max_lengths=None,
    prefix=None,
    patience=None,
    select_sources=None,
    shrink_by=16,
    cache_lengths=None,
    grow_cache=None,
):
    """Batched beam search with the GNMT length penalty, as in the Transformer paper.

    Each batch element keeps two sets of `beam_size` hypotheses:

    - alive: not yet ended, ranked by log probability.
    - finished: ended with `end_id`, ranked by `log_prob / length_penalty(length, alpha)`,
      where `length` counts the generated tokens including the end token. A finished
      hypothesis is never extended and its score never changes.

    At every step each alive hypothesis is extended by every token and the `2 * beam_size`
    best extensions are kept (at most `beam_size` of them can end, one per alive
    hypothesis, so at least `beam_size` do not). Those among the best `beam_size` (the
    beam proper) that end join the finished set; the best `beam_size` that do not end stay
    alive. Letting only the beam proper finish (as fairseq does, where tensor2tensor and
    flax also finish lower-ranked extensions) makes `beam_size=1, alpha=0` exactly
    `greedy_search`.

    A batch element stops (its hypotheses stay as they are) after `max_new_tokens` steps, or
    earlier:

    - `patience=None` (exact): once all `beam_size` finished slots are filled and even the
      best alive hypothesis, given the most favourable length penalty (that of
      `max_new_tokens`), cannot beat the worst finished score. Log probabilities only
      decrease as a hypothesis grows, so that bound is safe: the result is the search's
      without any stop.
    - `patience=p` (`p >= 1`): once `round(p * beam_size)` hypotheses have ended (in the beam
      proper), as fairseq and CTranslate2 stop (CTranslate2's `patience`); the best
      `beam_size` of them are the result, alive hypotheses are dropped. Longer hypotheses that could still have
      won are not searched: on the Bible test verses `patience=2` took half the steps of the
      exact stop, gave the same BLEU and changed 6 % of the outputs.

    The loop stops once every element has.

    Hypotheses still alive at the end were cut short by `max_new_tokens`; they compete with the
    finished ones, scored the same way with `length = max_new_tokens`. A batch element with no
    finished hypothesis thus returns its alive beams (as in flax), and one with fewer than
    `beam_size` finished hypotheses fills its other slots with alive ones.

    The cache is expanded to `batch * beam_size` rows (each example repeated `beam_size`
    times, row `b * beam_size + k` is beam `k` of example `b`) and its rows are gathered
    along axis 0 whenever the alive beams are reselected, so every row always belongs to the
    hypothesis it decodes. A `BeamCache` has only its `hypotheses` part repeated and gathered.

    Args:
        next_logits: callable `(tokens, cache, index) -> (logits, new_cache)`, see the module
            docstring. Called once per step with `batch * beam_size` rows.
        cache: pytree of tensors, each with the batch on axis 0, as for one beam. May be empty.
        start_tokens: int tensor `(batch,)`. The token at position 0.
        max_new_tokens: int `>= 1`. Most tokens to generate, the end token included.
        end_id: int. End-of-sequence token id.
        beam_size: int `>= 1`. Hypotheses kept per batch element. Defaults to 4.
        alpha: float `>= 0`. Length penalty strength, see `length_penalty`. Defaults to 0.6.
        pad_id: int. Written after the end token. Defaults to 0.
        max_lengths: optional int tensor `(batch,)`, each in `1 .. max_new_tokens` (not
            checked here): the most tokens of each batch element's hypotheses. An element
            stops changing after its `max_lengths[b]` steps and equals its search alone with
            `max_new_tokens=max_lengths[b]`, padded: a batch may mix sources whose maximum
            output lengths differ. Defaults to `None`: `max_new_tokens` for all.
        prefix: optional int tensor `(batch, prefix_length)`, as in `greedy_search`: every
            hypothesis of a row starts with its prefix (forced, its log probability counted),
            and the search goes on from there. Defaults to `None`.
        patience: optional number `>= 1`: stop a batch element once `round(patience *
            beam_size)` hypotheses have ended (see above). Defaults to `None`: the exact stop.
        select_sources: optional callable `(cache, sources) -> cache`: the cache of the batch
            elements `sources` (int32 `(k,)`, distinct), all their beams, in that order
            (`select_rows` does it for a plain cache). With it the batch shrinks as it
            finishes: once at most `batch / shrink_by` elements are still searching, the search
            keeps the results of the others and goes on with a batch `shrink_by` times
            smaller (static shapes: one more loop per size, down to one element), so a batch
            does not pay full steps for its one long output. The results are those of the
            whole batch (a finished element's never change). `next_logits` must then keep
            everything that depends on the batch in the cache. Needs a batch size known when
            tracing. Defaults to `None`: the whole batch to the end.
        shrink_by: int `>= 2`, or `None` (do not shrink). Defaults to `16`: one more loop for
            a batch of 16 to 255 elements (on the 300 Bible test verses, batches of 64 and
            patience 2: 34 % less CPU than not shrinking, a first call of 11.2 s instead of
            9.3 on TensorFlow; 4 saved a few % more and took 20 s).
        cache_lengths: optional increasing ints, each `>= 1` and below `max_new_tokens`, with
            `grow_cache`: a cache that grows as the search writes it. `cache` holds
            `cache_lengths[0]` positions; the search runs while the step index is below it,
            then has `grow_cache` make it `cache_lengths[1]` positions long (then
            `max_new_tokens`) and goes on (static shapes: one more loop per length; a
            shrinking search's smaller batches run at `max_new_tokens`). `next_logits` must
            read the number of positions from the cache it is given. The results are those
            of a cache of `max_new_tokens` positions from the start. Defaults to `None`.
        grow_cache: callable `(cache, length) -> cache`, with `cache_lengths`: the cache
            (of the whole batch, all beams) with room for `length` positions, those written
            kept.

    Returns:
        A tuple `(sequences, scores)`, best first:

        - `sequences`: int32 `(batch, beam_size, max_new_tokens)`, without the start token, the
          end token included, `pad_id` after it.
        - `scores`: float32 `(batch, beam_size)`, log probability divided by the length
          penalty.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> # Bigram "model". Greedy takes 3 (p=0.5) and then must go on with p <= 0.3;
    >>> # beam search finds 4 -> end with p = 0.4 * 0.9.
    >>> table = ops.convert_to_tensor(np.log(np.array([
    ...     [0.2, 0.2, 0.2, 0.2, 0.2],      # after 0 (pad)
    ...     [0.2, 0.2, 0.2, 0.2, 0.2],      # after 1 (end)
    ...     [0.05, 0.04, 0.01, 0.5, 0.4],   # after 2 (start)
    ...     [0.2, 0.2, 0.3, 0.1, 0.2],      # after 3
    ...     [0.025, 0.9, 0.025, 0.025, 0.025],  # after 4
    ... ], "float32")))
    >>> def next_logits(tokens, cache, index):
    ...     return ops.take(table, tokens[:, 0], axis=0), cache
    >>> sequences, scores = beam_search(
    ...     next_logits, {}, ops.array([2], "int32"), max_new_tokens=3, end_id=1,
    ...     beam_size=2, alpha=0.0)
    >>> ops.convert_to_numpy(sequences)[0, 0].tolist()
    [4, 1, 0]

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1.
        - [Wu et al., 2016](https://arxiv.org/abs/1609.08144), section 7 (length penalty).
    """
    _check_max_new_tokens(max_new_tokens)
    check_int("beam_size", beam_size, minimum=1)
    check_alpha(alpha)
    end_id = _check_token_id(end_id, "end_id")
    pad_id = _check_token_id(pad_id, "pad_id")
    start_tokens = _check_start_tokens(start_tokens)
    if max_lengths is not None:
        max_lengths = ops.cast(max_lengths, "int32")
    prefix = _check_prefix(prefix, max_new_tokens)
    if shrink_by is not None:
        check_int("shrink_by", shrink_by, minimum=2)
    lengths = _check_cache_lengths(cache_lengths, grow_cache, max_new_tokens)
    ended_needed = _ended_needed(patience, beam_size)

    batch_size = ops.shape(start_tokens)[0]
    positions = ops.arange(max_new_tokens, dtype="int32")[None, None, :]  # (1, 1, max_new_tokens)
    best_possible_penalty = length_penalty(max_new_tokens, alpha)
    beam_ids = ops.arange(beam_size, dtype="int32")[None, :]  # (1, beam)

    def element_done(state, max_lengths):
        """Whether each batch element has stopped (bool `(batch,)`): by its `patience`, or
        (exact) all `beam_size` finished slots filled and even the best alive hypothesis,
        given the most favourable length penalty, below the worst finished score; or at its
        own most tokens."""
        if patience is not None:
            done = ops.greater_equal(state.ended, ended_needed)
        else:
            best_alive = ops.max(state.alive_log_probs, axis=1) / best_possible_penalty  # (batch,)
            worst_finished = ops.min(state.finished_scores, axis=1)  # (batch,)
            done = ops.logical_and(
                ops.all(state.finished_flags, axis=1), worst_finished >= best_alive
            )
        if max_lengths is not None:
            done = ops.logical_or(done, ops.greater_equal(state.index, max_lengths))
        return done

    def search(state, length, max_lengths, prefix, rows, next_rows):
        """Runs the loop on a batch of `rows` elements until every element is done, or
        (`next_rows`) until at most `next_rows` of them are still searching, or the step
        index reaches `length` (the positions of the cache)."""
        # Row offset of each example in the flattened (batch * beam_size) cache.
        row_offsets = ops.arange(rows, dtype="int32")[:, None] * beam_size  # (batch, 1)

        def condition(state):
            return _go_on(state.index, element_done(state, max_lengths), length, next_rows)

        def body(state):
            done = element_done(state, max_lengths)
            return _beam_step(
                state,
                next_logits,
                prefix,
                done,
                row_offsets,
                beam_ids,
                positions,
                beam_size,
                alpha,
                end_id,
            )

        return _while_loop(condition, body, state)

    def final(state, max_lengths):
        # Hypotheses still alive were cut short by max_new_tokens (or, after an early stop,
        # cannot beat any finished one): they compete with the finished ones, scored with
        # their `index` tokens (their own most, if less). Finished ones come first in the
        # concatenation, so they win ties.
        if max_lengths is None:
            penalty = length_penalty(state.index, alpha)
        else:
            penalty = length_penalty(ops.minimum(state.index, max_lengths), alpha)[:, None]
        alive_scores = state.alive_log_probs / penalty
        if patience is not None:  # Stopped by patience: its ended hypotheses only.
            stopped = ops.greater_equal(state.ended, ended_needed)[:, None]
            alive_scores = ops.where(stopped, _INVALID_LOG_PROB, alive_scores)
        scores, picked = ops.top_k(
            ops.concatenate([state.finished_scores, alive_scores], axis=1), beam_size
        )
        sequences = _gather_beams(
            ops.concatenate([state.finished_sequences, state.alive_sequences], axis=1),
            ops.cast(picked, "int32"),
        )
        return sequences, scores

    # Only beam 0 is a real hypothesis at the start; the others are copies that must not
    # produce duplicate extensions, so they start with an invalid log probability.
    first_beam = beam_ids == 0
    empty_sequences = ops.full((batch_size, beam_size, max_new_tokens), pad_id, dtype="int32")
    state = _BeamState(
        index=ops.convert_to_tensor(0, "int32"),
        alive_tokens=ops.repeat(start_tokens[:, None], beam_size, axis=1),  # (batch, beam)
        alive_sequences=empty_sequences,
        alive_log_probs=ops.where(
            first_beam,
            ops.zeros((batch_size, beam_size), "float32"),
            ops.full((batch_size, beam_size), _INVALID_LOG_PROB, "float32"),
        ),
        cache=_repeat_rows(cache, beam_size),
        finished_sequences=empty_sequences,
        finished_scores=ops.full((batch_size, beam_size), _INVALID_LOG_PROB, "float32"),
        finished_flags=ops.zeros((batch_size, beam_size), "bool"),
        ended=ops.zeros((batch_size,), "int32"),
    )
    sizes = _shrinking_sizes(batch_size, shrink_by if select_sources is not None else None)
    if len(sizes) == 1:
        state = _grown_search(
            state,
            lengths,
            _grow_state(grow_cache),
            functools.partial(
                search, max_lengths=max_lengths, prefix=prefix, rows=batch_size, next_rows=None
            ),
        )
        return final(state, max_lengths)

    # A batch that shrinks: once at most `sizes[i + 1]` of its elements are still searching,
    # the results so far are kept and the search goes on with those elements only (and some
    # done ones, which stay as they are: a done element's result never changes).
    sequences = empty_sequences
    scores = ops.zeros((batch_size, beam_size), "float32")
    elements = ops.arange(batch_size, dtype="int32")  # The batch element of each row.
    for rows, next_rows in zip(sizes, [*sizes[1:], None], strict=True):
        # The whole batch through every cache length; the smaller ones at the last.
        state = _grown_search(
            state,
            lengths if rows == batch_size else lengths[-1:],
            _grow_state(grow_cache),
            functools.partial(
                search, max_lengths=max_lengths, prefix=prefix, rows=rows, next_rows=next_rows
            ),
        )
        found_sequences, found_scores = final(state, max_lengths)
        sequences = ops.scatter_update(sequences, elements[:, None], found_sequences)
        scores = ops.scatter_update(scores, elements[:, None], found_scores)
        if next_rows is None:
            break
        searching = ops.logical_not(element_done(state, max_lengths))
        keep = _searching_first(searching, rows, next_rows)
        state = _select_elements(state, keep, beam_size, select_sources)
        elements = ops.take(elements, keep, axis=0)
        if max_lengths is not None:
            max_lengths = ops.take(max_lengths, keep, axis=0)
        if prefix is not None:
            prefix = ops.take(prefix, keep, axis=0)
    return sequences, scores


def _beam_step(
    state, next_logits, prefix, done, row_offsets, beam_ids, positions, beam_size, alpha, end_id
):
    """One step of `beam_search`'s loop (`state` -> the next `_BeamState`); the batch
    elements `done` (bool `(batch,)`) keep their hypotheses as they are."""
    num_candidates = 2 * beam_size
    index = state.index
    logits, cache = next_logits(ops.reshape(state.alive_tokens, (-1, 1)), state.cache, index)
    logits = ops.cast(logits, "float32")  # (batch * beam, vocab)
    # The 2 * beam_size best one-token extensions of the alive hypotheses. Log-softmax
    # subtracts one number per row, so the best extensions of a beam are its best logits,
    # and the best of an example are among the 2 * beam_size best of each of its beams:
    # two small top-k (the second over beam * 2 * beam) instead of one over
    # beam * vocabulary, and log probabilities for the survivors only. Ties keep the
    # order of one top-k over beam * vocabulary (lower beam, then lower token, first).
    per_beam = min(num_candidates, ops.shape(logits)[-1])
    if prefix is None:
        top_logits, top_tokens = top_k_by_blocks(logits, per_beam)  # (batch * beam, per_beam)
        # The best logits of a row hold its maximum: no second pass over the row for it (a
        # maximum of the k, not `top_logits[:, :1]`: XLA's CPU compiler turns a `top_k`
        # whose values are also sliced elsewhere into a sort of the whole row).
        row_max = ops.max(top_logits, axis=-1, keepdims=True)
        top_log_probs = _log_softmax_of(top_logits, logits, row_max=row_max)
    else:
        # A row inside its prefix has one extension, the forced token: the others drop
        # to a forbidden log probability (below any invalid hypothesis).
        forced, forced_tokens = _forced(prefix, index)  # (batch,)
        forced = ops.repeat(forced, beam_size, axis=0)[:, None]  # (batch * beam, 1)
        forced_tokens = ops.repeat(forced_tokens, beam_size, axis=0)[:, None]
        vocabulary = ops.arange(ops.shape(logits)[-1], dtype="int32")[None, :]
        barred = ops.logical_and(forced, ops.not_equal(vocabulary, forced_tokens))
        top_logits, top_tokens = top_k_by_blocks(
            ops.where(barred, _FORBIDDEN_LOG_PROB, logits), per_beam
        )
        top_barred = ops.take_along_axis(barred, ops.cast(top_tokens, "int32"), axis=1)
        top_log_probs = ops.where(
            top_barred, _FORBIDDEN_LOG_PROB, _log_softmax_of(top_logits, logits)
        )
    top_log_probs = ops.reshape(top_log_probs, (-1, beam_size, per_beam))
    # (batch, beam, per_beam)
    candidate_log_probs = state.alive_log_probs[:, :, None] + top_log_probs
    candidate_log_probs = ops.reshape(candidate_log_probs, (-1, beam_size * per_beam))
    candidate_log_probs, flat_indices = ops.top_k(candidate_log_probs, num_candidates)
    flat_indices = ops.cast(flat_indices, "int32")  # (batch, 2 * beam)
    candidate_beams = flat_indices // per_beam
    candidate_tokens = ops.take_along_axis(
        ops.reshape(ops.cast(top_tokens, "int32"), (-1, beam_size * per_beam)),
        flat_indices,
        axis=1,
    )
    candidate_sequences = _gather_beams(state.alive_sequences, candidate_beams)
    candidate_sequences = ops.where(
        positions == index, candidate_tokens[:, :, None], candidate_sequences
    )  # (batch, 2 * beam, max_new_tokens)
    ends = ops.equal(candidate_tokens, end_id)

    # Alive: the best beam_size candidates that did not end.
    alive_log_probs, picked = ops.top_k(
        ops.where(ends, _FORBIDDEN_LOG_PROB, candidate_log_probs), beam_size
    )
    picked = ops.cast(picked, "int32")  # (batch, beam)
    alive_sequences = _gather_beams(candidate_sequences, picked)
    alive_tokens = ops.take_along_axis(candidate_tokens, picked, axis=1)
    source_beams = ops.take_along_axis(candidate_beams, picked, axis=1)
    # A done element (stopped, or at its most tokens) keeps its hypotheses as they are: its
    # result is then its own, whatever its neighbours (and whenever a shrinking search
    # takes it out of the batch).
    closed = done[:, None]  # (batch, 1)
    alive_log_probs = ops.where(closed, state.alive_log_probs, alive_log_probs)
    alive_sequences = ops.where(closed[:, :, None], state.alive_sequences, alive_sequences)
    alive_tokens = ops.where(closed, state.alive_tokens, alive_tokens)
    source_beams = ops.where(closed, beam_ids, source_beams)
    source_rows = ops.reshape(source_beams + row_offsets, (-1,))  # (batch * beam,)
    cache = _reorder(cache, source_rows)

    # Finished: the candidates that ended among the beam_size best of this step (the
    # beam proper; extensions of real hypotheses only) join the finished set, which
    # keeps its beam_size best by penalised score.
    in_beam = ops.arange(num_candidates, dtype="int32")[None, :] < beam_size
    newly_finished = ops.logical_and(
        ops.logical_and(ends, in_beam), candidate_log_probs > 0.5 * _INVALID_LOG_PROB
    )
    new_scores = ops.where(
        newly_finished,
        candidate_log_probs / length_penalty(index + 1, alpha),
        _INVALID_LOG_PROB,
    )
    finished_scores, picked = ops.top_k(
        ops.concatenate([state.finished_scores, new_scores], axis=1), beam_size
    )
    picked = ops.cast(picked, "int32")
    finished_sequences = _gather_beams(
        ops.concatenate([state.finished_sequences, candidate_sequences], axis=1), picked
    )
    finished_flags = ops.take_along_axis(
        ops.concatenate([state.finished_flags, newly_finished], axis=1), picked, axis=1
    )
    finished_scores = ops.where(closed, state.finished_scores, finished_scores)
    finished_sequences = ops.where(closed[:, :, None], state.finished_sequences, finished_sequences)
    finished_flags = ops.where(closed, state.finished_flags, finished_flags)
    ended = state.ended + ops.where(done, 0, ops.sum(ops.cast(newly_finished, "int32"), axis=1))
    return _BeamState(
        index=index + 1,
        alive_tokens=alive_tokens,
        alive_sequences=alive_sequences,
        alive_log_probs=alive_log_probs,
        cache=cache,
        finished_sequences=finished_sequences,
        finished_scores=finished_scores,
        finished_flags=finished_flags,
        ended=ended,
    )


def check_patience(patience):
    """`patience` (beam search's, see `beam_search`) checked: `None`, or a finite number
    `>= 1` returned as a float (below 1, a search would stop with fewer ended hypotheses than
    the `beam_size` it returns); a `ValueError` names a bad value."""
    if patience is None:
        return None
    if (
        isinstance(patience, bool)
        or not isinstance(patience, (int, float))
        or not 1 <= patience < float("inf")
    ):
        raise ValueError(
            f"`patience` must be a finite number >= 1, or None (the exact stop). "
            f"Received: patience={patience!r}"
        )
    return float(patience)


def _ended_needed(patience, beam_size):
    """The number of ended hypotheses that stops a batch element (`None`: no such number)."""
    patience = check_patience(patience)
    return None if patience is None else round(patience * beam_size)


def _go_on(index, done, length, next_rows):
    """Whether a search loop goes on: below `length` (`max_new_tokens`, or the positions of
    a growing cache) and some row not `done` (bool `(rows,)`), and, in a loop that hands over
    to a smaller batch, more than `next_rows` rows still searching."""
    go_on = ops.logical_and(ops.less(index, length), ops.logical_not(ops.all(done)))
    if next_rows is None:
        return go_on
    searching = ops.sum(ops.cast(ops.logical_not(done), "int32"))
    return ops.logical_and(go_on, ops.greater(searching, next_rows))


def _searching_first(searching, rows, next_rows):
    """The `next_rows` rows a shrinking search goes on with (int32 `(next_rows,)`): those
    still `searching` (bool `(rows,)`) first, then the lowest others."""
    order = ops.where(searching, rows, 0) + (rows - 1 - ops.arange(rows, dtype="int32"))
    _, keep = ops.top_k(ops.cast(order, "float32"), next_rows)
    return ops.cast(keep, "int32")


def _shrinking_sizes(batch_size, shrink_by):
    """The batch sizes a shrinking search goes through: `batch_size`, then each
    `shrink_by` times smaller down to 1 (`[batch_size]` when it does not shrink or the size is
    not known)."""
    if shrink_by is None or not isinstance(batch_size, int):
        return [batch_size]
    sizes = [batch_size]
    while sizes[-1] // shrink_by >= 1:
        sizes.append(sizes[-1] // shrink_by)
    return sizes


def _check_cache_lengths(cache_lengths, grow_cache, max_new_tokens):
    """The lengths a search's cache goes through, `max_new_tokens` last (`cache_lengths`
    and `grow_cache` checked: both or neither)."""
    if cache_lengths is None and grow_cache is None:
        return [max_new_tokens]
    if cache_lengths is None or grow_cache is None:
        raise ValueError(
            "`cache_lengths` and `grow_cache` go together. Received: "
            f"cache_lengths={cache_lengths!r}, grow_cache={grow_cache!r}"
        )
    lengths = list(cache_lengths)
    if any(isinstance(length, bool) or not isinstance(length, int) for length in lengths) or any(
        not 1 <= first < second for first, second in zip(lengths, [*lengths[1:], max_new_tokens])
    ):
        raise ValueError(
            "`cache_lengths` must be increasing ints >= 1, below `max_new_tokens` "
            f"({max_new_tokens}). Received: cache_lengths={cache_lengths!r}"
        )
    return [*lengths, max_new_tokens]


def _grown_search(state, lengths, grow, search):
    """`search(state, length)` run for each of `lengths` in turn, the state's cache grown
    by `grow(state, length)` between them (a loop stopped for another reason ends the next
    ones at once)."""
    for number, length in enumerate(lengths):
        if number:
            state = grow(state, length)
        state = search(state, length)
    return state


def _grow_state(grow_cache):
    """`_grown_search`'s `grow` for a loop state whose `cache` `grow_cache` grows."""

    def grow(state, length):
        return state._replace(cache=grow_cache(state.cache, length))

    return grow


def select_rows(tree, sources, beam_size):
    """`beam_search`'s `select_sources` for a plain cache: `tree` (every leaf with
    `batch * beam_size` rows on axis 0, beam `k` of element `b` at row `b * beam_size + k`)
    with the rows of the elements `sources` (int32 `(k,)`), all their beams."""
    rows = ops.reshape(
        sources[:, None] * beam_size + ops.arange(beam_size, dtype="int32")[None, :], (-1,)
    )
    return keras.tree.map_structure(lambda leaf: ops.take(leaf, rows, axis=0), tree)


def _select_elements(state, elements, beam_size, select_sources):
    """The `_BeamState` of the batch elements `elements` (int32 `(k,)`)."""

    def take(value):
        return ops.take(value, elements, axis=0)

    return _BeamState(
        index=state.index,
        alive_tokens=take(state.alive_tokens),
        alive_sequences=take(state.alive_sequences),
        alive_log_probs=take(state.alive_log_probs),
        cache=select_sources(state.cache, elements),
        finished_sequences=take(state.finished_sequences),
        finished_scores=take(state.finished_scores),
        finished_flags=take(state.finished_flags),
        ended=take(state.ended),
    )


def _forced(prefix, index):
    """`(forced (batch,) bool, tokens (batch,) int32)`: whether each row's token at step
    `index` is forced by its prefix, and which (`prefix`: int32 `(batch, prefix_length)`,
    `-1` past each row's prefix)."""
    width = ops.shape(prefix)[1]
    tokens = ops.take(prefix, ops.minimum(index, width - 1), axis=1)  # (batch,)
    forced = ops.logical_and(ops.less(index, width), ops.greater_equal(tokens, 0))
    return forced, ops.maximum(tokens, 0)


def _sample(logits, sampling, generator, seed):
    """One token per row drawn from `logits` as `sampling` says, and the next seed state.

    The draw is `keras.random.categorical` with `generator`, whose state is `seed` inside a
    `keras.StatelessScope` (only around the draw: on JAX the model's variables are mapped by
    an outer scope): the state is a tensor carried by the loop, not a variable updated in it.
    """
    logits = logits / ops.cast(sampling.temperature, "float32")  # (batch, vocab)
    vocabulary_size = ops.shape(logits)[-1]
    if _is_tensor(sampling.top_k) or _is_tensor(sampling.top_p):
        logits, candidates = _cut_at_run_time(logits, sampling.top_k, sampling.top_p)
        return _draw(logits, candidates, generator, seed)
    top_k = sampling.top_k if 0 < sampling.top_k < vocabulary_size else 0
    candidates = None  # the token of each column of `logits`, when not the identity
    if top_k or sampling.top_p < 1.0:
        logits, candidates = ops.top_k(logits, top_k or vocabulary_size)  # sorted, best first
        candidates = ops.cast(candidates, "int32")
    if sampling.top_p < 1.0:
        probabilities = ops.softmax(logits, axis=-1)
        before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass of better tokens
        # The first token is always kept (`before` is 0 there).
        logits = ops.where(before < sampling.top_p, logits, _FORBIDDEN_LOG_PROB)
    return _draw(logits, candidates, generator, seed)


def _cut_at_run_time(logits, top_k, top_p):
    """`(logits, candidates)`: the whole vocabulary sorted, best first, the columns past
    `top_k` (`0`, or the vocabulary size or more: none) and past the nucleus `top_p` at
    `_FORBIDDEN_LOG_PROB`; `top_k`/`top_p` scalar tensors (or Python numbers)."""
    vocabulary_size = ops.shape(logits)[-1]
    logits, candidates = ops.top_k(logits, vocabulary_size)  # sorted, best first
    columns = ops.arange(vocabulary_size, dtype="int32")[None, :]
    top_k = ops.cast(top_k, "int32")
    top_k = ops.where(ops.greater(top_k, 0), ops.minimum(top_k, vocabulary_size), vocabulary_size)
    logits = ops.where(columns < top_k, logits, _FORBIDDEN_LOG_PROB)
    probabilities = ops.softmax(logits, axis=-1)
    before = ops.cumsum(probabilities, axis=-1) - probabilities  # mass of better tokens
    # The first token is always kept (`before` is 0 there).
    logits = ops.where(before < ops.cast(top_p, "float32"), logits, _FORBIDDEN_LOG_PROB)
    return logits, ops.cast(candidates, "int32")


def _draw(logits, candidates, generator, seed):
    """One token per row drawn from `logits` (column `j` is token `candidates[:, j]`, or
    token `j` when `candidates` is `None`), and the next seed state."""
    with keras.StatelessScope(state_mapping=[(generator.state, seed)]) as scope:
        drawn = keras.random.categorical(logits, 1, seed=generator, dtype="int32")[:, 0]
        seed = scope.get_current_value(generator.state)
    if candidates is not None:
        drawn = ops.take_along_axis(candidates, drawn[:, None], axis=1)[:, 0]
    return ops.cast(drawn, "int32"), seed


def _is_tensor(value):
    """A backend tensor (or NumPy array), not a Python number."""
    return not isinstance(value, (bool, int, float))


def _check_prefix(prefix, max_new_tokens):
    if prefix is None:
        return None
    prefix = ops.cast(ops.convert_to_tensor(prefix), "int32")
    if len(prefix.shape) != 2 or (prefix.shape[1] is not None and prefix.shape[1] > max_new_tokens):
        raise ValueError(
            "`prefix` must have shape (batch, prefix_length) with prefix_length <= "
            f"max_new_tokens={max_new_tokens}. Received: prefix.shape={tuple(prefix.shape)}"
        )
    if prefix.shape[1] == 0:
        return None
    return prefix


def _check_seed(seed, sampling):
    """`(generator, state)` of a `seed` argument; a placeholder state without sampling."""
    if sampling is None:
        return None, ops.zeros((2,), "int32")
    if isinstance(seed, (tuple, list)) and len(seed) == 2:
        generator, state = seed
    else:
        generator, state = seed, None
    if not isinstance(generator, keras.random.SeedGenerator):
        raise ValueError(
            "Sampling needs `seed`: a `keras.random.SeedGenerator`, or a pair "
            f"(generator, state). Received: seed={seed!r}"
        )
    if state is None:
        state = generator.state.value
    return generator, ops.cast(state, generator.state.dtype)


def _repeat_rows(cache, beam_size):
    """`cache` with each row repeated `beam_size` times (of `hypotheses` only for a
    `BeamCache`: its `slots` already hold every hypothesis)."""

    def repeat(tree):
        return keras.tree.map_structure(lambda leaf: ops.repeat(leaf, beam_size, axis=0), tree)

    if isinstance(cache, BeamCache):
        return cache._replace(hypotheses=repeat(cache.hypotheses))
    return repeat(cache)


def _reorder(cache, rows):
    """`cache` with the rows `rows` of each leaf (of `hypotheses` only for a `BeamCache`)."""

    def take(tree):
        return keras.tree.map_structure(lambda leaf: ops.take(leaf, rows, axis=0), tree)

    if isinstance(cache, BeamCache):
        return cache._replace(hypotheses=take(cache.hypotheses))
    return take(cache)


def _log_softmax_of(selected_logits, logits, row_max=None):
    """`log_softmax(logits)` at `selected_logits` (some of each row's logits): the same
    formula as `ops.log_softmax` (`(x - max) - log(sum(exp(logits - max)))`), without
    writing the whole `(rows, vocabulary)` result.

    Args:
        selected_logits: float32 `(rows, k)`, logits taken from each row of `logits`.
        logits: float32 `(rows, vocabulary)`.
        row_max: float32 `(rows, 1)`, each row's maximum when the caller has it.

    Returns:
        float32 `(rows, k)` log probabilities.
    """
    if row_max is None:
        row_max = ops.max(logits, axis=-1, keepdims=True)  # (rows, 1)
    row_max = ops.stop_gradient(row_max)
    log_sum = ops.log(ops.sum(ops.exp(logits - row_max), axis=-1, keepdims=True))
    return (selected_logits - row_max) - log_sum


# `top_k_by_blocks` takes the blocks' way for rows of at least this many values (below, one
# `top_k` of the whole row costs little).
TOP_K_BY_BLOCKS_FROM = 1024


def top_k_by_blocks(values, k, block=None):
    """`keras.ops.top_k(values, k)` of float `(rows, n)`: the same values and the same int32
    indices, ties included (the lower index first), taken by blocks where XLA compiles it.

    XLA's CPU `TopK` visits every value of a row (about 3.5 ms for 256 rows of 7,603 logits,
    k = 8, on one core). Here: the maximum of each block of `block` values (one fast
    reduction), the `k` blocks with the largest maxima, and one `top_k` over their
    `k * block` values and the last `n % block` (the tail, kept whole): the `k` largest
    values lie in those blocks, since a block holding one of them has a maximum at least as
    large as the k-th largest value, and at most `k` blocks can have that. The blocks are
    taken in their order, so ties resolve as one `top_k` resolves them.

    Used on JAX and inside TensorFlow's XLA functions for rows of `TOP_K_BY_BLOCKS_FROM`
    values or more (or any `block` given) with at least `2 * k` blocks; elsewhere (PyTorch's
    `topk` is fast; eager TensorFlow) it is `ops.top_k`. In a beam step of the `make bible`
    translator (256 rows of 7,603 logits, k = 8, JAX): 0.8 ms instead of 3.8
    (docs/benchmarks.md).

    Args:
        values: float `(rows, n)`.
        k: int `<= n`.
        block: int, or `None`: about `sqrt(n / k)` for rows of `TOP_K_BY_BLOCKS_FROM`
            values or more, else one `top_k`.

    Returns:
        `(top_values, indices)`: `(rows, k)`, largest first; int32 indices into `n`.
    """
    rows, n = _backend.dims(values)
    compiled = keras.backend.backend() == "jax" or _backend.in_xla_context()
    if block is None and isinstance(n, int) and n >= TOP_K_BY_BLOCKS_FROM:
        block = _top_k_block(n, k)
    blocks = n // block if isinstance(n, int) and block else 0
    if not compiled or blocks < 2 * k:
        top_values, indices = ops.top_k(values, k)
        return top_values, ops.cast(indices, "int32")
    body = ops.reshape(values[:, : blocks * block], (rows, blocks, block))
    _, best = ops.top_k(ops.max(body, axis=-1), k)
    best = ops.sort(ops.cast(best, "int32"), axis=-1)  # (rows, k), in the blocks' order
    picked_blocks = ops.take_along_axis(
        body, ops.broadcast_to(best[:, :, None], (rows, k, block)), axis=1
    )
    candidates = ops.reshape(picked_blocks, (rows, k * block))
    if n > blocks * block:
        candidates = ops.concatenate([candidates, values[:, blocks * block :]], axis=1)
    top_values, picked = ops.top_k(candidates, k)
    picked = ops.cast(picked, "int32")
    block_of = ops.take_along_axis(best, ops.minimum(picked // block, k - 1), axis=1)
    indices = ops.where(
        picked < k * block, block_of * block + picked % block, picked + (blocks - k) * block
    )
    return top_values, indices


def _top_k_block(n, k):
    """The block of `top_k_by_blocks` for rows of `n` values: about `sqrt(n / k)` (a power of
    two), the size that makes the two `top_k` (over `n / block` maxima, then over
    `k * block` values) smallest together."""
    return 2 ** max(3, round(math.log2(math.sqrt(n / k))))


def _gather_beams(sequences, beam_indices):
    """Picks `sequences[b, beam_indices[b, j], :]` → `(batch, num_picked, length)`."""
    length = ops.shape(sequences)[-1]
    indices = ops.broadcast_to(beam_indices[:, :, None], (*ops.shape(beam_indices), length))
    return ops.take_along_axis(sequences, indices, axis=1)


def _check_max_new_tokens(max_new_tokens):
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(
            f"`max_new_tokens` must be a Python int >= 1. Received: max_new_tokens={max_new_tokens!r}"
        )


def _check_token_id(token_id, name):
    # Accept numpy integers too, but hand plain ints to the graph.
    try:
        as_int = int(token_id)
    except (TypeError, ValueError):
        as_int = None
    if isinstance(token_id, bool) or as_int is None or as_int != token_id or as_int < 0:
        raise ValueError(f"`{name}` must be an int >= 0. Received: {name}={token_id!r}")
    return as_int


def _check_start_tokens(start_tokens):
    start_tokens = ops.convert_to_tensor(start_tokens)
    if len(start_tokens.shape) != 1:
        raise ValueError(
            "`start_tokens` must have shape (batch,). "
            f"Received: start_tokens.shape={tuple(start_tokens.shape)}"
        )
    return ops.cast(start_tokens, "int32")
