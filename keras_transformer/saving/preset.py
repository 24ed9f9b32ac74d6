"""Preset directories: a trained `Translator` (or `Transformer`) as keras-hub users share them.

`Translator.save_to_preset(directory)` writes, and `Translator.from_preset(directory)` reads
(each handing its own class to the functions here, which import no model class):

```
config.json                         the Transformer (Keras serialized config)
model.weights.h5                    its weights
tokenizer.json                      the source (or shared) tokenizer, without its vocabulary
assets/tokenizer/vocabulary.txt     ... its vocabulary (the tokenizer's own assets)
target_tokenizer.json               the target tokenizer (only when it has one of its own)
assets/target_tokenizer/...         ... its assets
translator.json                     the search settings (beam size, length penalty, lengths)
metadata.json                       format version, versions, backend, parameter count, date,
                                    the SHA-256 of model.weights.h5
```

`Transformer.save_to_preset` writes `config.json`, `model.weights.h5` and `metadata.json`
only, and `Transformer.from_preset` reads those three files of either kind of preset. The
file names are keras-hub's (`config.json` for the backbone, `tokenizer.json` and
`assets/tokenizer/` for the tokenizer, `metadata.json`), so a directory is shared the way
keras-hub presets are: upload it as it is to Kaggle Models or the Hugging Face Hub.

A directory is written atomically (`keras_transformer.files.atomic_directory`): at
every moment it is absent, the old preset or the new one. Weights are backend-independent:
a preset saved under one Keras backend loads under the others.

Loading checks the directory before it reads any weight, and reports every problem it finds
in one `ValueError`: missing files, an unknown format version, a configuration that is not a
`Transformer`, weights of another architecture than `config.json` describes, a vocabulary of
another size than the model's embedding, weights whose SHA-256 is not the one `metadata.json`
records (a preset written by 0.2.0 records none, and loads unchecked, with a note; any
other version's preset without the record is refused), weights holding NaN or infinity.
Only the fixed file names above are opened; no path written inside a file is ever followed, and configurations go
through the same checks as a `.keras` file's (`Translator.from_config`).
"""

import datetime
import hashlib
import inspect
import json
import logging
import os
import stat
import threading
import time
from collections import Counter

import keras

from keras_transformer._checks import short_repr
from keras_transformer.files import atomic_directory, link_outside
from keras_transformer.saving.checks import deserialize_part
from keras_transformer.saving.weights import check_finite, check_sha256, weights_bytes
from keras_transformer.version import __version__

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = "metadata.json"
TRANSLATOR_FILE = "translator.json"
ASSETS_DIR = "assets"
# The tokenizers of a Translator: its attribute, the config file and the assets directory.
TOKENIZER_PARTS = {"tokenizer": "tokenizer.json", "target_tokenizer": "target_tokenizer.json"}
FORMAT_VERSION = 1
# The groups of a `.weights.h5` file that hold a model's own variables (a compiled model's
# file also has `optimizer`).
MODEL_GROUPS = ("layers", "vars")
# The JSON files are configurations: a larger one is refused before it is read.
MAX_JSON_BYTES = 1 << 24
# Presets on a hub, as keras-hub names them: `hf://owner/name` (Hugging Face Hub) and
# `kaggle://owner/model/keras/variation[/version]` (Kaggle Models).
HUB_SCHEMES = ("hf://", "kaggle://")
# Seconds a hub download may go without a byte arriving in the hub's cache before
# `hub_directory` gives up on it (a hub that accepts the connection and never answers): the
# environment variable, and its default.
HUB_TIMEOUT_VARIABLE = "KERAS_TRANSFORMER_HUB_TIMEOUT"
DEFAULT_HUB_TIMEOUT = 60.0
# How to read a preset without the network, for the messages.
OFFLINE_HINTS = {
    "hf": "set HF_HUB_OFFLINE=1 to read huggingface_hub's cache only, or pass the preset's "
    "local directory",
    "kaggle": "a versioned handle (.../VARIATION/VERSION) already in kagglehub's cache loads "
    "without the network, or pass the preset's local directory",
}
# The key of `metadata.json` that records the SHA-256 of `model.weights.h5`, and the versions
# that wrote presets without it (its weights load unchecked, with a note).
WEIGHTS_SHA256_KEY = "weights_sha256"
UNRECORDED_VERSIONS = ("0.2.0",)

logger = logging.getLogger("keras_transformer")


# === Saving ===


def save_translator(translator, directory, cls):
    """Writes `translator` as a preset directory (see the module docstring).

    Args:
        translator: `keras_transformer.Translator`.
        directory: str or `os.PathLike`. Created, or replaced if it holds a preset.
        cls: the class `translator` must be an instance of (`Translator`).

    Returns:
        `directory`, as a str.
    """
    if not isinstance(translator, cls):
        raise ValueError(
            f"`translator` must be a `keras_transformer.{cls.__name__}`. Received: {translator!r}"
        )
    settings = translator.get_config()
    for key in ("model", *TOKENIZER_PARTS):
        settings.pop(key)
    files = {TRANSLATOR_FILE: _registered(translator, settings)}
    tokenizers = {}
    for attribute, name in TOKENIZER_PARTS.items():
        tokenizer = getattr(translator, attribute)
        if tokenizer is not None:
            files[name] = keras.saving.serialize_keras_object(tokenizer)
            tokenizers[attribute] = tokenizer
    return _write(directory, translator.model, "Translator", files, tokenizers)


def save_transformer(model, directory, cls):
    """Writes `model` (a `Transformer`) as a preset directory of `config.json`,
    `model.weights.h5` and `metadata.json`.

    Args:
        model: `keras_transformer.Transformer`.
        directory: str or `os.PathLike`. Created, or replaced if it holds a preset.
        cls: the class `model` must be an instance of (`Transformer`).

    Returns:
        `directory`, as a str.
    """
    if not isinstance(model, cls):
        raise ValueError(f"`model` must be a `keras_transformer.{cls.__name__}`. Received: {model!r}")
    return _write(directory, model, "Transformer", {}, {})


def _write(directory, model, class_name, files, tokenizers):
    directory = os.fspath(directory)
    _check_destination(directory)
    # Built in memory, written by Python: a full disk is an `OSError`, the old preset intact.
    weights = weights_bytes(_without_optimizer(model))
    files = {
        CONFIG_FILE: _model_config(keras.saving.serialize_keras_object(model)),
        **files,
        METADATA_FILE: {
            "format_version": FORMAT_VERSION,
            "class_name": class_name,
            "keras_transformer_version": __version__,
            "keras_version": keras.__version__,
            "backend": keras.backend.backend(),
            "parameter_count": int(model.count_params()),
            "date_saved": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            WEIGHTS_SHA256_KEY: hashlib.sha256(weights).hexdigest(),
        },
    }
    with atomic_directory(directory) as temporary:
        os.makedirs(temporary)
        for name, value in files.items():
            with open(os.path.join(temporary, name), "w", encoding="utf-8") as file:
                json.dump(value, file, indent=2)
                file.write("\n")
        with open(os.path.join(temporary, WEIGHTS_FILE), "wb") as file:
            file.write(weights)
        for attribute, tokenizer in tokenizers.items():
            assets = os.path.join(temporary, ASSETS_DIR, attribute)
            os.makedirs(assets)
            tokenizer.save_assets(assets)
    return directory


def _without_optimizer(model):
    """`model`, or an uncompiled copy of it: Keras writes a compiled model's optimizer state
    into its weights file, and a preset holds the model's weights only (as keras-hub's)."""
    if getattr(model, "optimizer", None) is None:
        return model
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy


def _model_config(config):
    """A serialized model without its `compile_config`: a preset holds no optimizer state,
    and loading one gives an uncompiled model (as keras-hub's backbones)."""
    if isinstance(config, dict):
        config = {key: value for key, value in config.items() if key != "compile_config"}
    return config


def _check_destination(directory):
    """Refuses to replace a file, or a directory that is neither empty nor a preset: saving
    replaces the whole directory."""
    if not os.path.lexists(directory):
        return
    if os.path.isdir(directory) and not os.path.islink(directory):
        entries = os.listdir(directory)
        if not entries or METADATA_FILE in entries:
            return
        count = len(entries)
        found = (
            f"a directory without {METADATA_FILE} that holds {count} entr"
            f"{'ies' if count > 1 else 'y'}"
        )
    else:
        found = "a file"
    raise ValueError(
        "`directory` must be new, empty or an earlier preset: saving replaces it as a whole. "
        f"Received: directory={directory!r} ({found})"
    )


def _registered(obj, config):
    return {"registered_name": keras.saving.get_registered_name(type(obj)), "config": config}


# === Loading ===


def load_translator(directory, cls):
    """Loads the `Translator` of a preset directory written by `save_translator`.

    Args:
        directory: str or `os.PathLike`.
        cls: the `Translator` class (or a subclass): its `from_config` checks and builds it.

    Returns:
        A `cls` instance.

    Raises:
        FileNotFoundError: `directory` is not a directory.
        ValueError: the directory is not a valid Translator preset; the message lists every
            problem found.
    """
    reader = _Reader(hub_directory(directory), "Translator")
    metadata = reader.metadata()
    if metadata.get("class_name") == "Transformer":
        reader.problems.append(
            f"{METADATA_FILE}: expected a Translator preset, found a Transformer-only preset "
            "(no tokenizer): load it with `Transformer.from_preset`"
        )
    has_target = reader.exists(TOKENIZER_PARTS["target_tokenizer"])
    attributes = [name for name in TOKENIZER_PARTS if name == "tokenizer" or has_target]
    model_config = _model_config(reader.json(CONFIG_FILE))
    translator_config = reader.json(TRANSLATOR_FILE)
    tokenizer_configs = {name: reader.json(TOKENIZER_PARTS[name]) for name in attributes}
    reader.require(WEIGHTS_FILE, *(os.path.join(ASSETS_DIR, name) for name in attributes))
    reader.raise_if_problems()

    settings = _settings(reader, translator_config, cls)
    reader.raise_if_problems()
    config = {**settings, "model": model_config, "target_tokenizer": None, **tokenizer_configs}
    try:
        # The checks of a `.keras` file's configuration: each part of the class it claims,
        # the tokenizers told the model's vocabulary sizes, the decoding memory bounded.
        translator = cls.from_config(config)
    except (ValueError, TypeError) as error:
        reader.fail(f"{CONFIG_FILE}, {TRANSLATOR_FILE} and the tokenizer files: {error}")
    reader.check_model_keys(model_config, type(translator.model))
    reader.check_weights(translator.model, metadata)
    for attribute in attributes:
        tokenizer = getattr(translator, attribute)
        try:
            # Every link under the directory was checked to stay inside the preset.
            tokenizer.load_assets(reader.path(ASSETS_DIR, attribute), follow_symlinks=True)
        except (ValueError, OSError) as error:
            reader.problems.append(f"{ASSETS_DIR}/{attribute}: {error}")
    reader.raise_if_problems()
    reader.load_weights(translator.model)
    return translator


def load_transformer(directory, cls, load_weights=True, **kwargs):
    """Loads the `Transformer` of a preset directory (of a Translator or a Transformer).

    Args:
        directory: str or `os.PathLike`.
        cls: the `Transformer` class (or a subclass) that `config.json` must name.
        load_weights: bool. Load `model.weights.h5`; `False` builds the architecture with
            fresh weights. Defaults to `True`.
        **kwargs: overrides of `config.json`'s constructor arguments (e.g. `dropout`); one
            that changes a weight's shape makes the weights a mismatch.

    Returns:
        A `keras_transformer.Transformer`.
    """
    reader = _Reader(hub_directory(directory), "Transformer")
    metadata = reader.metadata()
    config = _model_config(reader.json(CONFIG_FILE))
    if load_weights:
        reader.require(WEIGHTS_FILE)
    reader.raise_if_problems()
    if kwargs and isinstance(config, dict) and isinstance(config.get("config"), dict):
        config = {**config, "config": {**config["config"], **kwargs}}
    try:
        model = deserialize_part("config", config, cls)
    except (ValueError, TypeError) as error:
        reader.fail(f"{CONFIG_FILE}: {error}")
    reader.check_model_keys(config, type(model))
    reader.raise_if_problems()
    if load_weights:
        reader.check_weights(model, metadata if not kwargs else {})
        reader.raise_if_problems()
        reader.load_weights(model)
    return model


def hub_directory(directory):
    """The local directory of a preset: `directory` itself, or for a hub handle (`hf://owner/
    name`, `kaggle://owner/model/keras/variation[/version]`) the hub client's copy in its
    cache (`huggingface_hub.snapshot_download`, `kagglehub.model_download`: downloaded unless
    cached; `HF_HUB_OFFLINE=1` reads the cache only). Hub presets are read like any other
    preset, links into the Hugging Face cache's `blobs/` included.

    Raises:
        ImportError: the hub's client is not installed (`pip install keras-transformer[hub]`).
        ValueError: the hub client could not provide the preset (its error, and the handle).
    """
    if not (isinstance(directory, str) and directory.startswith(HUB_SCHEMES)):
        return directory
    scheme, handle = directory.split("://", 1)
    module = "huggingface_hub" if scheme == "hf" else "kagglehub"
    try:
        if scheme == "hf":
            import huggingface_hub
            from huggingface_hub.constants import HF_HUB_CACHE
            from huggingface_hub.file_download import repo_folder_name

            download = huggingface_hub.snapshot_download
            cache = os.path.join(HF_HUB_CACHE, repo_folder_name(repo_id=handle, repo_type="model"))
        else:
            import kagglehub
            from kagglehub.config import get_cache_folder

            download = kagglehub.model_download
            cache = os.path.join(get_cache_folder(), "models", *handle.split("/")[:2])
    except ImportError:
        raise ImportError(
            f"Loading a preset from {scheme}:// needs {module}: pip install "
            f"'keras-transformer[hub]'. Received: directory={directory!r}"
        ) from None
    timeout = hub_timeout()
    try:
        return _while_progressing(lambda: download(handle), cache, timeout)
    except TimeoutError:
        raise ValueError(
            f"{module} got no answer from the hub for {timeout:g} s ({HUB_TIMEOUT_VARIABLE}): "
            f"to load without the network, {OFFLINE_HINTS[scheme]}. Received: "
            f"directory={directory!r}"
        ) from None
    except Exception as error:  # The clients raise their own types (network, cache, auth).
        raise ValueError(
            f"{module} could not provide the preset: {type(error).__name__}: {error}. "
            f"Received: directory={directory!r}"
        ) from None


def hub_timeout():
    """Seconds a hub download may go without progress: `KERAS_TRANSFORMER_HUB_TIMEOUT`, or
    `DEFAULT_HUB_TIMEOUT`.

    Raises:
        ValueError: the variable is not a number > 0 (naming it).
    """
    text = os.environ.get(HUB_TIMEOUT_VARIABLE, "")
    if not text:
        return DEFAULT_HUB_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ValueError(
            f"{HUB_TIMEOUT_VARIABLE} must be a number of seconds > 0. Received: "
            f"{HUB_TIMEOUT_VARIABLE}={short_repr(text)}"
        )
    return value


def _while_progressing(function, directory, timeout):
    """`function()`, run in a daemon thread that is given up on (`TimeoutError`) once no byte
    has arrived under `directory` for `timeout` seconds.

    The hub clients wait without limit on a hub that accepts a connection and never answers
    (`huggingface_hub` asks for the repository's files with no timeout), and a bound on the
    whole download would cut a large preset on a slow link: what is bounded is the time
    without progress, the bytes of the files its download writes. The thread given up on is
    a daemon: it does not keep the process alive.
    """
    outcome = {}

    def run():
        try:
            outcome["value"] = function()
        except BaseException as error:  # Handed to the caller.
            outcome["error"] = error

    thread = threading.Thread(target=run, name="keras-transformer-hub", daemon=True)
    thread.start()
    size, last_progress = _tree_bytes(directory), time.monotonic()
    while True:
        thread.join(min(1.0, max(0.0, last_progress + timeout - time.monotonic())))
        if not thread.is_alive():
            break
        now_size = _tree_bytes(directory)
        if now_size != size:
            size, last_progress = now_size, time.monotonic()
        elif time.monotonic() - last_progress >= timeout:
            raise TimeoutError(f"no progress for {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _tree_bytes(directory):
    """The total size of the files under `directory` (0 when it is missing)."""
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile (a finished download renamed)
                pass
    return total


def is_preset(path):
    """Whether `path` is a directory with a preset's `metadata.json` or `model.weights.h5`.

    Whatever else the directory holds: a `saved_model.pb` beside them does not make it a
    SavedModel (`keras_transformer.engines.detect_engine` refuses such a mix).

    Args:
        path: str or `os.PathLike`.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        return False
    # Not `config.json`: a CTranslate2 model directory has one too.
    return any(os.path.lexists(os.path.join(path, name)) for name in (METADATA_FILE, WEIGHTS_FILE))


def _settings(reader, translator_config, cls):
    """The `cls` (Translator) arguments of `translator.json` (model and tokenizers excluded)."""
    if not isinstance(translator_config, dict) or not isinstance(
        translator_config.get("config"), dict
    ):
        reader.problems.append(
            f'{TRANSLATOR_FILE}: expected {{"registered_name": ..., "config": {{...}}}}, '
            f"found {short_repr(translator_config)}"
        )
        return {}
    name = translator_config.get("registered_name")
    expected = keras.saving.get_registered_name(cls)
    if name != expected:
        reader.problems.append(
            f"{TRANSLATOR_FILE}: expected registered_name={expected!r}, found {name!r}"
        )
    known = set(inspect.signature(cls).parameters) - {"model", "kwargs", *TOKENIZER_PARTS}
    settings = dict(translator_config["config"])
    unknown = sorted(set(settings) - known - {"name", "trainable"})
    if unknown:
        reader.problems.append(
            f"{TRANSLATOR_FILE}: unknown settings {unknown}; expected only {sorted(known)}"
        )
    return settings


class _Reader:
    """Reads the fixed files of one preset directory, gathering problems to report at once."""

    def __init__(self, directory, class_name):
        self.directory = os.fspath(directory)
        self.class_name = class_name
        self.problems = []
        if not os.path.isdir(self.directory):
            raise FileNotFoundError(f"No preset directory at {self.directory!r}")

    def path(self, *names):
        """The path of the preset's file (or directory) `names`, once every link on the way
        to it (and, for a directory, under it) is known to stay inside the preset: else the
        load fails naming the link, before its target is opened."""
        path = os.path.join(self.directory, *names)
        outside = link_outside(path, self.directory, "the preset")
        if outside is None and os.path.isdir(path):
            for parent, directories, files in os.walk(path):
                for entry in (*directories, *files):
                    entry = os.path.join(parent, entry)
                    outside = outside or link_outside(entry, self.directory, "the preset")
        if outside is not None:
            self.problems = []
            self.fail(outside)
        return path

    def exists(self, name):
        return os.path.lexists(self.path(name))

    def require(self, *names):
        for name in names:
            if not self.exists(name):
                self.problems.append(f"{name}: missing")

    def json(self, name):
        """The JSON value of the file `name`, or `None` (with a problem noted)."""
        path = self.path(name)
        try:
            status = os.stat(path)
            if not stat.S_ISREG(status.st_mode):
                raise ValueError("not a regular file")
            if status.st_size > MAX_JSON_BYTES:
                raise ValueError(f"{status.st_size} bytes, more than {MAX_JSON_BYTES}")
            with open(path, encoding="utf-8") as file:
                return json.loads(file.read(MAX_JSON_BYTES + 1))
        except FileNotFoundError:
            self.problems.append(f"{name}: missing")
        except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeError included
            self.problems.append(f"{name}: not a readable JSON file ({error})")
        return None

    def check_model_keys(self, config, cls):
        """Notes a problem when `config.json` holds a setting the constructor of `cls` (the
        class it built) does not take, as `translator.json`'s unknown settings are: a file
        that says more than the model reads is not what it claims."""
        if not (isinstance(config, dict) and isinstance(config.get("config"), dict)):
            return
        known = set(inspect.signature(cls).parameters) - {"kwargs"} | {"name", "trainable", "dtype"}
        unknown = sorted(set(config["config"]) - known)
        if unknown:
            self.problems.append(
                f"{CONFIG_FILE}: unknown settings {unknown}; expected only {sorted(known)}"
            )

    def metadata(self):
        metadata = self.json(METADATA_FILE)
        if metadata is None:
            return {}
        if not isinstance(metadata, dict):
            self.problems.append(
                f"{METADATA_FILE}: expected a JSON object, found {short_repr(metadata)}"
            )
            return {}
        class_name = metadata.get("class_name")
        if class_name not in ("Translator", "Transformer"):
            self.problems.append(
                f"{METADATA_FILE}: expected class_name 'Translator' or 'Transformer', found "
                f"{short_repr(class_name)}"
            )
        version = metadata.get("format_version")
        if version != FORMAT_VERSION:
            self.problems.append(
                f"{METADATA_FILE}: unknown format version: expected format_version="
                f"{FORMAT_VERSION}, found {short_repr(version)} (written by keras_transformer "
                f"{metadata.get('keras_transformer_version', 'of an unknown version')})"
            )
        return metadata

    def check_weights(self, model, metadata):
        """Notes a problem when `model.weights.h5` (or the metadata's parameter count) does
        not fit the architecture of `model`, built from `config.json`."""
        expected = Counter(tuple(variable.shape) for variable in model.weights)
        try:
            found = _weight_shapes(self.path(WEIGHTS_FILE))
        except (OSError, ValueError) as error:
            self.problems.append(f"{WEIGHTS_FILE}: not a readable Keras weights file ({error})")
            return
        count = model.count_params()
        recorded = metadata.get("parameter_count")
        if recorded is not None and recorded != count:
            self.problems.append(
                f"architecture mismatch: {CONFIG_FILE} builds {count} parameters, "
                f"{METADATA_FILE} records parameter_count={recorded}"
            )
        if found != expected:
            missing = sorted((expected - found).elements())[:4]
            extra = sorted((found - expected).elements())[:4]
            self.problems.append(
                f"architecture mismatch between {CONFIG_FILE} and {WEIGHTS_FILE}: expected "
                f"{expected.total()} arrays, {count} weights "
                f"({_architecture(model)}); found {found.total()} arrays, "
                f"{_size(found)} weights; shapes expected but not found: {missing}, found "
                f"but not expected: {extra}"
            )

    def load_weights(self, model):
        try:
            recorded = self.json(METADATA_FILE) if self.exists(METADATA_FILE) else None
            recorded = recorded if isinstance(recorded, dict) else {}
            expected = recorded.get(WEIGHTS_SHA256_KEY)
            if expected is None:
                self.check_unrecorded(recorded.get("keras_transformer_version"))
            check_sha256(self.path(WEIGHTS_FILE), expected, METADATA_FILE)
            model.load_weights(self.path(WEIGHTS_FILE))
            check_finite(model)
        except (ValueError, OSError, KeyError) as error:  # `DamagedFileError` included
            self.fail(f"{WEIGHTS_FILE}: {error}")

    def check_unrecorded(self, version):
        """Weights without a recorded SHA-256 load (unchecked, with a note on the standard
        error) only from a preset that says 0.2.0 wrote it: every later version records it."""
        if version not in UNRECORDED_VERSIONS:
            raise ValueError(
                f"{METADATA_FILE} records no {WEIGHTS_SHA256_KEY}, which keras_transformer "
                f"{short_repr(version)} writes (only presets of {', '.join(UNRECORDED_VERSIONS)} "
                "have none): the weights cannot be checked, so they are not loaded"
            )
        logger.warning(
            "keras_transformer: note: %s: written by keras_transformer %s, which recorded no "
            "SHA-256 of %s: its weights load unchecked",
            self.directory,
            version,
            WEIGHTS_FILE,
        )

    def raise_if_problems(self):
        if self.problems:
            self.fail()

    def fail(self, problem=None):
        problems = self.problems + ([problem] if problem else [])
        listed = "".join(f"\n- {problem}" for problem in problems)
        raise ValueError(
            f"The preset directory cannot be loaded as a {self.class_name} ({len(problems)} "
            f"problem{'s' if len(problems) > 1 else ''}):{listed}\n{_run_hint(self.directory)}"
            f"Received: directory={self.directory!r}"
        )


def _run_hint(directory):
    """A line pointing at what a training run's output directory holds, else `""`."""
    directory = os.fspath(directory)
    found = [
        name
        for name in ("preset", "translator.keras", "best", "saved_model")
        if os.path.exists(os.path.join(directory, name))
    ]
    if not found:
        return ""
    paths = ", ".join(repr(os.path.join(directory, name)) for name in found)
    return (
        f"This looks like a training run's output directory: load one of what it holds "
        f"instead ({paths}; `keras-transformer translate --model` takes the run directory "
        "itself).\n"
    )


def _weight_shapes(path):
    """A `Counter` of the shapes of the model's arrays in a Keras `.weights.h5` file (read
    without reading the arrays); an optimizer's state, if any, is not the model's."""
    import h5py

    shapes = Counter()

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and name.split("/")[0] in MODEL_GROUPS:
            shapes[tuple(item.shape)] += 1

    if not os.path.isfile(path):
        raise ValueError("not a regular file")
    with h5py.File(path, "r") as file:
        file.visititems(visit)
    return shapes


def _size(shapes):
    total = 0
    for shape, number in shapes.items():
        size = 1
        for dimension in shape:
            size *= dimension
        total += size * number
    return total


def _architecture(model):
    names = ("vocabulary_size", "target_vocabulary_size", "num_layers", "d_model", "num_heads", "ff_dim")
    return ", ".join(f"{name}={getattr(model, name)}" for name in names)
