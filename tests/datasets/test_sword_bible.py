"""Tests for keras_transformer.datasets.sword_bible (needs the Debian SWORD modules)."""

import os
import re

import pytest

pytest.importorskip("pysword")

from keras_transformer.datasets import SwordModuleNotFoundError, sword_bible  # noqa: E402
from keras_transformer.datasets.splits import normalized_source  # noqa: E402
from keras_transformer.datasets.sword_bible import DEFAULT_SWORD_PATH, clean_osis  # noqa: E402

# (source, target) string pairs, made without Keras: one_backend.
pytestmark = pytest.mark.one_backend

MODULES = ("spaRV1909eb", "engWEB2015eb")
INSTALLED = all(
    os.path.exists(os.path.join(DEFAULT_SWORD_PATH, "mods.d", f"{name.lower()}.conf"))
    or os.path.exists(os.path.join(DEFAULT_SWORD_PATH, "mods.d", f"{name}.conf"))
    for name in MODULES
)
needs_modules = pytest.mark.skipif(
    not INSTALLED, reason="apt-get install -y sword-text-sparv sword-text-web"
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sword_cache"))


@pytest.fixture(scope="module")
def splits(cache_dir):
    return sword_bible(cache_dir=cache_dir)


@needs_modules
def test_31077_aligned_pairs_with_stable_split_sizes(splits):
    assert splits.info["num_pairs"] == 31077
    assert splits.info["num_aligned"] == 31102
    assert splits.num_dropped == 25
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (29077, 1000, 1000)


@needs_modules
def test_splits_are_disjoint_by_reference(splits):
    references = splits.info["references"]
    train, validation, test = (set(references[k]) for k in ("train", "validation", "test"))
    assert len(train) == 29077 and len(validation) == 1000 and len(test) == 1000
    assert not train & validation and not train & test and not validation & test
    # Stable: these verses are held out whatever the machine or Python process.
    assert references["train"][0] == "Gen.1.1"
    assert references["validation"][:3] == ["Gen.1.12", "Gen.1.28", "Gen.3.7"]
    assert references["test"][:3] == ["Gen.1.17", "Gen.1.21", "Gen.4.17"]


@needs_modules
def test_no_held_out_verse_text_is_trained_on(splits):
    # Identical verses under different references (e.g. "Y respondió Job, y dijo:", 7 times)
    # are one group: before, 7 validation and 7 test sources also occurred in training.
    train = {normalized_source(source) for source, _ in splits.train}
    validation = {normalized_source(source) for source, _ in splits.validation}
    test = {normalized_source(source) for source, _ in splits.test}
    assert not validation & train and not test & train and not validation & test
    assert not {source for source, _ in splits.validation + splits.test} & {
        source for source, _ in splits.train
    }
    # 294 pairs share their source with a verse under another reference; grouping them
    # leaves the sizes exact.
    assert splits.info["num_shared_sources"] == 294
    assert sum(len(split) for split in splits) == splits.info["num_pairs"]


@needs_modules
def test_text_is_clean_and_aligned(splits):
    first = splits.train[0]
    assert first == (
        "EN el principio crió Dios los cielos y la tierra.",
        "In the beginning, God created the heavens and the earth.",
    )
    for source, target in splits.train + splits.validation + splits.test:
        assert source and target
        assert "<" not in source + target and ">" not in source + target
        assert "\t" not in source + target and "\n" not in source + target
        assert source == source.strip() and "  " not in source and "  " not in target
        # No space before punctuation, except the WEB's own "‘... walk’ ?”".
        assert not re.search(r"[^’]\s[,.;:?!]", source + " " + target)
    longest = max(len(target.split()) for _, target in splits.train + splits.test)
    assert longest < 150  # no appended glossary or chapter


@needs_modules
def test_cache_is_written_once_and_reused(splits, cache_dir):
    path = splits.info["cache_path"]
    assert os.path.dirname(path) == cache_dir and os.path.exists(path)
    assert not [name for name in os.listdir(cache_dir) if name.endswith(".part")]
    modified = os.path.getmtime(path)
    again = sword_bible(cache_dir=cache_dir)
    assert os.path.getmtime(path) == modified
    assert again == splits and again.info["references"] == splits.info["references"]


@needs_modules
def test_cache_dir_from_environment(monkeypatch, tmp_path, splits):
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path))
    source = splits.info["cache_path"]
    target_dir = tmp_path / "sword_bible"
    target_dir.mkdir()
    (target_dir / os.path.basename(source)).write_bytes(open(source, "rb").read())
    assert sword_bible() == splits  # read from $KERAS_TRANSFORMER_CACHE, no extraction


FIX_BOTH = "apt-get install -y sword-text-sparv sword-text-web"


def test_missing_sword_directory_says_which_apt_get_fixes_it(tmp_path):
    with pytest.raises(SwordModuleNotFoundError, match=FIX_BOTH):
        sword_bible(sword_path=str(tmp_path / "nowhere"), use_cache=False)


def test_missing_modules_say_which_apt_get_fixes_them(tmp_path, monkeypatch):
    (tmp_path / "mods.d").mkdir()
    with pytest.raises(SwordModuleNotFoundError, match=FIX_BOTH):
        sword_bible(sword_path=str(tmp_path), use_cache=False)
    monkeypatch.setenv("SWORD_PATH", str(tmp_path))  # sword_path from the environment
    with pytest.raises(FileNotFoundError, match="apt-cache search sword-text"):
        sword_bible(source="xxNoSuchBible", use_cache=False)


@needs_modules
def test_missing_target_module_names_its_package(tmp_path):
    # Only the Spanish module is present.
    (tmp_path / "mods.d").mkdir()
    conf = os.path.join(DEFAULT_SWORD_PATH, "mods.d", "sparv1909eb.conf")
    if not os.path.exists(conf):
        conf = os.path.join(DEFAULT_SWORD_PATH, "mods.d", "spaRV1909eb.conf")
    (tmp_path / "mods.d" / "spa.conf").write_bytes(open(conf, "rb").read())
    os.symlink(os.path.join(DEFAULT_SWORD_PATH, "modules"), tmp_path / "modules")
    with pytest.raises(SwordModuleNotFoundError, match="install -y sword-text-web$"):
        sword_bible(sword_path=str(tmp_path), use_cache=False)


def test_clean_osis():
    raw = (
        '<title canonical="true" type="psalm">A Psalm by David.</title> '
        '<w lemma="strong:H0430">God</w><note placement="foot">A note.</note>'
        '<w lemma="strong:H1254">created</w>, “light”<note>n</note>. '
        '<div eID="x" type="book" canonical="true"/> Glossary text'
    )
    assert clean_osis(raw) == "A Psalm by David. God created, “light”."
    quoted = '<q who="Jesus">two coins</q> <note placement="foot">A note.</note> <q>?</q>'
    assert clean_osis(quoted) == "two coins?"
