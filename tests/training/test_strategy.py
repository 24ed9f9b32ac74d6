"""`setup_distribution`: the strategy each backend gets, and the combinations it refuses.

The strategies themselves train in `test_distribution.py` (subprocesses with split CPUs).
"""

import re

import keras
import pytest

from keras_transformer.training import DistributionConfig, setup_distribution

BACKEND = keras.backend.backend()


def test_no_strategy_is_one_replica_on_the_chief_that_leaves_data_alone():
    context = setup_distribution(DistributionConfig(strategy="none"))
    assert (context.strategy, context.num_replicas, context.num_processes) == ("none", 1, 1)
    assert context.is_chief and not context.is_distributed
    data = object()
    assert context.prepare_dataset(data) is data  # One replica: nothing to pad or slice.


@pytest.mark.skipif(BACKEND == "jax", reason="JAX supports several processes")
def test_several_processes_need_jax():
    message = f"num_processes=2 with KERAS_BACKEND={BACKEND!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        setup_distribution(DistributionConfig(strategy="data_parallel", num_processes=2))


@pytest.mark.skipif(BACKEND == "tensorflow", reason="MirroredStrategy runs on TensorFlow")
def test_mirrored_needs_tensorflow():
    message = f"strategy='mirrored' with KERAS_BACKEND={BACKEND!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        setup_distribution(DistributionConfig(strategy="mirrored"))


@pytest.mark.skipif(BACKEND == "jax", reason="DataParallel runs on JAX")
def test_data_parallel_needs_jax():
    message = f"strategy='data_parallel' with KERAS_BACKEND={BACKEND!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        setup_distribution(DistributionConfig(strategy="data_parallel"))
