"""The Python blocks of README.md and docs/ run as written.

Each page's blocks run in order in one namespace (a later block uses what an earlier one
defined, as a reader's session would), in a temporary working directory that holds what the
page tells the reader to have: the `model`, `tokenizer` and `translator` of the number-words
translator (`number_translator`, the `make demo` model's small twin) and a `runs/demo` run
directory. An expression whose comment says `# True` must be `True`. A block that cannot run
here (it needs the network, an account, files downloaded elsewhere, or it is a fragment with
`...` placeholders) is listed in `NOT_RUN` with the reason and where its behaviour is tested;
`test_every_block_is_run_or_listed` keeps the list in step with the pages. The two pages
whose blocks take minutes (`HEAVY_PAGES`) run with `make docs-run`, not `make test`.
"""

import ast
import os
import shutil

import pytest

from tests.test_docs_snippets import blocks

pytestmark = pytest.mark.one_backend  # The docs' examples run on TensorFlow (the default).

# (page, first line of the block) -> why it does not run here.
NOT_RUN = {
    ("docs/opus_mt.md", "from keras_transformer.export import import_marian"): (
        "reads an OPUS-MT model downloaded elsewhere; tests/export/test_marian.py imports "
        "Marian files built here with the reference library"
    ),
    ("docs/presets.md", "import kagglehub"): "uploads to Kaggle (network and an account)",
    ("docs/presets.md", "from huggingface_hub import snapshot_download"): (
        "downloads from the Hugging Face Hub (network); tests/saving load hub caches offline"
    ),
    ("docs/training.md", "from keras_transformer.training import load_config, train"): (
        "trains configs/demo.toml for minutes (what `make demo` runs); tests/training run "
        "`train` on small configs"
    ),
    ("docs/training.md", "from keras_transformer.training import PeriodicCheckpoint, average_last_checkpoints"): (
        "a fragment: the reader's `model` and `data`; tests/training/test_checkpoints.py"
    ),
    ("docs/training.md", "from keras_transformer.training import ("): (
        "a fragment: the reader's `model`, `dataset`, `sources`, `references` (10,000 steps); "
        "tests/training run each callback"
    ),
}
# docs/serving.md has two blocks that start with `import tensorflow as tf`: the first runs,
# the second (the warm-up replay, recognised by this line) does not.
WARMUP_REPLAY = "from keras_transformer.export import read_warmup_requests"
WARMUP_REPLAY_REASON = (
    "replays every warm-up request of a served version (13 XLA compiles, about a minute); "
    "benchmarks/serving_warmup.py runs the same loop and tests/export/test_export_serving.py "
    "replays the requests"
)


def _key(where, text):
    page = where.split(":")[0]
    return page, text.strip().splitlines()[0]


def _not_run(where, text):
    """The reason a block does not run here, or `None`."""
    if WARMUP_REPLAY in text:
        return WARMUP_REPLAY_REASON
    return NOT_RUN.get(_key(where, text))


def _pages():
    """`{page: [(where, text), ...]}` of the blocks that run, in page order."""
    pages = {}
    for where, text in blocks("python"):
        if _not_run(where, text) is None:
            pages.setdefault(where.split(":")[0], []).append((where, text))
    return pages


def _checked(text, where):
    """The block compiled, each expression statement commented `# True` turned into an
    `assert (expression) is True`."""
    tree = ast.parse(text, where)
    lines = text.splitlines()
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.Expr) and lines[node.end_lineno - 1].rstrip().endswith("# True"):
            test = ast.Compare(node.value, [ast.Is()], [ast.Constant(True)])
            tree.body[index] = ast.copy_location(ast.Assert(test, ast.Constant(where)), node)
    return compile(ast.fix_missing_locations(tree), where, "exec")


def test_every_block_is_run_or_listed():
    python = blocks("python")
    keys = {_key(where, text) for where, text in python}
    stale = [key for key in NOT_RUN if key not in keys]
    assert stale == [], "NOT_RUN lists blocks the pages no longer have"
    run = [where for pages in _pages().values() for where, _ in pages]
    assert len(run) >= 18, run  # of 27 blocks (November 2026)


@pytest.fixture
def page_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


def _sentencepiece_model(path):
    """A SentencePiece model file "trained elsewhere" (by the reference library)."""
    import io

    import sentencepiece

    from keras_transformer.datasets import number_words

    splits = number_words(num_train=300, num_validation=10, num_test=10)
    sentences = [text for pair in splits.train for text in pair]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=60,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    path.write_bytes(model.getvalue())


def _given(page, directory, request):
    """The namespace and files a page expects its reader to have."""
    if page == "docs/data_and_tokenizers.md":
        _sentencepiece_model(directory / "my.model")  # "or a model trained elsewhere"
    if page == "README.md":  # "Use the model `make demo` made": a `runs/demo` of the twin.
        _, _, keras_path = request.getfixturevalue("number_translator")
        (directory / "runs" / "demo").mkdir(parents=True)
        shutil.copy(keras_path, directory / "runs" / "demo" / "translator.keras")
        return {}
    if page not in ("docs/presets.md", "docs/serving.md", "docs/lora.md", "docs/quantization.md"):
        return {}
    translator, _, keras_path = request.getfixturevalue("number_translator")
    run = directory / "runs" / "demo"
    run.mkdir(parents=True)
    shutil.copy(keras_path, run / "translator.keras")
    # The run's SavedModel: the page's own export (written by its `export_saved_model`
    # block, before the block that opens it).
    os.symlink(os.path.join("..", "..", "exported"), run / "saved_model")
    return {"translator": translator, "model": translator.model, "tokenizer": translator.tokenizer}


# Pages whose blocks take minutes (each trains a tokenizer on the Bible, or exports and
# serves a SavedModel and a CTranslate2 model): `make docs-run` (KT_DOCS_RUN=all) runs them,
# `make test` does not (the CI's time budget).
HEAVY_PAGES = {
    "docs/data_and_tokenizers.md": "trains three 8,000-piece tokenizers on the Bible",
    "docs/serving.md": "exports and serves a SavedModel and a CTranslate2 model",
}


@pytest.mark.parametrize("page", sorted(_pages()))
def test_page_runs_as_written(page, page_directory, request):
    if page in HEAVY_PAGES and os.environ.get("KT_DOCS_RUN") != "all":
        pytest.skip(f"{HEAVY_PAGES[page]}: run with `make docs-run`")
    namespace = {"__name__": "__docs__", **_given(page, page_directory, request)}
    for where, text in _pages()[page]:
        exec(_checked(text, where), namespace)  # noqa: S102  (the project's own docs)

