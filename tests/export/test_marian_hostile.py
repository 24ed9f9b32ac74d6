"""Hostile Marian imports cost bounded memory and time (`keras_transformer.export.marian`).

Each file here is built by hand, tiny, the way an attacker would: a billion-laughs YAML, a
zip bomb in the `.npz`, a `config.json` whose sizes the weights do not hold. Each import runs
with this process's address space capped at what it already maps plus `HEADROOM` (and a time
limit): the refusal must come before anything of the hostile size is built. The refusals
that need a whole model (bad settings of a model that otherwise maps) are in test_marian.py.
"""

import contextlib
import json
import os
import signal
import sys
import time
import zipfile

import numpy as np
import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("safetensors")

from keras_transformer import cli  # noqa: E402
from keras_transformer.export import marian_npz  # noqa: E402
from keras_transformer.export.marian import import_marian  # noqa: E402
from tests.export.test_marian import MODEL_YML  # noqa: E402

pytestmark = pytest.mark.one_backend

# What a refusal may allocate; each hostile file here costs gigabytes (or hours) without
# its bound. Measured: the refusals below take < 20 MB.
HEADROOM = 256 << 20
PIECES = ["</s>", "<unk>", "▁a", "▁b", "▁c"]
D_MODEL = 4
LAYER_ARRAYS = ("encoder_l1_self_Wq", "decoder_l1_self_Wq")  # one layer each side


@contextlib.contextmanager
def bounded(seconds=10, headroom=HEADROOM):
    """This process may map at most `headroom` more bytes (`RLIMIT_AS`: an allocation past it
    raises `MemoryError`) and run `seconds` more (then `TimeoutError`) inside the block."""
    resource = pytest.importorskip("resource")
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    with open("/proc/self/status", encoding="ascii") as status:
        mapped = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped + headroom if hard == resource.RLIM_INFINITY else min(hard, mapped + headroom)

    def expire(signum, frame):
        raise TimeoutError(f"more than {seconds} s")

    handler = signal.signal(signal.SIGALRM, expire)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, handler)


def refusal(source, match):
    """The one-line `ValueError` of importing `source`, bounded; returns its message."""
    with bounded(), pytest.raises(ValueError, match=match) as caught:
        import_marian(source)
    message = str(caught.value)
    assert len(message) < 1000, message[:1000]
    return message


# === Marian .npz releases ===
def model_yml(**changes):
    """`special:model.yml` of a model of `D_MODEL` with one layer each side, as bytes."""
    settings = dict(MODEL_YML, **{"dim-emb": D_MODEL, "enc-depth": 1, "dec-depth": 1})
    settings.update({"transformer-dim-ffn": 8, "dim-vocabs": [len(PIECES)] * 2}, **changes)
    return yaml.safe_dump(settings, sort_keys=False).encode() + b"\0"


def write_release(directory, settings=None, arrays=None):
    """A Marian release of `PIECES` (its `.spm` files placeholders: the refusals come before
    they are parsed), its `.npz` holding `settings` (bytes) and `arrays` (name -> array)."""
    directory.mkdir()
    (directory / "model.vocab.yml").write_text(
        yaml.safe_dump({piece: i for i, piece in enumerate(PIECES)}, allow_unicode=True),
        encoding="utf-8",
    )
    for side in ("source", "target"):
        (directory / f"{side}.spm").write_bytes(b"placeholder")
    settings = model_yml() if settings is None else settings
    np.savez(
        directory / "model.npz",
        **{"special:model.yml": np.frombuffer(settings, "int8")},
        **(arrays or {}),
    )
    return directory


def billion_laughs(levels=9, width=9):
    """YAML whose `type` is `width ** levels` strings through aliases (a few hundred bytes)."""
    lines = ['a0: &a0 "lol"']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return ("\n".join(lines) + f"\ntype: *a{levels}\n").encode()


@pytest.mark.parametrize(
    "settings, match",
    [
        (billion_laughs(), r"special:model.yml of the .npz uses an alias \('a0'\): refused"),
        (b"type: " + b"[" * 900 + b"]" * 900, "more than 65536 values or 32 levels"),
        (b"type: [" + b"0, " * 70_000 + b"]", "more than 65536 values or 32 levels"),
    ],
    ids=["billion-laughs", "deep", "wide"],
)
def test_hostile_model_yml_is_refused_before_it_expands(tmp_path, settings, match):
    # Before: the billion laughs took 11 GB and quoted it in a 2 GB message; the deep one
    # raised RecursionError.
    refusal(write_release(tmp_path / "opus", settings), match)


def test_hostile_vocabulary_and_decoder_yml_are_bounded(tmp_path):
    directory = write_release(tmp_path / "opus")
    (directory / "decoder.yml").write_text("beam-size: " + "[" * 900 + "]" * 900)
    refusal(directory, "decoder.yml holds more than 65536 values or 32 levels")
    (directory / "decoder.yml").unlink()
    (directory / "model.vocab.yml").write_bytes(billion_laughs(levels=3) + b"</s>: 0\n")
    refusal(directory, r"model.vocab.yml uses an alias \('a0'\)")


def test_npz_zip_bomb_is_refused_before_it_is_decompressed(tmp_path):
    """512 MiB of zeros in a 0.5 MB file (the issue's: 2 GiB in 2.1 MB, peak 2.9 GB)."""
    directory = write_release(tmp_path / "opus")
    size = 512 << 20
    with zipfile.ZipFile(directory / "model.npz", "a", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("Wemb.npy", "w", force_zip64=True) as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (size // 4,)}
            np.lib.format.write_array_header_1_0(member, header)
            zeros = bytes(16 << 20)
            for _ in range(size // len(zeros)):
                member.write(zeros)
    refusal(directory, "would take 53687.* bytes, more than 8 times the file's")


def test_npz_arrays_are_checked_before_any_is_read(tmp_path, monkeypatch):
    read = []
    reader = marian_npz._npz_array
    monkeypatch.setattr(
        marian_npz,
        "_npz_array",
        lambda archive, path, name: read.append(name) or reader(archive, path, name),
    )
    # An array of the model's sizes with no place in it: refused with only the settings read.
    arrays = {name: np.zeros((D_MODEL, D_MODEL), "f4") for name in LAYER_ARRAYS}
    directory = write_release(
        tmp_path / "extra", arrays={**arrays, "Wpos": arrays[LAYER_ARRAYS[0]]}
    )
    refusal(directory, "with no place in the model: 'Wpos'")
    assert read == ["special:model.yml"]
    # A member whose header declares more than the zip directory says it holds.
    directory = write_release(tmp_path / "liar")
    with zipfile.ZipFile(directory / "model.npz", "a") as archive:
        with archive.open("Wemb.npy", "w") as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (1 << 30,)}
            np.lib.format.write_array_header_1_0(member, header)
    refusal(directory, r"member 'Wemb.npy' holds 128 bytes, its header declares 4294967424")


def test_npz_layer_count_is_the_arrays(tmp_path):
    # Before: the expected names of 10**12 layers were listed, one by one.
    settings = model_yml(**{"enc-depth": 10**12, "dec-depth": 100_000})
    message = refusal(write_release(tmp_path / "opus", settings), "enc-depth=1000000000000")
    assert (
        "but the .npz arrays hold tensors of 0 layers" in message and "dec-depth=100000" in message
    )


# === Hugging Face directories ===
HF_CONFIG = {
    "model_type": "marian",
    "vocab_size": len(PIECES) + 1,
    "d_model": D_MODEL,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 8,
    "decoder_ffn_dim": 8,
    "activation_function": "swish",
    "pad_token_id": len(PIECES),
    "eos_token_id": 0,
}


def write_hf_directory(directory, config_text=None, **changes):
    """A Hugging Face directory of `PIECES` + `<pad>` whose weights hold one tensor per
    stack (enough for the refusals here), its `config.json` `HF_CONFIG` with `changes`."""
    from safetensors.numpy import save_file

    directory.mkdir()
    (directory / "config.json").write_text(config_text or json.dumps(dict(HF_CONFIG, **changes)))
    vocabulary = {piece: i for i, piece in enumerate([*PIECES, "<pad>"])}
    (directory / "vocab.json").write_text(json.dumps(vocabulary))
    for side in ("source", "target"):
        (directory / f"{side}.spm").write_bytes(b"placeholder")
    tensors = {
        "model.shared.weight": np.zeros((len(vocabulary), D_MODEL), "float32"),
        "model.encoder.layers.0.fc1.bias": np.zeros(8, "float32"),
        "model.decoder.layers.0.fc1.bias": np.zeros(8, "float32"),
    }
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


@pytest.mark.parametrize(
    "changes, match",
    [
        # Before: list(range(10**9)), a MemoryError.
        ({"vocab_size": 10**9}, "vocab.json must map 1000000000 .* Received: 6 entries"),
        # Before: 2 x 100,000 layers built for hours (200 + 200: 50 s to refuse).
        (
            {"encoder_layers": 100_000, "decoder_layers": 100_000},
            "encoder_layers=100000 but the weights hold tensors of 1 layer; decoder_layers=100000",
        ),
        # Before: a (65536, 65536) attention per layer built before the weights were compared.
        (
            {"d_model": 1 << 16},
            r"'shared.weight' has shape \(6, 4\); config.json implies \(6, 65536\)",
        ),
        (
            {"encoder_ffn_dim": 1 << 30, "decoder_ffn_dim": 1 << 30},
            "lack 'encoder.layers.0.self_attn.q_proj.weight'",
        ),
    ],
    ids=["vocab_size", "layers", "d_model", "ffn_dim"],
)
def test_config_sizes_are_checked_against_the_files(tmp_path, changes, match):
    refusal(write_hf_directory(tmp_path / "hf", **changes), match)


def test_deep_json_gets_one_line_naming_the_file(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000  # Before: RecursionError, a traceback.
    directory = write_hf_directory(tmp_path / "hf", config_text=f'{{"model_type": {deep}}}')
    refusal(directory, "config.json is nested too deeply")
    started = time.perf_counter()
    assert cli.main(["import", "--from", "marian", str(directory), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "config.json is nested too deeply" in error[0], error
    assert time.perf_counter() - started < 10


# === Links: the preset loader's rule ===
def as_hub_snapshot(directory, blobs_elsewhere=None):
    """`directory` moved into a Hugging Face cache layout, each file a link into `blobs/`
    (itself a link to `blobs_elsewhere` when given). Returns the snapshot directory."""
    repository = directory.parent / "models--owner--name"
    blobs = repository / "blobs"
    snapshot = repository / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    if blobs_elsewhere is not None:
        blobs_elsewhere.mkdir()
        os.symlink(blobs_elsewhere, blobs)
    else:
        blobs.mkdir()
    for name in os.listdir(directory):
        os.replace(directory / name, blobs / f"blob-{name}")
        os.symlink(os.path.join("..", "..", "blobs", f"blob-{name}"), snapshot / name)
    return snapshot


def test_links_out_of_the_source_are_refused_naming_the_file(tmp_path):
    # Before: followed, the outside file's contents imported into the preset.
    outside = tmp_path / "outside.json"
    directory = write_hf_directory(tmp_path / "hf")
    os.replace(directory / "vocab.json", outside)
    os.symlink(outside, directory / "vocab.json")
    refusal(directory, "vocab.json: a symbolic link leading outside the source directory")
    release = write_release(tmp_path / "opus")
    os.replace(release / "model.vocab.yml", tmp_path / "outside.yml")
    os.symlink(tmp_path / "outside.yml", release / "model.vocab.yml")
    refusal(release, "model.vocab.yml: a symbolic link leading outside the source directory")
    # A Hugging Face cache snapshot: links into its real blobs/ are read (the import goes on
    # to the next check); a blobs/ that is itself a link is no root.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    snapshot = as_hub_snapshot(write_hf_directory(tmp_path / "a" / "hf", d_model=1 << 16))
    refusal(snapshot, r"'shared.weight' has shape \(6, 4\)")
    snapshot = as_hub_snapshot(write_hf_directory(tmp_path / "b" / "hf"), tmp_path / "elsewhere")
    refusal(snapshot, "config.json: a symbolic link leading outside the source directory")


# === pytorch_model.bin: its zip checked before torch.load ===
def with_torch_bin(directory, tmp_path):
    """`directory` (`write_hf_directory`'s) with its weights as `pytorch_model.bin`."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    tensors = load_file(str(directory / "model.safetensors"))
    os.remove(directory / "model.safetensors")
    torch.save(
        {k: torch.from_numpy(v) for k, v in tensors.items()}, directory / "pytorch_model.bin"
    )
    return directory / "pytorch_model.bin"


def rezip(path, edit):
    """Rewrites the zip `path` member by member through `edit(writer, info, data)`."""
    with zipfile.ZipFile(path) as reader:
        members = [(info, reader.read(info)) for info in reader.infolist()]
    with zipfile.ZipFile(path, "w") as writer:
        for info, data in members:
            edit(writer, info, data)


def add_member(writer, info, data):
    writer.writestr(info, data)
    if info.filename.endswith("/data.pkl"):
        writer.writestr(info.filename.replace("data.pkl", "evil.py"), b"import os")


def compress(writer, info, data):
    info.compress_type = zipfile.ZIP_DEFLATED
    writer.writestr(info, data)


@pytest.mark.parametrize(
    "edit, match",
    [
        (add_member, r"holds the member '[^']*/evil.py', which PyTorch does not write"),
        (compress, r"member '[^']*' is compressed \(PyTorch stores them\)"),
        ("legacy", r"is not a zip file \(PyTorch's format since 1.6"),
    ],
)
def test_a_crafted_pytorch_model_bin_is_refused_before_torch_load(
    tmp_path, monkeypatch, edit, match
):
    directory = write_hf_directory(tmp_path / "hf")
    path = with_torch_bin(directory, tmp_path)
    import torch

    # The untouched file passes the zip check and goes on to torch.load.
    from keras_transformer.export.marian import check_torch_zip

    check_torch_zip(str(path))
    if edit == "legacy":
        torch.save({"x": torch.zeros(2)}, path, _use_new_zipfile_serialization=False)
    else:
        rezip(path, edit)

    def no_load(*args, **kwargs):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_load)
    message = refusal(directory, "pytorch_model.bin " + match)
    assert "\n" not in message and len(message) <= 300, message


def test_vocab_json_is_bounded_by_the_vocabulary_size_before_it_is_parsed(tmp_path, monkeypatch):
    directory = write_hf_directory(tmp_path / "hf")
    vocabulary = json.loads((directory / "vocab.json").read_text())
    # 6 pieces: a 1 MiB vocab.json (was read and parsed up to 128 MiB) is refused unparsed.
    vocabulary.update({f"▁{i:07d}" + "x" * 200: 6 + i for i in range(5000)})
    (directory / "vocab.json").write_text(json.dumps(vocabulary))

    loads = json.loads

    def no_vocabulary_parse(text, *args, **kwargs):
        assert "0000000" not in text, "vocab.json was parsed"
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", no_vocabulary_parse)
    message = refusal(directory, r"The vocab.json is too large: \d+ bytes, more than 5632")
    assert "\n" not in message and len(message) <= 300, message
