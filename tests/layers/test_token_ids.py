"""Tests for `keras_transformer.layers.check_token_ids`: eager checks, compiled no-ops."""

import doctest

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import check_token_ids, token_ids

BACKEND = keras.backend.backend()


@pytest.mark.parametrize(
    "ids, match",
    [
        ([[3, 4], [5, 10]], r"id 10 at position \(1, 1\).*ids\[1, 1\]=10, vocabulary_size=10"),
        ([[3, -1]], r"id -1 at position \(0, 1\).*ids\[0, 1\]=-1, vocabulary_size=10"),
        (np.array([2.0, 3.0]), r"integer token ids.*ids.dtype=float"),
        (np.array([True]), r"ids.dtype=bool"),
        (2**40, r"id 1099511627776 is not. Received: ids=1099511627776, vocabulary_size=10"),
    ],
)
def test_bad_ids_raise_naming_value_position_and_vocabulary(ids, match):
    with pytest.raises(ValueError, match=match):
        check_token_ids(ids, vocabulary_size=10, name="ids")
    if np.asarray(ids).ndim:  # the same check on an eager backend tensor
        with pytest.raises(ValueError, match=match):
            check_token_ids(ops.convert_to_tensor(np.asarray(ids)), vocabulary_size=10, name="ids")


@pytest.mark.parametrize(
    "ids", [[[0, 9]], np.array([[0, 9]], "uint8"), np.zeros((0, 3), "int32"), None, 9]
)
def test_valid_ids_pass(ids):
    check_token_ids(ids, vocabulary_size=10)
    if ids is not None:
        check_token_ids(ops.convert_to_tensor(np.asarray(ids)), vocabulary_size=10)


class _Shard:
    def __init__(self, index, data):
        self.index, self.data = index, data


class _GlobalArray:
    """What a JAX array spread over two processes looks like from one of them (it holds
    rows 2-3 of 4): it cannot be copied to the host whole, only its own shards."""

    dtype = np.dtype("int32")
    shape = (4, 3)
    is_fully_addressable = False

    def __init__(self, rows):
        self.addressable_shards = [_Shard((slice(2, 4, None), slice(None, None, None)), rows)]

    def __array__(self, *args, **kwargs):
        raise RuntimeError("Fetching value for `jax.Array` that spans non-addressable devices")


def test_an_array_spread_over_processes_is_checked_shard_by_shard():
    # `Transformer.call` uncompiled (`training.jit_compile = false`) under keras.distribution
    # across processes: each process checks the rows it holds, positions in the global array.
    check_token_ids(_GlobalArray(np.array([[1, 2, 3], [4, 5, 6]], "int32")), vocabulary_size=10)
    bad = _GlobalArray(np.array([[1, 2, 3], [4, 12, 6]], "int32"))
    with pytest.raises(ValueError, match=r"id 12 at position \(3, 1\).*ids\[3, 1\]=12"):
        check_token_ids(bad, vocabulary_size=10, name="ids")


def test_symbolic_inputs_are_not_checked():
    # Keras' own data adapters may feed integer data as floats (MirroredStrategy's
    # `evaluate` does): in graphs the model's int32 cast applies, as before.
    check_token_ids(keras.KerasTensor((None, 4), dtype="int32"), vocabulary_size=10)
    check_token_ids(keras.KerasTensor((None, 4), dtype="float32"), vocabulary_size=10)


def compiled(function, fullgraph=True):
    """`function` compiled the way the backend compiles a train step."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    import torch

    return torch.compile(function, backend="eager", fullgraph=fullgraph)


def test_inside_compiled_functions_values_are_not_checked():
    def run(ids):
        check_token_ids(ids, vocabulary_size=10, name="ids")
        return ids + 1

    # Out of range, but traced: no host round trip, no error (and no graph break on torch).
    out = compiled(run)(ops.convert_to_tensor(np.array([[3, 12]], "int32")))
    assert ops.convert_to_numpy(out).tolist() == [[4, 13]]
    out = compiled(run)(ops.convert_to_tensor(np.array([[3.0]], "float32")))
    assert ops.convert_to_numpy(out).tolist() == [[4.0]]


def test_docstring_example_runs():
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(check_token_ids, globs=dict(vars(token_ids))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted and not result.failed
