"""`keras_transformer.files`: atomic writes that never leave a partial file."""

import os
import subprocess
import sys

import pytest

from keras_transformer import files
from keras_transformer.files import atomic_directory, atomic_path, remove_temporaries
from keras_transformer.training import list_checkpoints


def test_atomic_path_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "ckpt-00000001.weights.h5"
    path.write_text("complete")
    with pytest.raises(RuntimeError), atomic_path(path) as temporary:
        with open(temporary, "w") as file:
            file.write("half")
        raise RuntimeError("killed")
    assert path.read_text() == "complete"
    assert os.listdir(tmp_path) == [path.name]
    # What a `kill -9` leaves: a temporary file. Loaders never see it; the next run removes it.
    (tmp_path / ".tmp-1234abcd-ckpt-00000002.weights.h5").write_text("half")
    assert [step for step, _ in list_checkpoints(str(tmp_path))] == [1]
    assert remove_temporaries(str(tmp_path)) == 1


def test_atomic_directory_replaces_the_whole_directory(tmp_path):
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    with atomic_directory(target) as temporary:
        os.makedirs(temporary)
        with open(os.path.join(temporary, "new.pb"), "w") as file:
            file.write("new")
    assert os.listdir(target) == ["new.pb"]
    assert os.listdir(tmp_path) == ["saved_model"]


def test_atomic_directory_temporaries_are_all_cleaned_and_the_old_one_put_back(
    tmp_path, monkeypatch
):
    # Fail the swap between its two renames: the moment a kill would leave both the new
    # directory and the old one under temporary names.
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    replace, seen = os.replace, []

    def failing_replace(source, destination):
        if os.fspath(destination) == str(target) and not seen:
            seen.extend(sorted(os.listdir(tmp_path)))
            raise OSError("killed")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", failing_replace)
    monkeypatch.setattr(files, "USE_EXCHANGE", False)  # The two renames of other systems.
    with pytest.raises(OSError, match="killed"), atomic_directory(target) as temporary:
        os.makedirs(temporary)
    # One naming rule: every temporary there was starts with `.tmp-` (what
    # `remove_temporaries` clears), and the old directory is back in place.
    assert len(seen) == 2 and all(name.startswith(".tmp-") for name in seen)
    assert os.listdir(tmp_path) == ["saved_model"]
    assert os.listdir(target) == ["old.pb"]


def test_the_next_writer_removes_what_a_killed_writer_left_and_keeps_a_live_ones(tmp_path):
    # Before: a writer killed right after its exchange left the old directory under
    # `.tmp-TOKEN-best` for good.
    writer = [
        sys.executable,
        os.path.join(os.path.dirname(__file__), "scripts", "reliability_writer.py"),
    ]
    subprocess.run([*writer, "directory", str(tmp_path), "1"], check=True)
    killed = {**os.environ, files.KILL_AFTER_VARIABLE: "2"}  # the exchange's step
    assert subprocess.run([*writer, "directory", str(tmp_path), "2"], env=killed).returncode == 137
    if not (tmp_path / "best").is_dir():
        pytest.skip("no RENAME_EXCHANGE on this file system (the next writer puts it back)")
    (leftover,) = [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    assert (tmp_path / leftover / "config.json").read_text() == "1"
    dead = leftover.split("-")[1].split(".")[1]
    (tmp_path / f".tmp-0123abcd.{dead}-state.json").write_text("half")
    # A live writer's temporaries (the parent of this process), and an older version's (no
    # PID: its writer cannot be told), are kept.
    kept = [f".tmp-0123abcd.{os.getppid()}-best", ".tmp-0123abcd-best"]
    for name in kept:
        (tmp_path / name).mkdir()
    with atomic_directory(tmp_path / "best") as temporary:
        os.makedirs(temporary)
    files.write_json(tmp_path / "state.json", {})
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, "best", "state.json"])


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(tmp_path, plant):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    lock = run / files.LOCK_FILENAME
    if plant == "symlink":
        lock.symlink_to(os.path.relpath(victim, run))
    elif plant == "hardlink":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    with pytest.raises(OSError, match="is a link .symbolic or hard. or not a regular file") as info:
        files.lock_directory(run)
    assert "\n" not in str(info.value) and str(lock) in str(info.value)
    assert victim.read_text() == "precious\n"
    assert str(run) not in files._locks
