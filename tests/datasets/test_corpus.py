"""Tests for keras_transformer.datasets.corpus: corpus formats, filters, the hash split."""

import gzip

import pytest

from keras_transformer.datasets import (
    Corpus,
    CorpusFormatError,
    filter_pairs,
    normalized_source,
    read_tsv,
    scan_corpora,
)
from keras_transformer.datasets.corpus import MAX_LINE_BYTES, open_lines

# Pure Python: one_backend.
pytestmark = pytest.mark.one_backend

PAIRS = [(f"frase número {i} del corpus", f"sentence number {i} of the corpus") for i in range(60)]


def write_lines(path, lines, compress=False):
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def formats(tmp_path, pairs):
    """The same pairs as a TSV, two plain files and two gzipped files."""
    tsv = write_lines(tmp_path / "c.tsv", [f"{s}\t{t}" for s, t in pairs])
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    return {
        "tsv": Corpus(path=tsv),
        "files": Corpus(
            source=write_lines(tmp_path / "c.es", sources),
            target=write_lines(tmp_path / "c.en", targets),
        ),
        "gz": Corpus(
            source=write_lines(tmp_path / "c.es.gz", sources, compress=True),
            target=write_lines(tmp_path / "c.en.gz", targets, compress=True),
        ),
    }


def test_aligned_files_and_gz_give_the_tsv_pairs_and_splits(tmp_path):
    scans = {
        name: scan_corpora([corpus], num_validation=5, num_test=4)
        for name, corpus in formats(tmp_path, PAIRS).items()
    }
    reference = scans["tsv"].splits
    assert (len(reference.train), len(reference.validation), len(reference.test)) == (51, 5, 4)
    for scan in scans.values():
        assert tuple(scan.splits) == tuple(reference)
    # Nothing held out: the training pairs are the file's, in order, as read_tsv reads them.
    everything = scan_corpora([formats(tmp_path, PAIRS)["gz"]], 0, 0)
    assert everything.splits.train == list(read_tsv(tmp_path / "c.tsv")) == PAIRS


def test_each_filter_counts_what_it_removes(tmp_path):
    dirty = PAIRS[:10] + [
        ("", "empty source"),
        ("  \t ", "whitespace-only source"),  # a TSV cannot hold the tab: aligned files
        ("sólo", "a one word source against a much longer target"),  # 1 : 9 words
        PAIRS[0],
        PAIRS[3],
        (PAIRS[3][0], "another translation of a kept source"),  # not an exact duplicate
    ]
    corpus = Corpus(
        source=write_lines(tmp_path / "d.es", [s for s, _ in dirty]),
        target=write_lines(tmp_path / "d.en", [t for _, t in dirty]),
    )
    scan = scan_corpora([corpus], 0, 0)
    assert scan.removed == {"empty": 2, "length_ratio": 1, "duplicate": 2}
    assert scan.splits.train == PAIRS[:10] + [dirty[-1]]
    assert scan.summary_lines() == [
        "filter empty: removed 2 of 16 pairs (an empty or whitespace-only side)",
        "filter length_ratio: removed 1 of 16 pairs (one side more than 3 times as many words "
        "as the other)",
        "filter duplicate: removed 2 of 16 pairs (exact duplicate of an earlier pair)",
    ]
    # The in-memory filter of `dataset = "tsv"` removes the same pairs; both can be turned off.
    assert filter_pairs(dirty) == (scan.splits.train, scan.removed)
    kept, removed = filter_pairs(dirty, max_length_ratio=0, remove_duplicates=False)
    assert removed == {"empty": 2, "length_ratio": 0, "duplicate": 0} and len(kept) == 14


def test_held_out_sources_and_their_variants_are_never_trained_on(tmp_path):
    # Every source comes 1-3 times, as variants (case, accents, spacing) with other targets.
    pairs = []
    for i in range(80):
        source = f"Canción número {i} está aquí"
        variants = [source, source.upper(), source.replace("ó", "o").replace("á", "a") + " "]
        pairs += [
            (variant, f"song {i} version {v}") for v, variant in enumerate(variants[: 1 + i % 3])
        ]
    corpus = formats(tmp_path, pairs)["tsv"]
    scan = scan_corpora([corpus], num_validation=10, num_test=10)
    train, validation, test = scan.splits
    assert len(train) + len(validation) + len(test) == len(pairs)
    held_out = {normalized_source(s) for s, _ in validation + test}
    assert not held_out & {normalized_source(s) for s, _ in train}
    assert not {normalized_source(s) for s, _ in validation} & {
        normalized_source(s) for s, _ in test
    }
    # Whole groups: at least the sizes asked for, at most one group (3 pairs) more.
    assert 10 <= len(validation) <= 12 and 10 <= len(test) <= 12
    # The split depends on the sources only: the same whatever the order of the lines.
    shuffled = formats(tmp_path, pairs[::-1])["tsv"]
    again = scan_corpora([shuffled], num_validation=10, num_test=10)
    assert sorted(again.splits.validation) == sorted(validation)
    assert sorted(again.splits.test) == sorted(test)


def test_tokenizer_sample_is_bounded_and_excludes_held_out_pairs(tmp_path):
    scan = scan_corpora([formats(tmp_path, PAIRS)["files"]], 5, 5, sample_size=20, seed=1)
    assert len(scan.tokenizer_sample) <= 20
    assert set(scan.tokenizer_sample) <= set(scan.splits.train)
    assert not set(scan.tokenizer_sample) & set(scan.splits.validation + scan.splits.test)
    small = scan_corpora([formats(tmp_path, PAIRS)["files"]], 5, 5, sample_size=1000)
    assert small.tokenizer_sample == small.splits.train  # all of them, in order


def test_aligned_files_of_different_lengths_are_one_error_naming_both(tmp_path):
    corpus = Corpus(
        source=write_lines(tmp_path / "a.es", ["uno", "dos", "tres"]),
        target=write_lines(tmp_path / "a.en.gz", ["one", "two"], compress=True),
    )
    with pytest.raises(CorpusFormatError) as error:
        scan_corpora([corpus], 0, 0)
    assert str(error.value) == (
        f"Aligned files differ in length: {corpus.source} has 3 lines, {corpus.target} has 2."
    )
    with pytest.raises(CorpusFormatError, match=r"b\.tsv, line 2: expected 2 tab-separated"):
        scan_corpora([Corpus(path=write_lines(tmp_path / "b.tsv", ["a\tb", "c"]))], 0, 0)


def test_a_truncated_gz_and_an_endless_line_are_one_error_naming_the_file(tmp_path):
    data = gzip.compress("".join(f"sentence {index}\n" for index in range(2000)).encode())
    truncated = tmp_path / "c.es.gz"
    truncated.write_bytes(data[: len(data) // 2])
    corpus = Corpus(source=str(truncated), target=str(truncated))
    with pytest.raises(CorpusFormatError, match=r"c\.es\.gz: a truncated or damaged \.gz file"):
        scan_corpora([corpus], 0, 0)
    endless = tmp_path / "endless.tsv"
    endless.write_bytes(b"a\tb\n" + b"x" * (MAX_LINE_BYTES + 1))
    with pytest.raises(CorpusFormatError, match=f"endless.tsv, line 2: longer than {MAX_LINE_BYTES}"):
        scan_corpora([Corpus(path=str(endless))], 0, 0)
    longest = b"x" * MAX_LINE_BYTES  # The longest line is read.
    assert list(open_lines(write_lines(tmp_path / "longest.txt", [longest.decode()]))) == [longest]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"source": "a.es"}, "Received: path='', source='a.es', target=''"),
        ({"path": "a.tsv", "source": "a.es", "target": "a.en"}, "path='a.tsv'"),
        ({"path": "a.tsv", "weight": 0}, "weight=0"),
    ],
)
def test_a_corpus_is_a_tsv_or_two_files_with_a_positive_weight(arguments, message):
    with pytest.raises(ValueError, match=message):
        Corpus(**arguments)
