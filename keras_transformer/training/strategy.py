"""Data parallelism: `tf.distribute.MirroredStrategy` on TensorFlow, `DataParallel` on JAX.

What is supported (see `docs/training.md`):

- TensorFlow, one process, several devices: `tf.distribute.MirroredStrategy`. The model, the
  optimizer and `compile` are created inside `strategy.scope()`; Keras splits each global
  batch across the replicas and sums the gradients.
- JAX, one process or several: `keras.distribution.DataParallel` over all devices of all
  processes (`jax.distributed.initialize` with a coordinator address, the process count and
  the process id). Each process feeds its slice of every global batch.
- Keras 3 does not support `tf.distribute.MultiWorkerMirroredStrategy` (nor
  `ParameterServerStrategy`): for several machines use the JAX backend with `DataParallel`.
- PyTorch: one device only (no `torch.distributed` integration here).

The loss is the mean over the real tokens of the *global* batch on every path, so a
distributed step computes the same update as a single-device step on the same global batch
(`keras_transformer.training.mirrored` for `MirroredStrategy`).
"""

import contextlib
import dataclasses
import logging

import keras
import numpy as np

# TensorFlow and JAX are imported inside the functions of their backend only: a run loads the
# framework of its own backend, never the other one (seconds and memory at import).

logger = logging.getLogger("keras_transformer")


@dataclasses.dataclass
class DistributionContext:
    """How this process trains: the strategy, the replicas and this process's rank.

    Attributes:
        strategy: str. `"none"`, `"mirrored"` or `"data_parallel"`.
        num_replicas: int. Devices the global batch is split across (all processes).
        num_processes: int. Processes taking part.
        process_id: int. This process's rank.
        tf_strategy: the `tf.distribute.MirroredStrategy`, or `None`.
        keras_distribution: the `keras.distribution.DataParallel`, or `None`.
    """

    strategy: str = "none"
    num_replicas: int = 1
    num_processes: int = 1
    process_id: int = 0
    tf_strategy: object = None
    keras_distribution: object = None

    @property
    def is_chief(self):
        """Whether this process writes files and prints reports (rank 0)."""
        return self.process_id == 0

    @property
    def is_distributed(self):
        return self.strategy != "none"

    def scope(self):
        """The context in which to create, compile and fit the model."""
        if self.tf_strategy is not None:
            return self.tf_strategy.scope()
        if self.keras_distribution is not None:
            return self.keras_distribution.scope()
        return contextlib.nullcontext()

    def prepare_dataset(self, dataset):
        """Makes a `tf.data` dataset of global batches ready for this strategy.

        Each batch gets all-`[PAD]` rows (which the masked loss and metrics ignore) up to a
        multiple of `num_replicas`, so it splits evenly across devices; with several
        processes each process then keeps its own contiguous slice of every global batch
        (JAX assembles the global batch from the slices).

        Args:
            dataset: `tf.data.Dataset` of `(inputs dict, targets)` batches.

        Returns:
            The prepared `tf.data.Dataset`.
        """
        if self.num_replicas == 1 and self.num_processes == 1:
            return dataset
        import tensorflow as tf

        multiple = self.num_replicas
        num_processes, process_id = self.num_processes, self.process_id

        def pad_and_slice(inputs, targets):
            rows = tf.shape(targets)[0]
            padded_rows = (rows + multiple - 1) // multiple * multiple
            paddings = [[0, padded_rows - rows], [0, 0]]
            inputs = {key: tf.pad(value, paddings) for key, value in inputs.items()}
            targets = tf.pad(targets, paddings)
            if num_processes > 1:
                per_process = padded_rows // num_processes
                begin = process_id * per_process
                inputs = {key: value[begin : begin + per_process] for key, value in inputs.items()}
                targets = targets[begin : begin + per_process]
            return inputs, targets

        return dataset.map(pad_and_slice)


def setup_distribution(config):
    """Sets up devices, processes and the strategy described by a `DistributionConfig`.

    Call it first, before anything runs on the backend: logical CPU devices and
    `jax.distributed.initialize` must come before the backend initializes its devices.

    Args:
        config: `keras_transformer.training.DistributionConfig`.

    Returns:
        A `DistributionContext`.

    Example:

    >>> from keras_transformer.training import DistributionConfig
    >>> context = setup_distribution(DistributionConfig(strategy="none"))
    >>> context.num_replicas, context.is_chief
    (1, True)
    """
    backend = keras.backend.backend()
    strategy = config.strategy
    if config.cpu_devices:
        configure_cpu_devices(config.cpu_devices)
    if config.num_processes > 1:
        if backend != "jax":
            raise ValueError(
                "Several processes need the JAX backend (Keras 3 does not support "
                "tf.distribute.MultiWorkerMirroredStrategy). Received: "
                f"num_processes={config.num_processes} with KERAS_BACKEND={backend!r}"
            )
        if strategy not in ("auto", "data_parallel"):
            raise ValueError(
                "Several processes need strategy='data_parallel'. Received: "
                f"strategy={strategy!r}, num_processes={config.num_processes}"
            )
        initialize_jax_processes(
            config.coordinator_address,
            config.num_processes,
            config.process_id,
            timeout=config.initialization_timeout,
            cpu_collectives=config.cpu_collectives,
        )
    if strategy == "auto":
        strategy = _auto_strategy(backend, config)
    if strategy == "none":
        return DistributionContext()
    if strategy == "mirrored":
        if backend != "tensorflow":
            raise ValueError(
                "strategy='mirrored' needs the TensorFlow backend; use 'data_parallel' with "
                f"JAX. Received: strategy='mirrored' with KERAS_BACKEND={backend!r}"
            )
        import tensorflow as tf

        devices = list(config.devices) or _tf_devices() or None
        tf_strategy = tf.distribute.MirroredStrategy(devices=devices)
        logger.info("MirroredStrategy over %s.", tf_strategy.extended.worker_devices)
        return DistributionContext(
            strategy="mirrored",
            num_replicas=tf_strategy.num_replicas_in_sync,
            tf_strategy=tf_strategy,
        )
    if backend != "jax":
        raise ValueError(
            "strategy='data_parallel' needs the JAX backend; use 'mirrored' with TensorFlow. "
            f"Received: strategy='data_parallel' with KERAS_BACKEND={backend!r}"
        )
    import jax

    devices = list(config.devices) or keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    logger.info("DataParallel over %d devices in %d processes.", len(devices), jax.process_count())
    return DistributionContext(
        strategy="data_parallel",
        num_replicas=len(devices),
        num_processes=jax.process_count(),
        process_id=jax.process_index(),
        keras_distribution=distribution,
    )


def configure_cpu_devices(count):
    """Splits the host CPU into `count` logical devices (TensorFlow or JAX).

    Must run before the backend initializes its devices (before the first tensor is made),
    so tests call it in a fresh subprocess.

    Args:
        count: int >= 1.
    """
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be an int >= 1. Received: count={count!r}")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        cpus = tf.config.list_physical_devices("CPU")
        try:
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
            )
        except RuntimeError as error:
            if len(tf.config.list_logical_devices("CPU")) != count:
                raise RuntimeError(
                    f"Cannot split the CPU into {count} devices: TensorFlow already "
                    "initialized its devices. Set `distribution.cpu_devices` in a fresh "
                    "process, before anything runs on TensorFlow."
                ) from error
    elif backend == "jax":
        import jax

        try:
            jax.config.update("jax_num_cpu_devices", count)
        except RuntimeError as error:
            if jax.local_device_count() != count:
                raise RuntimeError(
                    f"Cannot split the CPU into {count} devices: JAX already initialized "
                    "its backend. Set `distribution.cpu_devices` in a fresh process."
                ) from error
    else:
        raise ValueError(
            "`cpu_devices` is supported on TensorFlow and JAX only. Received: "
            f"KERAS_BACKEND={backend!r}"
        )


def initialize_jax_processes(
    coordinator_address, num_processes, process_id, timeout=300, cpu_collectives="gloo"
):
    """`jax.distributed.initialize` (once per process), with CPU collectives between processes.

    Args:
        coordinator_address: str. `"host:port"` of process 0.
        num_processes: int.
        process_id: int. This process's rank.
        timeout: int. Seconds to wait for the other processes. Defaults to `300`.
        cpu_collectives: str. `jax_cpu_collectives_implementation` (`"gloo"`), or `""`.
            Defaults to `"gloo"`.
    """
    import jax

    if jax.distributed.is_initialized():
        return
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout,
    )
    logger.info("JAX process %d of %d initialized.", jax.process_index(), jax.process_count())


def process_count():
    """The processes taking part in training: `jax.process_count()` on JAX, `1` elsewhere."""
    if keras.backend.backend() != "jax":
        return 1
    import jax

    return jax.process_count()


def all_processes_agree(flag):
    """Process 0's boolean, on every process (JAX multi-process); `flag` itself otherwise.

    Every process must call it at the same point (it is a collective).
    """
    return bool(broadcast_from_first(bool(flag)))


def broadcast_from_first(value):
    """Process 0's int, on every process (JAX multi-process); `value` itself otherwise.

    Every process must call it at the same point (it is a collective).
    """
    if process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.array(int(value), dtype=np.int32)))


def _auto_strategy(backend, config):
    if backend == "tensorflow":
        devices = list(config.devices) or _tf_devices()
        return "mirrored" if len(devices) > 1 else "none"
    if backend == "jax":
        import jax

        devices = list(config.devices) or jax.devices()
        return "data_parallel" if len(devices) > 1 else "none"
    return "none"


def _tf_devices():
    """Accelerators if any, else the logical CPUs when the CPU was split."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return [device.name for device in gpus]
    cpus = tf.config.list_logical_devices("CPU")
    return [device.name for device in cpus] if len(cpus) > 1 else []

