"""A verse-aligned parallel Bible from SWORD modules (Debian `sword-text-*` packages).

Pure Python: reads the modules with `pysword` (imported lazily), no TensorFlow.
"""

import functools
import html
import logging
import os
import re
import time

from keras_transformer.datasets.cache import get_cache_dir
from keras_transformer.datasets.splits import Splits, split_pairs
from keras_transformer.files import write_text

logger = logging.getLogger("keras_transformer")

DEFAULT_SWORD_PATH = "/usr/share/sword"
SWORD_PATH_ENV = "SWORD_PATH"
# Debian packages that install the modules we know about.
DEBIAN_PACKAGES = {
    "spaRV1909eb": "sword-text-sparv",
    "engWEB2015eb": "sword-text-web",
}
# Bump when the extraction changes, so stale caches are not reused.
CACHE_VERSION = 3

NOTE_REGEX = re.compile(r"<note\b[^>]*?(?:/>|>.*?</note>)", re.DOTALL)
# Psalm superscriptions: verse 1 in the Reina-Valera text, a `<title>` in the WEB.
CANONICAL_TITLE_REGEX = re.compile(r"<title\b[^>]*canonical=\"true\"[^>]*>(.*?)</title>", re.DOTALL)
# The end of a book: whatever follows (the WEB appends its glossary to Rev 22:21) is not verse.
BOOK_END_REGEX = re.compile(r"<div\b[^>]*\beID=[^>]*type=\"book\"[^>]*/>.*", re.DOTALL)
NOTE_MARK = "\x00"


class SwordModuleNotFoundError(FileNotFoundError):
    """A SWORD module is not installed; the message says which `apt-get install` fixes it."""


def sword_bible(
    source="spaRV1909eb",
    target="engWEB2015eb",
    num_validation=1000,
    num_test=1000,
    sword_path=None,
    cache_dir=None,
    use_cache=True,
):
    """Verse-aligned `(source, target)` pairs from two SWORD Bible modules, split by reference
    and text.

    Defaults: the Reina-Valera 1909 (Spanish) and the World English Bible, both public domain,
    installed by `apt-get install -y sword-text-sparv sword-text-web`. Verses are aligned by
    their book/chapter/verse reference (the references both modules have), markup is removed
    (Strong's tags, footnotes, cross-references; the WEB's canonical psalm titles are kept,
    since the Reina-Valera has them in verse 1), whitespace is collapsed, and pairs where
    either side is empty are dropped and counted (`info["num_dropped"]`; 25 for the default
    pair, leaving 31,077). Validation and test hold the verses whose reference has the
    smallest stable hash, each together with every verse of the same text (`split_pairs`
    groups by reference and by `normalized_source`: 294 pairs share their source with a verse
    under another reference, "Y respondió Job, y dijo:" 7 times), so the split never changes
    and no held-out source sentence is ever trained on.

    The extraction is cached as a TSV (`reference<TAB>source<TAB>target`, written atomically)
    under `cache_dir`.

    Args:
        source: str. SWORD module name of the source side. Defaults to `"spaRV1909eb"`.
        target: str. SWORD module name of the target side. Defaults to `"engWEB2015eb"`.
        num_validation: int. Validation verses. Defaults to `1000`.
        num_test: int. Test verses. Defaults to `1000`.
        sword_path: str. SWORD data directory (with `mods.d/`). Defaults to `None`:
            `$SWORD_PATH`, else `/usr/share/sword` (where Debian installs modules).
        cache_dir: str. Defaults to `None`: `get_cache_dir("sword_bible")`.
        use_cache: bool. Read and write the TSV cache. Defaults to `True`.

    Returns:
        `Splits(train, validation, test)` of `(source, target)` string pairs. `info` holds
        `num_pairs`, `num_dropped`, `num_aligned`, `num_shared_sources`, `references` (per
        split) and `cache_path`.

    Raises:
        SwordModuleNotFoundError: a module is missing; the message gives the `apt-get` command.

    Example:

    >>> splits = sword_bible()  # doctest: +SKIP
    >>> len(splits.train), len(splits.validation), len(splits.test)  # doctest: +SKIP
    (29077, 1000, 1000)
    """
    sword_path = sword_path or os.environ.get(SWORD_PATH_ENV) or DEFAULT_SWORD_PATH
    cache_path = None
    rows = None
    if use_cache:
        cache_path = os.path.join(
            cache_dir or get_cache_dir("sword_bible"), f"{source}-{target}-v{CACHE_VERSION}.tsv"
        )
        if os.path.exists(cache_path):
            rows = _read_cache(cache_path)
    if rows is None:
        start = time.perf_counter()
        rows = extract_verses(source, target, sword_path)
        logger.info(
            "Extracted %d verse pairs from %s and %s in %.1f s.",
            sum(1 for row in rows if row[1] and row[2]),
            source,
            target,
            time.perf_counter() - start,
        )
        if cache_path:
            write_text(cache_path, "".join("\t".join(row) + "\n" for row in rows))
    kept = [row for row in rows if row[1] and row[2]]
    num_dropped = len(rows) - len(kept)
    if num_dropped:
        logger.info("sword_bible: dropped %d verses empty on one side.", num_dropped)
    split = split_pairs(
        [(row[1], row[2]) for row in kept],
        num_validation,
        num_test,
        keys=[row[0] for row in kept],
    )
    splits = Splits(
        *split,
        info={
            "source": source,
            "target": target,
            "num_aligned": len(rows),
            "num_pairs": len(kept),
            "num_dropped": num_dropped,
            "num_shared_sources": split.info["num_shared_sources"],
            "references": {
                name: [kept[index][0] for index in indices]
                for name, indices in split.info["indices"].items()
            },
            "cache_path": cache_path,
        },
    )
    return splits


def extract_verses(source, target, sword_path=DEFAULT_SWORD_PATH):
    """Reads both modules; returns `[(reference, source_text, target_text), ...]`.

    Every reference present in both versifications is returned, in canonical order, with the
    cleaned text of each side (possibly empty). References are OSIS-style: `"Gen.1.1"`.
    """
    source_bible, target_bible = _open_modules([source, target], sword_path)
    source_verses = _read_verses(source_bible)
    target_verses = _read_verses(target_bible)
    return [
        (reference, text, target_verses[reference])
        for reference, text in source_verses.items()
        if reference in target_verses
    ]


def _install_command(names, reinstall=False):
    """The `apt-get` command that installs the Debian packages providing `names`."""
    packages = [DEBIAN_PACKAGES[name] for name in names if name in DEBIAN_PACKAGES]
    unknown = [name for name in names if name not in DEBIAN_PACKAGES]
    command = "apt-get install -y " + ("--reinstall " if reinstall else "")
    if not unknown:
        return command + " ".join(packages)
    return (
        command
        + " ".join(packages + ["<the sword-text-* package providing " + ", ".join(unknown) + ">"])
        + " (find it with `apt-cache search sword-text`)"
    )


def _open_modules(names, sword_path):
    """Opens SWORD modules with pysword; one error lists every missing module and the fix."""
    try:
        from pysword.modules import SwordModules
    except ImportError:
        raise ImportError(
            "sword_bible needs the `pysword` package: pip install pysword "
            "(the `data` extra of keras-transformer-nmt installs it)."
        ) from None
    if not os.path.isdir(os.path.join(sword_path, "mods.d")):
        raise SwordModuleNotFoundError(
            f"SWORD modules {list(names)} not found: {sword_path!r} has no mods.d/ directory. "
            f"Install them with: {_install_command(names)} (or point `sword_path` or "
            f"${SWORD_PATH_ENV} at the SWORD data directory that has them)."
        )
    modules = SwordModules(sword_path)
    found = modules.parse_modules()
    missing = [name for name in names if name not in found]
    if missing:
        raise SwordModuleNotFoundError(
            f"SWORD modules {missing} not found in {sword_path!r} (found: {sorted(found)}). "
            f"Install them with: {_install_command(missing)}"
        )
    bibles = []
    for name in names:
        try:
            bible = modules.get_bible_from_module(name)
        except OSError as error:
            raise SwordModuleNotFoundError(
                f"SWORD module {name!r} in {sword_path!r} is incomplete ({error}). "
                f"Reinstall it with: {_install_command([name], reinstall=True)}"
            ) from error
        # A zText module stores one compressed block per book; pysword decompresses the block
        # again for every verse. Memoizing the last blocks makes the extraction ~20x faster.
        bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
        bibles.append(bible)
    return bibles


def _read_verses(bible):
    """`{reference: cleaned text}` for every verse of the module's versification."""
    from pysword.cleaner import OSISCleaner

    cleaner = OSISCleaner()
    verses = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            for chapter in range(1, book.num_chapters + 1):
                texts = bible.get_iter(books=book.osis_name, chapters=chapter, clean=False)
                for verse, text in enumerate(texts, start=1):
                    verses[f"{book.osis_name}.{chapter}.{verse}"] = clean_osis(text, cleaner)
    return verses


def clean_osis(text, cleaner=None):
    """OSIS markup to plain text: notes removed, canonical titles kept, whitespace collapsed."""
    if cleaner is None:
        from pysword.cleaner import OSISCleaner

        cleaner = OSISCleaner()
    text = BOOK_END_REGEX.sub("", text)
    text = CANONICAL_TITLE_REGEX.sub(r"\1 ", text)
    # A note between two words ("God<note>..</note>created") must leave a space behind.
    text = NOTE_REGEX.sub(NOTE_MARK, text)
    text = cleaner.clean(text)
    text = re.sub(r"<[^>]*>", NOTE_MARK, text)  # any tag the cleaner does not know
    text = re.sub(rf"(?<=\w){NOTE_MARK}+(?=\w)", " ", text)
    # "coins</q> <note>..</note> <q>?" -> "coins?": no space left before closing punctuation.
    text = re.sub(rf"\s*{NOTE_MARK}[\s{NOTE_MARK}]*(?=[,.;:?!’”)])", "", text)
    text = text.replace(NOTE_MARK, "")
    text = html.unescape(text)
    return " ".join(text.split())


def _read_cache(path):
    rows = []
    with open(path, encoding="utf-8", newline="\n") as file:
        for line in file:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                logger.warning("Ignoring the malformed cache %s; extracting again.", path)
                return None
            rows.append(tuple(fields))
    return rows
