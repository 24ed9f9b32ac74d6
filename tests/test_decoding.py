"""Tests for `keras_transformer.decoding`: greedy and beam search over stub models.

Most tests use small hand-written probability tables, so the expected sequences and scores
can be worked out on paper (the working is in the comments). The others use a random
recurrent stub whose cache carries a hidden state, and check the searches against a NumPy
re-scoring of every returned hypothesis.
"""

import contextlib
import functools

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import decoding
from keras_transformer.decoding import (
    beam_search,
    greedy_search,
    length_penalty,
    select_rows,
    top_k_by_blocks,
)

PAD, END, START, A, B, C, D, E = range(8)
VOCAB_SIZE = 8
BACKEND = keras.backend.backend()


# --------------------------------------------------------------------------- helpers


def probability_row(probabilities):
    """Log-probability row: the given `{token: p}`, the rest shared by decreasing weights.

    The unnamed tokens get unequal shares so that no two candidates ever tie (backends
    break top-k ties differently).
    """
    row = np.zeros(VOCAB_SIZE)
    for token, probability in probabilities.items():
        row[token] = probability
    rest = [token for token in range(VOCAB_SIZE) if token not in probabilities]
    leftover = 1.0 - sum(probabilities.values())
    assert leftover > 0
    weights = np.array([1.0 / (rank + 2) for rank in range(len(rest))])
    row[rest] = leftover * weights / weights.sum()
    return np.log(row)


def bigram_table(rows):
    """`(VOCAB_SIZE, VOCAB_SIZE)` table of next-token logits indexed by the previous token.

    Rows not given are uniform-ish (`probability_row({})`).
    """
    table = np.stack([probability_row({}) for _ in range(VOCAB_SIZE)])
    for previous, probabilities in rows.items():
        table[previous] = probability_row(probabilities)
    return table.astype("float32")


def log_softmax(logits):
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def log_prob(table, start, sequence):
    """Sum of log probabilities of `sequence` under a bigram table (float64)."""
    total, previous = 0.0, start
    for token in sequence:
        total += log_softmax(table[previous])[token]
        previous = token
    return total


def penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


class CallCounter:
    """Bigram stub that counts its calls and threads a counter leaf through the cache.

    The counter leaf must equal `index` at every call: the cache returned by one call is the
    cache given to the next one, also after beams are reselected.
    """

    def __init__(self, table):
        self.table = table
        self.calls = 0

    def initial_cache(self, batch_size):
        return {"calls": ops.zeros((batch_size,), "int32")}

    def __call__(self, tokens, cache, index):
        self.calls += 1
        np.testing.assert_array_equal(ops.convert_to_numpy(cache["calls"]), int(index))
        logits = ops.take(ops.convert_to_tensor(self.table), tokens[:, 0], axis=0)
        return logits, {"calls": cache["calls"] + 1}


@contextlib.contextmanager
def python_loops():
    """Runs `ops.while_loop` as a Python loop, so a stub sees one call per step.

    TensorFlow (eager) and torch already do; JAX's `lax.while_loop` traces its body once
    unless jit is disabled.
    """
    if BACKEND == "jax":
        import jax

        with jax.disable_jit():
            yield
    else:
        yield


def bigram(table):
    table = ops.convert_to_tensor(table)

    def next_logits(tokens, cache, index):
        return ops.take(table, tokens[:, 0], axis=0), cache

    return next_logits


def starts(*tokens):
    return ops.convert_to_tensor(np.array(tokens, "int32"))


def to_numpy(*tensors):
    return [ops.convert_to_numpy(tensor) for tensor in tensors]


class RandomRecurrentStub:
    """A deterministic random recurrent "decoder" written with `keras.ops`.

    `state = tanh(state @ recurrent + embedding[token] + memory)`,
    `logits = state @ projection + bias`. The cache is the nested pytree
    `{"memory": (batch, hidden), "layers": [{"state": (batch, hidden)}], "steps": (counter,)}`,
    so the next-token distribution depends on the whole history through the cache, and the
    per-example `memory` stands in for an encoder output.
    """

    def __init__(self, seed, vocabulary_size=11, hidden_dim=8, end_bias=1.0):
        rng = np.random.default_rng(seed)
        self.vocabulary_size = vocabulary_size
        self.embedding = rng.normal(size=(vocabulary_size, hidden_dim)).astype("float32")
        self.recurrent = (0.6 * rng.normal(size=(hidden_dim, hidden_dim))).astype("float32")
        self.projection = (1.5 * rng.normal(size=(hidden_dim, vocabulary_size))).astype("float32")
        self.bias = np.zeros(vocabulary_size, "float32")
        self.bias[END] = end_bias
        self.hidden_dim = hidden_dim

    def memory(self, batch_size, seed):
        rng = np.random.default_rng(seed)
        return rng.normal(size=(batch_size, self.hidden_dim)).astype("float32")

    def initial_cache(self, memory):
        memory = ops.convert_to_tensor(memory)
        return {
            "memory": memory,
            "layers": [{"state": ops.zeros_like(memory)}],
            "steps": (ops.zeros((ops.shape(memory)[0],), "int32"),),
        }

    def __call__(self, tokens, cache, index):
        state = ops.tanh(
            ops.matmul(cache["layers"][0]["state"], ops.convert_to_tensor(self.recurrent))
            + ops.take(ops.convert_to_tensor(self.embedding), tokens[:, 0], axis=0)
            + cache["memory"]
        )
        logits = ops.matmul(state, ops.convert_to_tensor(self.projection)) + self.bias
        new_cache = {
            "memory": cache["memory"],
            "layers": [{"state": state}],
            "steps": (cache["steps"][0] + 1,),
        }
        return logits, new_cache

    def rescore(self, memory_row, start, sequence, pad_id=PAD):
        """NumPy teacher-forced log probability and length of one returned sequence.

        Also checks that everything after the first end token is padding.
        """
        state = np.zeros(self.hidden_dim)
        previous, total = start, 0.0
        for position, token in enumerate(sequence):
            state = np.tanh(state @ self.recurrent + self.embedding[previous] + memory_row)
            total += log_softmax(state @ self.projection + self.bias)[token]
            if token == END:
                assert all(t == pad_id for t in sequence[position + 1 :]), sequence
                return total, position + 1
            previous = token
        return total, len(sequence)


# --------------------------------------------------------------------------- length penalty


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_length_penalty_matches_gnmt_formula(alpha):
    lengths = np.array([1, 2, 5, 10, 50], "int32")
    values = ops.convert_to_numpy(length_penalty(ops.convert_to_tensor(lengths), alpha))
    np.testing.assert_allclose(values, ((5.0 + lengths) / 6.0) ** alpha, rtol=1e-6)
    # One generated token is never penalised; alpha=0 never penalises.
    assert float(length_penalty(1, alpha)) == 1.0
    if alpha == 0.0:
        np.testing.assert_array_equal(values, 1.0)


# --------------------------------------------------------------------------- greedy search

# After START: A (0.6) beats B (0.3). After A: C (0.5) beats END (0.4). After C: END (0.7).
# After B: END (0.8).
GREEDY_TABLE = bigram_table(
    {
        START: {A: 0.6, B: 0.3},
        A: {C: 0.5, END: 0.4},
        C: {END: 0.7},
        B: {END: 0.8},
    }
)


def test_greedy_picks_most_probable_tokens_and_pads_after_end():
    stub = CallCounter(GREEDY_TABLE)
    with python_loops():
        sequences, scores = greedy_search(
            stub, stub.initial_cache(2), starts(START, B), max_new_tokens=6, end_id=END
        )
    sequences, scores = to_numpy(sequences, scores)
    np.testing.assert_array_equal(
        sequences, [[A, C, END, PAD, PAD, PAD], [END, PAD, PAD, PAD, PAD, PAD]]
    )
    np.testing.assert_allclose(
        scores,
        [np.log(0.6) + np.log(0.5) + np.log(0.7), np.log(0.8)],
        rtol=1e-5,
    )
    # Every sequence has ended after 3 steps: the loop stops there, not at max_new_tokens.
    assert stub.calls == 3


def test_greedy_uses_pad_id_and_runs_to_max_new_tokens_without_end():
    # From D the chain is D -> E -> D -> E ... and never ends.
    table = bigram_table({START: {D: 0.9}, D: {E: 0.9}, E: {D: 0.9}, B: {END: 0.8}})
    sequences, scores = to_numpy(
        *greedy_search(bigram(table), {}, starts(START, B), max_new_tokens=4, end_id=END, pad_id=C)
    )
    np.testing.assert_array_equal(sequences, [[D, E, D, E], [END, C, C, C]])
    np.testing.assert_allclose(scores, [4 * np.log(0.9), np.log(0.8)], rtol=1e-5)


# --------------------------------------------------------------------------- beam search


def test_beam_search_escapes_the_greedy_trap():
    # Greedy takes A (0.5) over B (0.4), then C (0.35) and END (0.9): p = 0.1575.
    # Beam search keeps B and finds B END: p = 0.4 * 0.9 = 0.36.
    table = bigram_table(
        {
            START: {A: 0.5, B: 0.4},
            A: {C: 0.35, D: 0.3, E: 0.25},
            B: {END: 0.9},
            C: {END: 0.9},
            D: {END: 0.9},
            E: {END: 0.9},
        }
    )
    greedy_sequences, greedy_scores = to_numpy(
        *greedy_search(bigram(table), {}, starts(START), max_new_tokens=4, end_id=END)
    )
    np.testing.assert_array_equal(greedy_sequences, [[A, C, END, PAD]])
    np.testing.assert_allclose(greedy_scores, [np.log(0.5 * 0.35 * 0.9)], rtol=1e-5)

    sequences, scores = to_numpy(
        *beam_search(
            bigram(table), {}, starts(START), max_new_tokens=4, end_id=END, beam_size=2, alpha=0.0
        )
    )
    # Second best: A C END (0.1575) beats A D END (0.135).
    np.testing.assert_array_equal(sequences[0], [[B, END, PAD, PAD], [A, C, END, PAD]])
    np.testing.assert_allclose(scores[0], [np.log(0.4 * 0.9), np.log(0.5 * 0.35 * 0.9)], rtol=1e-5)
    assert scores[0, 0] > greedy_scores[0]


# short = A END:       p = 0.5 * 0.9,        log p = -0.799, length 2
# long  = B C D END:   p = 0.45 * 0.97 ** 3, log p = -0.890, length 4
# alpha = 0: short wins (-0.799 > -0.890).
# alpha = 1: long wins (-0.890 / (9 / 6) = -0.593 > -0.799 / (7 / 6) = -0.685).
SHORT_LONG_TABLE = bigram_table(
    {
        START: {A: 0.5, B: 0.45},
        A: {END: 0.9},
        B: {C: 0.97},
        C: {D: 0.97},
        D: {END: 0.97},
    }
)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_length_penalty_decides_between_short_and_long_hypotheses(alpha):
    sequences, scores = to_numpy(
        *beam_search(
            bigram(SHORT_LONG_TABLE),
            {},
            starts(START),
            max_new_tokens=5,
            end_id=END,
            beam_size=2,
            alpha=alpha,
        )
    )
    short, long = [A, END, PAD, PAD, PAD], [B, C, D, END, PAD]
    short_score = log_prob(SHORT_LONG_TABLE, START, short[:2]) / penalty(2, alpha)
    long_score = log_prob(SHORT_LONG_TABLE, START, long[:4]) / penalty(4, alpha)
    expected = [short, long] if alpha == 0.0 else [long, short]
    expected_scores = [short_score, long_score] if alpha == 0.0 else [long_score, short_score]
    np.testing.assert_array_equal(sequences[0], expected)
    np.testing.assert_allclose(scores[0], expected_scores, rtol=1e-5)


def test_finished_hypothesis_keeps_its_score_while_others_go_on():
    # A END finishes at step 1 with log p = log(0.5 * 0.9). B B B ... (0.3 * 0.95 ** 5) and
    # C C C ... (0.19 * 0.95 ** 5) never end, so the loop runs to max_new_tokens; they are
    # returned as cut-short hypotheses, scored with the penalty of max_new_tokens.
    table = bigram_table(
        {
            START: {A: 0.5, B: 0.3, C: 0.19},
            A: {END: 0.9},
            B: {B: 0.95},
            C: {C: 0.95},
        }
    )
    alpha, max_new_tokens = 0.6, 6
    sequences, scores = to_numpy(
        *beam_search(
            bigram(table),
            {},
            starts(START),
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=3,
            alpha=alpha,
        )
    )
    # B B B B B B and C C C C C C below show that the loop ran all max_new_tokens steps.
    expected = [[A, END, PAD, PAD, PAD, PAD], [B] * 6, [C] * 6]
    np.testing.assert_array_equal(sequences[0], expected)
    np.testing.assert_allclose(
        scores[0],
        [
            log_prob(table, START, [A, END]) / penalty(2, alpha),
            log_prob(table, START, [B] * 6) / penalty(6, alpha),
            log_prob(table, START, [C] * 6) / penalty(6, alpha),
        ],
        rtol=1e-6,
    )


def test_beam_search_stops_when_no_alive_hypothesis_can_win():
    # Step 0: END finishes (log 0.5). Step 1: A END finishes (log 0.4 * 0.99). Both slots are
    # full, and the best alive hypothesis (A then anything else, p <= 0.4 * 0.01, or a rare
    # first token, p <= 0.1) cannot beat -0.84 even with the length penalty of max_new_tokens.
    table = bigram_table({START: {END: 0.5, A: 0.4}, A: {END: 0.99}})
    stub = CallCounter(table)
    alpha = 0.6
    with python_loops():
        sequences, scores = beam_search(
            stub,
            stub.initial_cache(1),
            starts(START),
            max_new_tokens=10,
            end_id=END,
            beam_size=2,
            alpha=alpha,
        )
    sequences, scores = to_numpy(sequences, scores)
    assert stub.calls == 2
    np.testing.assert_array_equal(sequences[0, :, :3], [[END, PAD, PAD], [A, END, PAD]])
    np.testing.assert_array_equal(sequences[0, :, 3:], PAD)
    np.testing.assert_allclose(
        scores[0],
        [np.log(0.5), np.log(0.4 * 0.99) / penalty(2, alpha)],
        rtol=1e-5,
    )


class FirstTokenCopier:
    """Stub whose step-2 distribution depends on a cache leaf holding the first token.

    Step 0 (after START): A 0.55, B 0.4.
    Step 1 (after the first token): after A, C 0.35 / D 0.3 / E 0.25; after B, C 0.9.
      The alive beams swap: B C (0.36) now beats A C (0.1925).
    Step 2: repeat the first token (0.9), read from the cache.
    Step 3: END (0.9).
    If the cache rows were not reordered with the beams, B C would read A and vice versa.
    """

    def __init__(self):
        table = bigram_table({START: {A: 0.55, B: 0.4}, A: {C: 0.35, D: 0.3, E: 0.25}, B: {C: 0.9}})
        self.table = ops.convert_to_tensor(table)
        self.copy = ops.convert_to_tensor(
            np.stack([probability_row({token: 0.9}) for token in range(VOCAB_SIZE)]).astype(
                "float32"
            )
        )
        self.finish = ops.convert_to_tensor(probability_row({END: 0.9}).astype("float32"))

    def __call__(self, tokens, cache, index):
        tokens = tokens[:, 0]
        first = ops.where(index == 1, tokens, cache["first"])
        copy_logits = ops.take(self.copy, first, axis=0)  # (rows, vocab)
        finish_logits = ops.zeros_like(copy_logits) + self.finish[None, :]
        logits = ops.where(
            index < 2,
            ops.take(self.table, tokens, axis=0),
            ops.where(index == 2, copy_logits, finish_logits),
        )
        return logits, {"first": first}


def test_cache_rows_follow_their_beams():
    stub = FirstTokenCopier()
    sequences, scores = to_numpy(
        *beam_search(
            stub,
            {"first": ops.zeros((2,), "int32")},
            starts(START, START),
            max_new_tokens=4,
            end_id=END,
            beam_size=2,
            alpha=0.0,
        )
    )
    for example in range(2):
        np.testing.assert_array_equal(sequences[example], [[B, C, B, END], [A, C, A, END]])
        np.testing.assert_allclose(
            scores[example],
            np.log([0.4 * 0.9 * 0.9 * 0.9, 0.55 * 0.35 * 0.9 * 0.9]),
            rtol=1e-5,
        )


# --------------------------------------------------------------------------- random stubs


def random_problem(seed, batch_size=3):
    stub = RandomRecurrentStub(seed)
    memory = stub.memory(batch_size, seed=100 + seed)
    start_tokens = starts(*([START] * batch_size))
    return stub, memory, start_tokens


def test_every_beam_score_is_its_rescored_log_prob_over_its_length_penalty():
    # The stub's logits depend on the whole history through the cache, so a cache row that
    # did not follow its beam would give scores that disagree with teacher forcing.
    stub, memory, start_tokens = random_problem(seed=0, batch_size=4)
    alpha, max_new_tokens = 0.6, 7
    sequences, scores = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            start_tokens,
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=4,
            alpha=alpha,
        )
    )
    for example in range(len(memory)):
        distinct = {tuple(sequence) for sequence in sequences[example]}
        assert len(distinct) == 4
        for sequence, score in zip(sequences[example], scores[example], strict=True):
            total, length = stub.rescore(memory[example], START, list(sequence))
            np.testing.assert_allclose(score, total / penalty(length, alpha), rtol=1e-4)


def test_beam_size_one_is_greedy():
    stub, memory, start_tokens = random_problem(seed=1, batch_size=16)
    greedy = to_numpy(
        *greedy_search(stub, stub.initial_cache(memory), start_tokens, max_new_tokens=8, end_id=END)
    )
    beam = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            start_tokens,
            max_new_tokens=8,
            end_id=END,
            beam_size=1,
            alpha=0.0,
        )
    )
    np.testing.assert_array_equal(beam[0][:, 0], greedy[0])
    np.testing.assert_array_equal(beam[1][:, 0], greedy[1])


def reference_beam_search(stub, memory_row, start, max_new_tokens, beam_size, alpha, patience=None):
    """Plain-Python beam search over the NumPy version of the stub, one example at a time.

    Same rules as `beam_search`: keep the 2 * beam_size best extensions; the ones among the
    best beam_size that end are finished; the best beam_size others stay alive; stop early
    once beam_size hypotheses finished and no alive one can beat the worst of them (with
    `patience`: once `round(patience * beam_size)` hypotheses ended, returning the best
    finished ones only, as CTranslate2 does); alive hypotheses left at the end compete with
    the finished ones.
    """
    alive = [(0.0, [], np.zeros(stub.hidden_dim))]  # (log_prob, tokens, state)
    finished = []  # (score, tokens)
    ended = 0
    for step in range(max_new_tokens):
        candidates = []
        for total, tokens, state in alive:
            previous = tokens[-1] if tokens else start
            state = np.tanh(state @ stub.recurrent + stub.embedding[previous] + memory_row)
            log_probs = log_softmax(state @ stub.projection + stub.bias)
            for token in range(stub.vocabulary_size):
                candidates.append((total + log_probs[token], tokens + [token], state))
        candidates = sorted(candidates, key=lambda candidate: -candidate[0])[: 2 * beam_size]
        for total, tokens, _ in candidates[:beam_size]:
            if tokens[-1] == END:
                finished.append((total / penalty(step + 1, alpha), tokens))
                ended += 1
        finished = sorted(finished, key=lambda hypothesis: -hypothesis[0])[:beam_size]
        alive = [candidate for candidate in candidates if candidate[1][-1] != END][:beam_size]
        if patience is not None:
            if ended >= max(1, round(patience * beam_size)):
                alive = []
                break
            continue
        best_possible = alive[0][0] / penalty(max_new_tokens, alpha)
        if len(finished) == beam_size and finished[-1][0] >= best_possible:
            break
    finished += [(total / penalty(len(tokens), alpha), tokens) for total, tokens, _ in alive]
    best = sorted(finished, key=lambda hypothesis: -hypothesis[0])[:beam_size]
    sequences = [tokens + [PAD] * (max_new_tokens - len(tokens)) for _, tokens in best]
    return np.array(sequences), np.array([score for score, _ in best])


@pytest.mark.parametrize("seed", [1, 2])
def test_beam_search_matches_a_plain_python_reference(seed):
    stub, memory, start_tokens = random_problem(seed, batch_size=6)
    alpha, max_new_tokens, beam_size = 0.6, 8, 4
    sequences, scores = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            start_tokens,
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=beam_size,
            alpha=alpha,
        )
    )
    for example in range(len(memory)):
        expected_sequences, expected_scores = reference_beam_search(
            stub, memory[example], START, max_new_tokens, beam_size, alpha
        )
        np.testing.assert_array_equal(sequences[example], expected_sequences)
        np.testing.assert_allclose(scores[example], expected_scores, rtol=1e-4)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_each_row_keeps_its_own_max_length(beam_size):
    # Rows with different `max_lengths` in one batch each get exactly their search alone
    # with that `max_new_tokens` (padded): the Translator batches sources of different
    # buckets together this way. A low end bias makes many hypotheses run to their limit.
    stub = RandomRecurrentStub(seed=3, end_bias=-1.0)
    memory = stub.memory(6, seed=7)
    limits, max_new_tokens = [1, 3, 9, 5, 2, 7], 9

    def search(rows, max_new_tokens, max_lengths=None):
        arguments = dict(max_new_tokens=max_new_tokens, end_id=END, max_lengths=max_lengths)
        cache = stub.initial_cache(memory[rows])
        start_tokens = starts(*([START] * len(rows)))
        if beam_size == 1:
            sequences, scores = greedy_search(stub, cache, start_tokens, **arguments)
            return to_numpy(sequences[:, None], scores[:, None])
        found = beam_search(stub, cache, start_tokens, beam_size=4, alpha=0.6, **arguments)
        return to_numpy(*found)

    sequences, scores = search(list(range(6)), max_new_tokens, ops.array(limits, "int32"))
    cut = 0
    for row, limit in enumerate(limits):
        alone_sequences, alone_scores = search([row], limit)
        np.testing.assert_array_equal(sequences[row, :, :limit], alone_sequences[0])
        assert (sequences[row, :, limit:] == PAD).all()
        np.testing.assert_allclose(scores[row], alone_scores[0], rtol=1e-6)
        cut += int(limit < max_new_tokens and END not in sequences[row, 0, :limit])
        if beam_size > 1:
            expected, expected_scores = reference_beam_search(
                stub, memory[row], START, limit, 4, 0.6
            )
            np.testing.assert_array_equal(sequences[row, :, :limit], expected)
            np.testing.assert_allclose(scores[row], expected_scores, rtol=1e-4)
    assert cut >= 2  # Some best hypotheses were cut at their own limit, below max_new_tokens.


@pytest.mark.parametrize("patience", [1, 1.5, 2])
def test_patience_stops_as_ctranslate2_does(patience):
    # With `patience`, an example stops once round(patience * beam_size) hypotheses ended
    # and returns the best of them: each example of the batch gets exactly the plain-Python
    # search of that rule, alone, whatever its neighbours do (a done example is frozen).
    stub = RandomRecurrentStub(seed=5, end_bias=0.5)
    memory = stub.memory(8, seed=9)
    max_new_tokens = 9
    sequences, scores = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            starts(*([START] * 8)),
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=4,
            alpha=0.6,
            patience=patience,
        )
    )
    stopped_early = 0
    for example in range(8):
        expected, expected_scores = reference_beam_search(
            stub, memory[example], START, max_new_tokens, 4, 0.6, patience=patience
        )
        np.testing.assert_array_equal(sequences[example], expected)
        np.testing.assert_allclose(scores[example], expected_scores, rtol=1e-4)
        exact, _ = reference_beam_search(stub, memory[example], START, max_new_tokens, 4, 0.6)
        stopped_early += int(not np.array_equal(exact, expected))
    assert stopped_early >= 1  # The rule changed some results: the test can tell them apart.


def shrinking_problem():
    """13 examples of a stub that ends late, each with its own most tokens (1 to 10), two
    with target prefixes: the `beam_search` / `greedy_search` arguments of the shrinking
    tests but `select_sources`."""
    stub = RandomRecurrentStub(seed=3, end_bias=-0.5)
    batch_size = 13
    prefix = np.full((batch_size, 2), -1, "int32")
    prefix[3] = [A, B]
    prefix[7, 0] = C
    return dict(
        next_logits=stub,
        cache=stub.initial_cache(stub.memory(batch_size, seed=4)),
        start_tokens=starts(*([START] * batch_size)),
        max_new_tokens=10,
        end_id=END,
        max_lengths=ops.array([1, 10, 3, 9, 5, 2, 7, 10, 4, 6, 8, 10, 2], "int32"),
        prefix=ops.array(prefix),
    )


@pytest.mark.parametrize("patience", [None, 2])
@pytest.mark.parametrize("shrink_by", [2, 4])
def test_a_shrinking_batch_finds_what_the_whole_batch_finds(patience, shrink_by):
    # Once at most 1/shrink_by of its examples are still searching, the batch goes on with
    # those only: every example still gets its result, sequences and scores, as in the
    # whole batch to the end, with its own most tokens and its own target prefix.
    found = [
        to_numpy(
            *beam_search(
                **shrinking_problem(),
                beam_size=4,
                alpha=0.6,
                patience=patience,
                select_sources=select,
                shrink_by=shrink_by,
            )
        )
        for select in (None, functools.partial(select_rows, beam_size=4))
    ]
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-6)
    assert (found[0][0][3, 0, :2] == [A, B]).all() and found[0][0][7, 0, 0] == C
    assert len({tuple(row) for row in found[0][0][:, 0]}) > 13 // 2


def test_a_shrinking_greedy_batch_finds_what_the_whole_batch_finds():
    # Greedy search shrinks too (not when sampling): every row's tokens and score as in the
    # whole batch, with its own most tokens and prefix.
    found = [
        to_numpy(*greedy_search(**shrinking_problem(), select_sources=select, shrink_by=2))
        for select in (None, functools.partial(select_rows, beam_size=1))
    ]
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-6)
    assert (found[0][0][3, :2] == [A, B]).all() and found[0][0][7, 0] == C
    ended = (found[0][0] == END).any(axis=1)
    assert 0 < ended.sum() < 13


def test_a_shrinking_batch_takes_fewer_rows_per_step():
    # The point of shrinking: steps after most examples are done run on a smaller batch.
    # The stub records the rows of every call: one long example among short ones.
    stub = RandomRecurrentStub(seed=3, end_bias=-0.5)
    rows = []

    def counting(tokens, cache, index):
        rows.append(int(ops.shape(tokens)[0]))
        return stub(tokens, cache, index)

    limits = ops.array([2] * 15 + [12], "int32")
    beam_search(
        counting,
        stub.initial_cache(stub.memory(16, seed=1)),
        starts(*([START] * 16)),
        max_new_tokens=12,
        end_id=END,
        beam_size=2,
        max_lengths=limits,
        select_sources=functools.partial(select_rows, beam_size=2),
        shrink_by=4,
    )
    if BACKEND == "jax":  # A traced loop: one call per loop (16, 4, then 1 example).
        assert rows == [32, 8, 2]
    else:  # Eager loops, one call per step: 2 steps of 16 examples, then the long one alone
        # (at most 1 still searching: the batch of 4 is skipped).
        assert rows == [32, 32, *[2] * 10]


class BufferStub:
    """`RandomRecurrentStub` whose logits also read every token written so far from a token
    buffer in its cache, `(batch, length)`: the number of positions is read from the buffer,
    so the cache may grow (`cache_lengths`, `grow`). Records the lengths it was called with."""

    def __init__(self, stub):
        self.stub = stub
        rng = np.random.default_rng(7)
        size = stub.vocabulary_size
        self.mix = ops.convert_to_tensor(rng.normal(size=(size, size)).astype("float32"))
        self.lengths = set()

    def initial_cache(self, memory, length):
        buffer = ops.zeros((len(memory), length), "int32")
        return {"inner": self.stub.initial_cache(memory), "buffer": buffer}

    def __call__(self, tokens, cache, index):
        length = int(ops.shape(cache["buffer"])[1])
        self.lengths.add(length)
        positions = ops.arange(length, dtype="int32")[None, :]
        buffer = ops.where(positions == index, tokens, cache["buffer"])
        written = ops.cast(positions <= index, "float32")[:, :, None]
        counts = ops.sum(ops.one_hot(buffer, self.stub.vocabulary_size) * written, axis=1)
        logits, inner = self.stub(tokens, cache["inner"], index)
        return logits + 0.5 * ops.matmul(counts, self.mix), {"inner": inner, "buffer": buffer}

    @staticmethod
    def grow(cache, length):
        buffer = cache["buffer"]
        grown = ops.pad(buffer, [(0, 0), (0, length - int(ops.shape(buffer)[1]))])
        return {**cache, "buffer": grown}


def growing_problem(length):
    """`shrinking_problem` with a `BufferStub` whose buffer starts with `length` positions."""
    problem = shrinking_problem()
    stub = BufferStub(problem["next_logits"])
    memory = stub.stub.memory(13, seed=4)
    return stub, {**problem, "next_logits": stub, "cache": stub.initial_cache(memory, length)}


@pytest.mark.parametrize("patience", [None, 2])
@pytest.mark.parametrize("shrink", [False, True])
def test_a_growing_cache_finds_what_a_whole_cache_finds(patience, shrink):
    # `cache_lengths` and `grow_cache`: the cache starts with 2 positions and grows to 4, 8,
    # then `max_new_tokens` (10) as the search reaches its end; every example's hypotheses
    # and scores are those of a cache of 10 positions from the start, with its own most
    # tokens and prefix, whether the batch shrinks too or not.
    found, lengths = [], []
    for cache_lengths in (None, [2, 4, 8]):
        stub, problem = growing_problem(10 if cache_lengths is None else 2)
        growth = {} if cache_lengths is None else {"cache_lengths": cache_lengths}
        found.append(
            to_numpy(
                *beam_search(
                    **problem,
                    **growth,
                    grow_cache=stub.grow if cache_lengths else None,
                    beam_size=4,
                    alpha=0.6,
                    patience=patience,
                    select_sources=functools.partial(select_rows, beam_size=4) if shrink else None,
                    shrink_by=4,
                )
            )
        )
        lengths.append(stub.lengths)
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-6)
    assert lengths == [{10}, {2, 4, 8, 10}]  # The steps read a buffer of each length.
    assert (found[0][0][3, 0, :2] == [A, B]).all() and found[0][0][7, 0, 0] == C
    assert len({tuple(row) for row in found[0][0][:, 0]}) > 13 // 2


@pytest.mark.parametrize("shrink", [False, True])
def test_a_growing_greedy_cache_finds_what_a_whole_cache_finds(shrink):
    found = []
    for cache_lengths in (None, [3, 6]):
        stub, problem = growing_problem(10 if cache_lengths is None else 3)
        growth = {} if cache_lengths is None else {"cache_lengths": cache_lengths}
        select = functools.partial(select_rows, beam_size=1) if shrink else None
        found.append(
            to_numpy(
                *greedy_search(
                    **problem,
                    **growth,
                    grow_cache=stub.grow if cache_lengths else None,
                    select_sources=select,
                    shrink_by=2,
                )
            )
        )
        assert stub.lengths == ({10} if cache_lengths is None else {3, 6, 10})
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-6)
    ended = (found[0][0] == END).any(axis=1)
    assert 0 < ended.sum() < 13


@pytest.mark.parametrize("search", [beam_search, greedy_search])
@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"cache_lengths": [2]}, "go together"),
        ({"grow_cache": BufferStub.grow}, "go together"),
        ({"cache_lengths": [2, 2], "grow_cache": BufferStub.grow}, r"cache_lengths=\[2, 2\]"),
        ({"cache_lengths": [0], "grow_cache": BufferStub.grow}, r"cache_lengths=\[0\]"),
        ({"cache_lengths": [4], "grow_cache": BufferStub.grow}, r"below `max_new_tokens` \(4\)"),
        ({"cache_lengths": [1.5], "grow_cache": BufferStub.grow}, r"cache_lengths=\[1.5\]"),
    ],
)
def test_bad_cache_lengths_raise_value_error_naming_them(search, arguments, message):
    with pytest.raises(ValueError, match=message):
        search(bigram(GREEDY_TABLE), {}, starts(START), max_new_tokens=4, end_id=END, **arguments)


def test_beam_of_four_usually_beats_greedy():
    # Beam search is not guaranteed to score at least as well as greedy: the greedy prefix
    # can be pruned by beam_size better prefixes that later fare worse (example 3 here; the
    # plain-Python reference agrees). On these 16 random problems beam search is at least as
    # good 15 times and strictly better 7 times.
    alpha, max_new_tokens = 0.6, 8
    stub, memory, start_tokens = random_problem(seed=1, batch_size=16)
    greedy_sequences, greedy_scores = to_numpy(
        *greedy_search(
            stub,
            stub.initial_cache(memory),
            start_tokens,
            max_new_tokens=max_new_tokens,
            end_id=END,
        )
    )
    _, beam_scores = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            start_tokens,
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=4,
            alpha=alpha,
        )
    )
    beam_best, greedy_penalised = [], []
    for example, sequence in enumerate(greedy_sequences):
        ends = np.flatnonzero(sequence == END)
        length = ends[0] + 1 if len(ends) else max_new_tokens
        greedy_penalised.append(greedy_scores[example] / penalty(length, alpha))
        beam_best.append(beam_scores[example, 0])
    beam_best, greedy_penalised = np.array(beam_best), np.array(greedy_penalised)
    assert np.sum(beam_best >= greedy_penalised - 1e-5) >= 15
    assert np.sum(beam_best > greedy_penalised + 1e-3) >= 5


def test_unfinished_example_returns_its_alive_beams():
    # END is never likely (a large negative bias), so no beam finishes in 3 steps: the
    # example returns its alive beams, scored with the penalty of max_new_tokens.
    stub = RandomRecurrentStub(seed=5, end_bias=-30.0)
    memory = stub.memory(2, seed=7)
    alpha, max_new_tokens = 0.6, 3
    sequences, scores = to_numpy(
        *beam_search(
            stub,
            stub.initial_cache(memory),
            starts(START, START),
            max_new_tokens=max_new_tokens,
            end_id=END,
            beam_size=3,
            alpha=alpha,
        )
    )
    assert not np.any(sequences == END)
    for example in range(2):
        assert np.all(np.diff(scores[example]) <= 0)
        for sequence, score in zip(sequences[example], scores[example], strict=True):
            total, length = stub.rescore(memory[example], START, list(sequence))
            assert length == max_new_tokens
            np.testing.assert_allclose(score, total / penalty(max_new_tokens, alpha), rtol=1e-4)


# --------------------------------------------------------------------------- tracing


def decode_both(stub, memory, start_tokens):
    greedy = greedy_search(
        stub, stub.initial_cache(memory), start_tokens, max_new_tokens=6, end_id=END
    )
    beam = beam_search(
        stub,
        stub.initial_cache(memory),
        start_tokens,
        max_new_tokens=6,
        end_id=END,
        beam_size=3,
        alpha=0.6,
    )
    return greedy, beam


def assert_same_results(actual, expected):
    actual, expected = keras.tree.flatten(actual), keras.tree.flatten(expected)
    for got, want in zip(actual, expected, strict=True):
        got, want = ops.convert_to_numpy(got), ops.convert_to_numpy(want)
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.function tracing test")
def test_traces_once_under_tf_function_jit_compile():
    import tensorflow as tf

    stub = RandomRecurrentStub(seed=0)
    traces = []

    @tf.function(jit_compile=True)
    def decode(memory, start_tokens):
        traces.append(1)
        return decode_both(stub, memory, start_tokens)

    for seed in (1, 2):
        memory = stub.memory(3, seed=seed)
        start_tokens = starts(START, A, B)
        compiled = decode(tf.constant(memory), start_tokens)
    assert_same_results(compiled, decode_both(stub, memory, start_tokens))
    assert len(traces) == 1


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit tracing test")
def test_traces_once_under_jax_jit():
    import jax

    stub = RandomRecurrentStub(seed=0)
    traces = []

    @jax.jit
    def decode(memory, start_tokens):
        traces.append(1)
        return decode_both(stub, memory, start_tokens)

    for seed in (1, 2):
        memory = stub.memory(3, seed=seed)
        start_tokens = starts(START, A, B)
        compiled = decode(memory, start_tokens)
    assert_same_results(compiled, decode_both(stub, memory, start_tokens))
    assert len(traces) == 1


def xla_compiled(function):
    """`function` compiled by XLA on TensorFlow and JAX (where `top_k_by_blocks` takes its
    blocks); `None` on PyTorch."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, autograph=False)
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    return None


@pytest.mark.skipif(BACKEND == "torch", reason="PyTorch takes one `topk`: no blocks")
@pytest.mark.parametrize(
    "rows, n, k, block, values",
    [
        (3, 700, 8, None, "normal"),  # about sqrt(700 / 8): blocks of 8, a tail of 4
        (5, 640, 8, 16, "normal"),  # no tail
        (4, 517, 5, 16, "few"),  # ties everywhere: the lower index first
        (2, 300, 1, 7, "few"),
        (6, 333, 4, 9, "spikes"),  # the best blocks last: ties resolved in the blocks' order
        (3, 640, 6, 32, "spikes"),
        (4, 517, 5, 16, "spikes"),  # a tail of 5 with one of the best
        (2, 200, 4, 2, "normal"),
    ],
)
def test_top_k_by_blocks_is_top_k(rows, n, k, block, values, monkeypatch):
    monkeypatch.setattr(decoding, "TOP_K_BY_BLOCKS_FROM", 600)
    rng = np.random.default_rng(n)
    if values == "normal":
        x = rng.normal(size=(rows, n))
    elif values == "few":
        x = rng.integers(0, 3, size=(rows, n))
    else:  # Ties, and larger values late in the row (their blocks come first; the tail).
        x = rng.integers(0, 3, size=(rows, n))
        x[:, [n - 1, n - 31, n - 70]] = 5
    x = x.astype("float32")
    got_values, got_indices = xla_compiled(lambda v: top_k_by_blocks(v, k, block))(x)
    want_values, want_indices = ops.top_k(x, k)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(got_values), ops.convert_to_numpy(want_values)
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(got_indices), ops.convert_to_numpy(want_indices).astype("int32")
    )
    assert ops.convert_to_numpy(got_indices).dtype == np.int32


@pytest.mark.skipif(BACKEND != "jax", reason="reads the traced program (a jaxpr)")
def test_top_k_by_blocks_takes_the_blocks_way_for_long_rows_only(monkeypatch):
    import jax

    def program(n, k=8):
        return str(jax.make_jaxpr(lambda v: top_k_by_blocks(v, k))(np.zeros((2, n), "float32")))

    assert "reduce_max" in program(7603)  # Block maxima, then two small top-k.
    assert program(7603).count("top_k") == 2
    assert "reduce_max" not in program(1000)  # Below TOP_K_BY_BLOCKS_FROM: one top_k.
    assert program(1000).count("top_k") == 1


class RoundedStub(RandomRecurrentStub):
    """`RandomRecurrentStub` whose logits are rounded to quarters: many equal candidates."""

    def __call__(self, tokens, cache, index):
        logits, cache = super().__call__(tokens, cache, index)
        return ops.round(logits * 4.0) / 4.0, cache


@pytest.mark.skipif(BACKEND == "torch", reason="PyTorch takes one `topk`: no blocks")
@pytest.mark.parametrize("ties", [False, True])
def test_a_beam_search_by_blocks_finds_what_one_top_k_finds(ties, monkeypatch):
    # A stub of 300 tokens; with `ties`, its logits rounded to quarters (which of equal
    # candidates a search keeps is decided by the top-k's tie order).
    stub = (RoundedStub if ties else RandomRecurrentStub)(
        seed=3, vocabulary_size=300, hidden_dim=16, end_bias=2.5
    )
    memory = stub.memory(6, seed=5)
    found = []
    for threshold in (10**9, 256):  # One top-k, then blocks of 8 (300 tokens, k = 8).
        monkeypatch.setattr(decoding, "TOP_K_BY_BLOCKS_FROM", threshold)

        def search(memory):
            cache = stub.initial_cache(memory)
            return beam_search(
                stub,
                cache,
                starts(START, A, B, C, D, E),
                max_new_tokens=9,
                end_id=END,
                beam_size=4,
                alpha=0.6,
            )

        found.append(to_numpy(*xla_compiled(search)(memory)))
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_array_equal(found[1][1], found[0][1])
    assert len({tuple(row) for row in found[0][0][:, 0]}) > 3


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "search, arguments, message",
    [
        (greedy_search, {"max_new_tokens": 0}, "max_new_tokens=0"),
        (greedy_search, {"max_new_tokens": 2.5}, "max_new_tokens=2.5"),
        (greedy_search, {"end_id": -1}, "end_id=-1"),
        (beam_search, {"max_new_tokens": 0}, "max_new_tokens=0"),
        (beam_search, {"beam_size": 0}, "beam_size=0"),
        (beam_search, {"alpha": -0.1}, "alpha=-0.1"),
        (beam_search, {"pad_id": -2}, "pad_id=-2"),
        (beam_search, {"patience": 0}, "patience=0"),
        (beam_search, {"patience": 0.5}, "patience=0.5"),
        (beam_search, {"patience": -1.5}, "patience=-1.5"),
        (beam_search, {"patience": True}, "patience=True"),
        (beam_search, {"patience": "2"}, "patience='2'"),
        (beam_search, {"patience": float("inf")}, "patience=inf"),
        (beam_search, {"shrink_by": 1}, "shrink_by=1"),
        (greedy_search, {"shrink_by": 0}, "shrink_by=0"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(search, arguments, message):
    arguments = {"max_new_tokens": 4, "end_id": END, **arguments}
    with pytest.raises(ValueError, match=message):
        search(bigram(GREEDY_TABLE), {}, starts(START), **arguments)


def test_bad_start_tokens_and_alpha_raise_value_error():
    with pytest.raises(ValueError, match="start_tokens.shape"):
        greedy_search(
            bigram(GREEDY_TABLE), {}, starts(START)[None, :], max_new_tokens=2, end_id=END
        )
    with pytest.raises(ValueError, match="alpha=-1"):
        length_penalty(3, alpha=-1)
