import fcntl
import json
import os
import shutil

import keras
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Runs whose config leaves `mixed_precision` unset train in float32 on every CPU (a recipe run
# on a CPU with bfloat16 instructions would otherwise choose bf16): the tests' numbers are
# float32's. tests/training/test_recipe.py turns it back on where it tests the choice.
os.environ["KERAS_TRANSFORMER_CPU_BFLOAT16"] = "0"

if keras.backend.backend() == "torch":
    import torch

    # The test models are tiny: torch's intra-op thread pool costs far more than it
    # saves on them (measured: 40 tiny fit steps 60 s with the default pool under load,
    # 4.4 s with one thread).
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """`one_backend` tests run once, under TensorFlow: what they test does not depend on the
    Keras backend (or they start the other backends themselves), and every backend-specific
    part they touch has its own test on all three backends. CI time stays bounded. In a
    module marked `one_backend`, a test marked `all_backends` still runs on every backend."""
    if keras.backend.backend() != "tensorflow":
        skip = pytest.mark.skip(reason="one_backend: runs on KERAS_BACKEND=tensorflow only")
        for item in items:
            if "one_backend" in item.keywords and "all_backends" not in item.keywords:
                item.add_marker(skip)
    _heaviest_modules_first(items)


# Seconds each test module took on each backend (tests, setup and teardown, summed over the
# pytest-xdist workers), measured on the CI machine: `make test-durations` rewrites the file.
MODULE_SECONDS_FILE = os.path.join(os.path.dirname(__file__), "module_seconds.json")
RECORD_VARIABLE = "KT_RECORD_MODULE_SECONDS"


def _heaviest_modules_first(items):
    """Orders the test modules longest first (a stable sort: otherwise as collected).

    pytest-xdist's `--dist loadfile` (with `--no-loadscope-reorder`, which keeps this order)
    hands whole modules to its workers in this order: the long modules start first and the
    short ones fill the end, so neither worker idles long while the other finishes a long
    module. The length of a module is its recorded seconds on this backend
    (`module_seconds.json`); a module not recorded yet counts 20 s per `slow` test that will
    run, plus 0.5 s per other test.

    Measured in CI rehearsals (TensorFlow, 2 workers): 1,223 s with xdist's own order (fewest
    tests last: the two-test kill-and-resume modules ended the run), 1,169 s with this one;
    the modules' seconds add up to ~2,390 s, so ~1,196 s is the floor."""
    recorded = {}
    if os.path.exists(MODULE_SECONDS_FILE):
        with open(MODULE_SECONDS_FILE, encoding="utf-8") as file:
            recorded = json.load(file).get(keras.backend.backend(), {})

    def runs(item):
        return not any(
            mark.name == "skip" or (mark.name == "skipif" and mark.args and mark.args[0] is True)
            for mark in item.iter_markers()
        )

    estimates = {}
    for item in items:
        name = module(item)
        if runs(item):
            estimates[name] = estimates.get(name, 0.0) + (20.0 if "slow" in item.keywords else 0.5)
    seconds = {name: recorded.get(name, estimate) for name, estimate in estimates.items()}
    items.sort(key=lambda item: -seconds.get(module(item), 0.0))


def module(item):
    """The test module of a test item or report: its node id's path."""
    return item.nodeid.split("::", 1)[0]


_module_seconds = {}


def pytest_runtest_logreport(report):
    """Sums each module's test, setup and teardown seconds (the controller of a pytest-xdist
    run receives every worker's reports) when `KT_RECORD_MODULE_SECONDS` is set."""
    if os.environ.get(RECORD_VARIABLE):
        _module_seconds[module(report)] = _module_seconds.get(module(report), 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """With `KT_RECORD_MODULE_SECONDS=1`, writes this backend's module seconds into
    `module_seconds.json` (the other backends' entries are kept)."""
    if not os.environ.get(RECORD_VARIABLE) or hasattr(session.config, "workerinput"):
        return
    if not _module_seconds:
        return
    data = {}
    if os.path.exists(MODULE_SECONDS_FILE):
        with open(MODULE_SECONDS_FILE, encoding="utf-8") as file:
            data = json.load(file)
    data[keras.backend.backend()] = {
        name: round(seconds, 1) for name, seconds in sorted(_module_seconds.items())
    }
    with open(MODULE_SECONDS_FILE, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, sort_keys=True)
        file.write("\n")


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    """On JAX, one persistent XLA compilation cache for the whole test run (its workers and
    the subprocesses they start share it): the tests build many tiny models of the same
    shapes, and each new `jax.jit` of the same program would compile it again. A cached
    program is the program XLA compiled: results are unchanged, only compile time is saved.
    The cache lives in the run's temporary directory, so every run starts empty.

    On every backend `XDG_CACHE_HOME` points there too, so that the commands the tests run
    (`translate`, `serve`: `--compilation-cache`'s default, `engines.compilation`) keep their
    compiled programs in the run's directory, never the user's, and on JAX in this same one."""
    from keras_transformer.engines.compilation import default_directory, jax_cache_settings

    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ and keras.backend.backend() == "jax":
        # This run's, shared by its workers: bounded, JAX's cache holds a file lock while it
        # reads or writes an entry (unbounded, it wrote entries in place, unlocked: a worker
        # reading one the other was writing aborted). TensorFlow's is kept per worker.
        root = root.parent
    os.environ["XDG_CACHE_HOME"] = str(root / "xdg_cache")
    directory = default_directory()
    if keras.backend.backend() != "jax":
        yield
        return
    import jax

    settings = jax_cache_settings(directory)
    previous = {name: getattr(jax.config, name) for name in settings}
    for name, value in settings.items():
        jax.config.update(name, value)
        # Subprocesses started by the tests (fresh-process reloads, multi-process runs).
        os.environ[name.upper()] = str(value)
    yield
    for name, value in previous.items():
        jax.config.update(name, value)


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Every test starts with float32 policy, a fixed seed and a clean session.

    The session is cleared without Keras' `gc.collect()` (Python's own collector still runs):
    a full collection after every test walks the worker's whole heap, which grows with every
    traced function, and cost up to 32 s per test late in a TensorFlow stage (measured: 47 s
    of 409 s of test time in the model, generation, trainer and layer tests, 0.5 s without
    it, and 230 -> 185 s of wall time)."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1337)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)


def shared_directory(tmp_path_factory, name, write):
    """A directory that `write(directory)` fills once per test run.

    pytest-xdist gives each worker its own session, so a session fixture runs once per
    worker; here the first worker to take the lock writes the directory under the run's
    common temporary directory and the others wait for it and read it. A worker that failed
    to write leaves it incomplete, and the next one writes it again.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        directory = tmp_path_factory.mktemp(name)
        write(directory)
        return directory
    root = tmp_path_factory.getbasetemp().parent  # This run's, shared by its workers.
    directory = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # Released when the file closes.
        if not (directory / ".complete").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            write(directory)
            (directory / ".complete").touch()
    return directory


@pytest.fixture(scope="session")
def number_translator(tmp_path_factory):
    """`(translator, test_pairs, keras_path)`: the number-words Translator of
    `tests/export_helpers.py`, trained once per test run on the current backend (the
    pytest-xdist workers share it) and loaded from its `.keras` file."""
    from keras_transformer.translator import Translator
    from tests.export_helpers import train_number_translator

    def write(directory):
        translator, test_pairs = train_number_translator()
        translator.save(directory / "translator.keras")
        (directory / "test_pairs.json").write_text(json.dumps(test_pairs), encoding="utf-8")

    directory = shared_directory(
        tmp_path_factory, f"number_translator_{keras.backend.backend()}", write
    )
    test_pairs = json.loads((directory / "test_pairs.json").read_text(encoding="utf-8"))
    keras_path = directory / "translator.keras"
    return Translator.load(keras_path), [tuple(pair) for pair in test_pairs], keras_path


@pytest.fixture(scope="session")
def exported(request, tmp_path_factory):
    """`(translator, keras_path, saved_model_path)`: `number_translator` exported as a
    SavedModel once per test run (TensorFlow only)."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export runs on the TensorFlow backend")
    from keras_transformer.export import export_saved_model

    translator, _, keras_path = request.getfixturevalue("number_translator")
    directory = shared_directory(
        tmp_path_factory,
        "number_translator_saved_model",
        lambda directory: export_saved_model(translator, directory / "saved_model"),
    )
    return translator, keras_path, directory / "saved_model"
