"""Reliability: a kill after each write and rename, a second run on one output directory,
failed writes, damaged weights (the table of docs/reliability.md)."""

import contextlib
import errno
import fcntl
import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from keras_transformer import cli, files
from keras_transformer.files import (
    KILL_AFTER_VARIABLE,
    DirectoryLockedError,
    lock_directory,
    remove_temporaries,
    unlock_directory,
)

pytestmark = pytest.mark.one_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER = os.path.join(ROOT, "tests", "scripts", "reliability_writer.py")


def run_writer(kind, directory, version, kill_after=None, exchange=True, keras_file=None):
    """Runs `scripts/reliability_writer.py` (no Keras: a fraction of a second); its status."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop(KILL_AFTER_VARIABLE, None)
    if kill_after is not None:
        env[KILL_AFTER_VARIABLE] = str(kill_after)
    command = [
        sys.executable,
        WRITER,
        kind,
        str(directory),
        version,
        *([keras_file] if keras_file else []),
    ]
    return subprocess.run(command + ([] if exchange else ["--no-exchange"]), env=env).returncode


def contents(directory):
    """The set of texts of the files of `directory` (one version: a set of one)."""
    return {open(os.path.join(directory, name)).read() for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two_renames"])
def test_a_directory_swap_killed_after_each_write_keeps_a_complete_version(tmp_path, exchange):
    absent = []
    for step in itertools.count(1):
        directory = tmp_path / str(step)
        assert run_writer("directory", directory, "1") == 0
        status = run_writer("directory", directory, "2", kill_after=step, exchange=exchange)
        assert status in (0, 137)
        if not (directory / "best").exists():
            absent.append(step)
        remove_temporaries(directory)  # What the next `train` does first.
        assert os.listdir(directory) == ["best"]
        assert contents(directory / "best") in ({"1"}, {"2"})
        if status == 0:
            assert contents(directory / "best") == {"2"}
            break
    assert step >= 3  # Killed after the temporary is complete, and after each rename.
    # With the exchange `best/` exists at every instant; with two renames, one kill leaves
    # it aside, and the next start puts it back.
    assert absent == ([] if exchange else [2])


def test_an_export_killed_between_its_renames_is_put_back_by_the_next_export(tmp_path):
    assert run_writer("directory", tmp_path, "1") == 0
    assert run_writer("directory", tmp_path, "2", kill_after=2, exchange=False) == 137
    assert "best" not in os.listdir(tmp_path)
    assert run_writer("directory", tmp_path, "3") == 0  # `export --overwrite` again
    assert os.listdir(tmp_path) == ["best"]
    assert contents(tmp_path / "best") == {"3"}


def test_a_file_write_killed_after_each_write_keeps_a_complete_version(tmp_path):
    for step in itertools.count(1):
        directory = tmp_path / str(step)
        assert run_writer("file", directory, "1") == 0
        status = run_writer("file", directory, "2", kill_after=step)
        remove_temporaries(directory)
        assert os.listdir(directory) == ["state.json"]
        assert files.read_json(directory / "state.json")["version"] in ("1", "2")
        if status == 0:
            break
        assert status == 137
    assert step == 3


def test_the_leftovers_of_a_0_2_0_swap_killed_between_its_renames_are_put_back(tmp_path):
    # What 0.2.0's `atomic_directory` left after a kill between its two renames: the old
    # `best/` aside, the new one under its temporary name, and no `best/`.
    (tmp_path / ".tmp-old-1234abcd-best").mkdir()
    (tmp_path / ".tmp-old-1234abcd-best" / "model.weights.h5").write_text("old")
    (tmp_path / ".tmp-1234abcd-best").mkdir()
    (tmp_path / "best.json").write_text("{}")
    remove_temporaries(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["best", "best.json"]
    assert contents(tmp_path / "best") == {"old"}


def hold_lock(directory, pid=4242):
    """Another run's lock of `directory`: a lock on another open file of its `.lock` (flock
    locks belong to the open file, so the test process plays the other run). Returns the file
    descriptor; closing it ends the other run."""
    os.makedirs(directory, exist_ok=True)
    handle = os.open(os.path.join(directory, files.LOCK_FILENAME), os.O_RDWR | os.O_CREAT)
    fcntl.flock(handle, fcntl.LOCK_EX)
    os.write(handle, f"{pid}\n".encode())
    return handle


def test_a_second_lock_of_a_directory_names_the_directory_and_the_process(tmp_path):
    handle = hold_lock(tmp_path)
    try:
        with pytest.raises(DirectoryLockedError, match=f"PID 4242.*{tmp_path}"):
            lock_directory(tmp_path)
    finally:
        os.close(handle)  # The other run ends: its lock goes with it.
    lock_directory(tmp_path)
    lock_directory(tmp_path)  # Again in the same process: a no-op.
    assert open(tmp_path / files.LOCK_FILENAME).read() == f"{os.getpid()}\n"
    unlock_directory(tmp_path)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_second_train_on_one_output_directory_is_one_line_and_changes_nothing(
    tmp_path, capsys, streamed
):
    run = tmp_path / "run"
    handle = hold_lock(run)
    (run / ".tmp-1234abcd-ckpt-00000004.weights.h5").write_text("the other run's")
    config = tmp_path / "run.toml"
    config.write_text(f'output_dir = "{run}"\n[model]\npreset = "tiny"\n')
    if streamed:  # The lock comes before the scan that rewrites the running run's keys files.
        (run / "corpus").mkdir()
        (run / "corpus" / "corpus-0.keys").write_bytes(b"the running run's keys")
        for name, word in (("train.es", "uno"), ("train.en", "one")):
            (tmp_path / name).write_text("".join(f"{word} {index}\n" for index in range(40)))
        with open(config, "a") as file:
            file.write(
                f'[data]\nsource = "{tmp_path / "train.es"}"\ntarget = "{tmp_path / "train.en"}"'
                "\nstreaming = true\nnum_validation = 4\nnum_test = 4\n"
            )

    def files_of_run():
        return {
            path: (path.stat().st_mtime_ns, path.is_file() and path.read_bytes())
            for path in run.rglob("*")
        }

    before = files_of_run()
    try:
        status = cli.main(["train", "--config", str(config)])
    finally:
        os.close(handle)
    errors = capsys.readouterr().err
    assert status == 2
    assert errors.count("\n") == 1 and f"(PID 4242) is using the output directory {run}" in errors
    assert files_of_run() == before


# === Damaged weights and failed writes ===

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "translator_v0_1.keras")


@pytest.fixture(scope="module")
def translator():
    from keras_transformer import Translator

    return Translator.load(FIXTURE)


def overwrite_one_weight(path, size=4096):
    """Overwrites `size` bytes of the largest array of the `.weights.h5` file `path` in place
    with finite numbers: the same size, still a valid HDF5 file."""
    import h5py
    import numpy as np

    arrays = []
    with h5py.File(path, "r") as file:
        file.visititems(
            lambda name, item: (
                arrays.append((item.id.get_offset(), item.nbytes))
                if isinstance(item, h5py.Dataset) and item.id.get_offset() is not None
                else None
            )
        )
    offset, nbytes = max(arrays, key=lambda array: array[1])
    size = min(size, nbytes)
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(np.full(size // 4, 0.5, "float32").tobytes())
    with h5py.File(path, "r"):  # Still a readable HDF5 file.
        pass


def test_damaged_weights_of_a_preset_are_refused_naming_the_file(translator, tmp_path, capsys):
    from keras_transformer import Translator

    preset = tmp_path / "preset"
    translator.save_to_preset(preset)
    weights = preset / "model.weights.h5"
    size = weights.stat().st_size
    overwrite_one_weight(weights)
    assert weights.stat().st_size == size
    with pytest.raises(ValueError, match=r"model\.weights\.h5.*SHA-256"):
        Translator.from_preset(preset)
    assert cli.main(["translate", "--model", str(preset), "uno"]) == 2
    assert "SHA-256" in capsys.readouterr().err


def test_damaged_checkpoints_and_backups_are_refused_naming_the_file(tmp_path):
    import keras

    from keras_transformer.files import write_json
    from keras_transformer.saving.weights import DamagedFileError, check_sha256
    from keras_transformer.training.averaging import average_last_checkpoints
    from keras_transformer.training.checkpoints import (
        SHA256_FILENAME,
        checkpoint_path,
        record_sha256,
        save_weights_atomically,
    )

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64)])
    model.compile("sgd", "mse")
    directory = str(tmp_path / "checkpoints")
    for step in (1, 2):
        path = checkpoint_path(directory, step)
        record_sha256(directory, os.path.basename(path), save_weights_atomically(model, path))
    assert sorted(files.read_json(os.path.join(directory, SHA256_FILENAME))) == [
        "ckpt-00000001.weights.h5",
        "ckpt-00000002.weights.h5",
        "recorded_from_step",  # every checkpoint from this step on is recorded
    ]
    overwrite_one_weight(path)
    with pytest.raises(DamagedFileError, match="ckpt-00000002.weights.h5: damaged"):
        average_last_checkpoints(model, directory, 2)
    # A checkpoint without a record (0.2.0's) is loaded unchecked.
    write_json(os.path.join(directory, SHA256_FILENAME), {})
    assert len(average_last_checkpoints(model, directory, 2)) == 2
    # The backup's record is `state.json` (as `ResumableBackupAndRestore` writes it).
    sha256 = save_weights_atomically(model, str(tmp_path / "backup.weights.h5"))
    check_sha256(str(tmp_path / "backup.weights.h5"), sha256, "state.json")
    overwrite_one_weight(tmp_path / "backup.weights.h5")
    with pytest.raises(DamagedFileError, match="state.json records"):
        check_sha256(str(tmp_path / "backup.weights.h5"), sha256, "state.json")


def test_a_checkpoint_without_a_record_loads_only_when_older_than_the_record(tmp_path, caplog):
    import keras

    from keras_transformer.files import write_json
    from keras_transformer.saving.weights import DamagedFileError
    from keras_transformer.training.checkpoints import (
        RECORDED_FROM_KEY,
        SHA256_FILENAME,
        check_checkpoint,
        checkpoint_path,
        record_sha256,
        restore_checkpoint,
        save_weights_atomically,
    )

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    directory = str(tmp_path / "checkpoints")
    record_file = os.path.join(directory, SHA256_FILENAME)
    # A run continued from 0.2.0's checkpoint of step 1 (no record): records from step 2 on.
    old = checkpoint_path(directory, 1)
    save_weights_atomically(model, old)
    path = checkpoint_path(directory, 2)
    record_sha256(directory, os.path.basename(path), save_weights_atomically(model, path))
    assert files.read_json(record_file)[RECORDED_FROM_KEY] == 2
    with caplog.at_level("WARNING", logger="keras_transformer"):
        check_checkpoint(old)  # older than the record: unchecked, with a note
    assert "ckpt-00000001.weights.h5: no SHA-256 recorded" in caplog.text
    check_checkpoint(path)
    # Step 3 written, killed before its record: refused, one line naming the file ...
    unrecorded = checkpoint_path(directory, 3)
    save_weights_atomically(model, unrecorded)
    with pytest.raises(DamagedFileError) as info:
        check_checkpoint(unrecorded)
    message = str(info.value)
    assert message.startswith(unrecorded) and "records no SHA-256 of it" in message
    assert "\n" not in message and len(message) <= 300 + len(tmp_path.as_posix())
    # ... and written again, recorded, when the run resumes from its backup of step 3.
    backup = str(tmp_path / "backup.weights.h5")
    save_weights_atomically(model, backup)
    assert restore_checkpoint(directory, 3, backup)
    check_checkpoint(unrecorded)
    assert not restore_checkpoint(directory, 3, backup)  # recorded: kept
    # A record written before the step was kept (0.3.0's) still loads what it lacks.
    write_json(record_file, {})
    check_checkpoint(unrecorded)


@contextlib.contextmanager
def file_size_limit(limit):
    """Files of this process cannot grow past `limit` bytes (`ulimit -f`): a write beyond it
    fails with `EFBIG`, as on a full disk (`SIGXFSZ`, which would kill the process, ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def snapshot(directory):
    """`{relative path: bytes}` of every file under `directory`."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, directory)] = open(path, "rb").read()
    return found


def test_a_failed_write_raises_oserror_and_keeps_the_previous_files(translator, tmp_path, capsys):
    # Before: HDF5 failed inside its own writes (`RuntimeError: Can't decrement id ref
    # count ... File too large`) and the process died with a segmentation fault.
    from keras_transformer.training.checkpoints import save_weights_atomically

    translator.save_to_preset(tmp_path / "preset")
    checkpoint = str(tmp_path / "checkpoints" / "ckpt-00000001.weights.h5")
    save_weights_atomically(translator.model, checkpoint)
    before = snapshot(tmp_path)
    with file_size_limit(20_000):
        with pytest.raises(OSError, match="File too large"):
            translator.save_to_preset(tmp_path / "preset")
        with pytest.raises(OSError, match="File too large"):
            save_weights_atomically(translator.model, checkpoint)
        status = cli.main(["export", FIXTURE, str(tmp_path / "ct2"), "--format", "ctranslate2"])
    assert snapshot(tmp_path) == before  # The old files intact, no temporary left.
    errors = capsys.readouterr().err
    assert status == 2 and errors.count("\n") == 1 and "File too large" in errors, errors


@pytest.mark.slow
def test_a_saved_model_export_that_fails_to_write_raises_oserror(translator, tmp_path):
    # TensorFlow writes a SavedModel's files itself and reported a full disk or a file size
    # limit as `OutOfRangeError` / `ResourceExhaustedError` (exit 1 on the command line).
    from keras_transformer.export import export_saved_model

    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "saved_model.pb").write_text("the version being served")
    before = snapshot(tmp_path)
    with file_size_limit(20_000):  # The model's weights and graph are larger.
        with pytest.raises(OSError, match="File too large") as raised:
            export_saved_model(translator, tmp_path / "served", jit_compile=False, overwrite=True)
    assert raised.value.errno == errno.EFBIG
    assert snapshot(tmp_path) == before


@contextlib.contextmanager
def small_filesystem(directory, size):
    """A `size`-byte tmpfs mounted on `directory` (root on Linux only: skips elsewhere)."""
    os.makedirs(directory)
    command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)]
    try:
        mounted = subprocess.run(command, capture_output=True).returncode == 0
    except OSError:
        mounted = False
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (needs root on Linux); ulimit -f tests cover it")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


@pytest.mark.slow
def test_a_full_filesystem_fails_every_save_with_one_oserror(translator, tmp_path, capsys):
    # The disk-full case itself (ENOSPC), where `ulimit -f` gives EFBIG.
    from keras_transformer.export.saved_model import _export_in_subprocess
    from keras_transformer.training.checkpoints import save_weights_atomically

    with small_filesystem(tmp_path / "disk", 4 << 20) as disk:
        translator.save_to_preset(disk / "preset")
        checkpoint = str(disk / "checkpoints" / "ckpt-00000001.weights.h5")
        save_weights_atomically(translator.model, checkpoint)
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        with open(disk / "other.bin", "wb") as filler:  # Another program fills the disk.
            filler.write(b"\0" * (free - (64 << 10)))
        before = snapshot(disk)
        with pytest.raises(OSError, match="No space left on device"):
            translator.save_to_preset(disk / "preset")
        with pytest.raises(OSError, match="No space left on device"):
            save_weights_atomically(translator.model, checkpoint)
        status = cli.main(["export", FIXTURE, str(disk / "ct2"), "--format", "ctranslate2"])
        # A SavedModel export from JAX or PyTorch runs in a TensorFlow subprocess: its error
        # comes back as the same `OSError`.
        with pytest.raises(OSError, match="No space left on device") as raised:
            _export_in_subprocess(FIXTURE, str(disk / "served"), False, {})
        assert raised.value.errno == errno.ENOSPC
        assert snapshot(disk) == before
    errors = capsys.readouterr().err
    assert status == 2 and errors.count("\n") == 1 and "No space left" in errors, errors


def test_a_preset_save_killed_between_its_renames_loads_the_old_preset_intact(translator, tmp_path):
    # End to end through a real save (one subprocess with Keras), without the exchange: the
    # kill leaves no `preset/`; the next start puts the old one back, and it loads (its
    # SHA-256 checked).
    from keras_transformer import Translator

    translator.save_to_preset(tmp_path / "preset")
    status = run_writer("preset", tmp_path, "5", kill_after=2, exchange=False, keras_file=FIXTURE)
    assert status == 137 and not (tmp_path / "preset").exists()
    remove_temporaries(tmp_path)
    assert os.listdir(tmp_path) == ["preset"]
    assert Translator.from_preset(tmp_path / "preset").beam_size == translator.beam_size != 5


# === A kill after each durable write of every save, end to end ===
# A kill -9 right after the N-th durable step (a file fsynced and renamed, a directory
# swapped) leaves on disk exactly what the writer's files are at that instant: every write
# before it is complete and flushed, and nothing runs in between. So instead of one
# subprocess (and one Keras import, one trace) per kill point, each save runs once here with
# `files.durable_step` copying the output directory after each step: the copies are what the
# kills leave, and each goes through what the next start does, then is checked. (The kills
# of real processes above check that the hook sits after each step.)


@contextlib.contextmanager
def copies_after_each_durable_step(monkeypatch, directory, into):
    """Yields a list that fills with copies of `directory`, one after each durable step."""
    real, copies = files.durable_step, []

    def step():
        real()
        copy = into / str(len(copies) + 1)
        shutil.copytree(directory, copy, symlinks=True)
        copies.append(copy)

    monkeypatch.setattr(files, "durable_step", step)
    yield copies
    monkeypatch.setattr(files, "durable_step", real)


@pytest.mark.slow
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two_renames"])
@pytest.mark.parametrize("kind", ["preset", "ctranslate2", "saved_model"])
def test_a_kill_after_each_write_of_an_export_leaves_a_complete_version(
    translator, tmp_path, monkeypatch, kind, exchange
):
    if kind == "saved_model" and exchange:
        pytest.skip("the same swap as the other exports; one trace (12 s) is enough")
    # The old version: any complete directory (what a model server serves, say).
    if kind == "ctranslate2":
        pytest.importorskip("ctranslate2")
    from keras_transformer.export import export_ctranslate2, export_saved_model

    writers = {
        "preset": translator.save_to_preset,
        "ctranslate2": lambda path: export_ctranslate2(translator, path, overwrite=True),
        "saved_model": lambda path: export_saved_model(
            translator, path, jit_compile=False, overwrite=True
        ),
    }
    monkeypatch.setattr(files, "USE_EXCHANGE", exchange)
    root = tmp_path / "root"
    (root / "out").mkdir(parents=True)
    (root / "out" / "metadata.json").write_text("{}")  # (an earlier preset's name too)
    (root / "out" / "saved_model.pb").write_text("the version being served")
    old = snapshot(root)
    with copies_after_each_durable_step(monkeypatch, root, tmp_path / "kills") as copies:
        writers[kind](root / "out")
    new = snapshot(root)
    assert old != new
    found = []
    for copy in copies:
        remove_temporaries(copy)  # What the next export (or `train`) does first.
        assert os.listdir(copy) == ["out"]
        found.append("old" if snapshot(copy) == old else "new" if snapshot(copy) == new else "?")
    # Killed after the new directory is complete (old), after the swap or the second rename
    # (new; with the exchange, once more after the old copy is deleted), and, with two
    # renames, between them (old, put back by the next start).
    assert found == (["old", "new", "new"] if exchange else ["old", "old", "new"])


@pytest.mark.slow
def test_a_kill_after_each_write_of_backups_and_checkpoints_keeps_every_record_true(
    tmp_path, monkeypatch
):
    import keras
    import numpy as np

    from keras_transformer.training.backup import ResumableBackupAndRestore
    from keras_transformer.training.checkpoints import (
        RECORDED_FROM_KEY,
        SHA256_FILENAME,
        PeriodicCheckpoint,
        check_checkpoint,
        list_checkpoints,
        restore_checkpoint,
    )

    def model():
        keras.utils.set_random_seed(1)
        built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
        built.compile(keras.optimizers.Adam(0.1), "mse")
        return built

    run = tmp_path / "run"
    weights = {}  # step -> the model's weights after it
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: weights.__setitem__(
            len(weights) + 1, [w.copy() for w in trained.get_weights()]
        )
    )
    trained = model()
    callbacks = [
        record,
        ResumableBackupAndRestore(str(run / "backup"), save_freq=1, delete_checkpoint=False),
        PeriodicCheckpoint(str(run / "checkpoints"), save_freq=1, keep=2),
    ]
    data = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    with copies_after_each_durable_step(monkeypatch, run, tmp_path / "kills") as copies:
        trained.fit(data, data, batch_size=2, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    assert len(copies) >= 4 * 4  # 4 steps: a backup (2 files) and a checkpoint (2 files) each

    def same(left, right):
        return all(np.array_equal(a, b) for a, b in zip(left, right, strict=True))

    backup_steps = set()
    for copy in copies:
        for directory in ("backup", "checkpoints"):
            if (copy / directory).is_dir():
                remove_temporaries(copy / directory)  # What the next run does first.
        # The backup that `state.json` names exists, is intact, and restores its step.
        state = files.read_json(copy / "backup" / "state.json")
        if state is not None and (copy / "checkpoints").is_dir():
            # What a resumed run does next: the checkpoint of the backup's step, if missing
            # or unrecorded (killed between its two writes), written again from the backup.
            backup_file = str(copy / "backup" / state["weights"])
            restore_checkpoint(str(copy / "checkpoints"), state["step"], backup_file, keep=2)
        if state is not None:
            restored = model()
            callback = ResumableBackupAndRestore(str(copy / "backup"))
            callback.set_model(restored)
            callback.on_train_begin()
            assert same(restored.get_weights(), weights[state["step"]])
            backup_steps.add(state["step"])
        # Every recorded checkpoint exists; every checkpoint is complete and its step's.
        records = files.read_json(copy / "checkpoints" / SHA256_FILENAME) or {}
        records.pop(RECORDED_FROM_KEY, None)
        assert all((copy / "checkpoints" / name).is_file() for name in records)
        for step, path in list_checkpoints(copy / "checkpoints"):
            check_checkpoint(path)
            restored = model()
            restored.load_weights(path)
            assert same(restored.get_weights(), weights[step])
    assert backup_steps == {1, 2, 3, 4}
