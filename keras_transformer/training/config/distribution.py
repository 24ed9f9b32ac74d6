"""`[distribution]`: data parallelism, on one process or several."""

import dataclasses

STRATEGIES = ("auto", "none", "mirrored", "data_parallel")


def _device_names(devices):
    return all(isinstance(device, str) and device for device in devices)


@dataclasses.dataclass
class DistributionConfig:
    """`[distribution]`: data parallelism (see `docs/training.md`).

    Args:
        strategy: str. `"auto"` (a `MirroredStrategy` on TensorFlow or `DataParallel` on JAX
            when there is more than one device or process, else none), `"none"`,
            `"mirrored"` (TensorFlow `tf.distribute.MirroredStrategy`, one process, several
            devices) or `"data_parallel"` (JAX `keras.distribution.DataParallel`, one or more
            processes). Defaults to `"auto"`.
        devices: list of str. Devices to use (e.g. `["/gpu:0", "/gpu:1"]` or, for JAX,
            `["cpu:0", "cpu:1"]`); `[]` is all of them. Defaults to `[]`.
        cpu_devices: int. Split the CPU into this many logical devices (to try data
            parallelism without accelerators); `0` leaves it alone. Must be set before the
            backend initializes its devices. Defaults to `0`.
        coordinator_address: str. JAX multi-process: `"host:port"` of process 0, as
            `jax.distributed.initialize` expects. Defaults to `""` (one process).
        num_processes: int. JAX multi-process: number of processes. Defaults to `1`.
        process_id: int. JAX multi-process: this process's rank, `0 .. num_processes - 1`.
            Defaults to `0`.
        initialization_timeout: int. Seconds to wait for the other processes. Defaults to
            `300`.
        cpu_collectives: str. JAX CPU collectives between processes (`"gloo"`; `""` leaves
            JAX's default). Defaults to `"gloo"`.
    """

    strategy: str = dataclasses.field(default="auto", metadata={"choices": STRATEGIES})
    devices: list = dataclasses.field(
        default_factory=list,
        metadata={"check": (_device_names, "a list of device names (e.g. ['/gpu:0'])")},
    )
    cpu_devices: int = dataclasses.field(default=0, metadata={"min": 0})
    coordinator_address: str = ""
    num_processes: int = dataclasses.field(default=1, metadata={"min": 1})
    process_id: int = dataclasses.field(default=0, metadata={"min": 0})
    initialization_timeout: int = dataclasses.field(default=300, metadata={"min": 1})
    cpu_collectives: str = "gloo"
