"""Tests for keras_transformer.data.streaming: the pairs and batches streamed from corpus files."""

import gzip

import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

# tf.data pipelines run TensorFlow whatever the Keras backend: one_backend.
pytestmark = pytest.mark.one_backend

from keras_transformer.data import make_dataset, make_streaming_dataset, stream_pairs  # noqa: E402
from keras_transformer.datasets import Corpus, scan_corpora  # noqa: E402
from keras_transformer.text import train_tokenizer  # noqa: E402


def write_lines(path, lines, compress=False):
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def two_corpora(tmp_path, size=40):
    """A gzipped TSV with a blank line and a duplicate, and two aligned plain files."""
    first = [f"uno dos {i}\tone two {i}" for i in range(size)] + ["", "uno dos 3\tone two 3"]
    second = (
        [f"tres cuatro {i} más" for i in range(size)],
        [f"three four {i} more" for i in range(size)],
    )
    return [
        Corpus(path=write_lines(tmp_path / "a.tsv.gz", first, compress=True), weight=3),
        Corpus(
            source=write_lines(tmp_path / "b.es", second[0]),
            target=write_lines(tmp_path / "b.en", second[1]),
        ),
    ]


@pytest.fixture(scope="module")
def tokenizer():
    words = "uno dos tres cuatro más one two three four more".split()
    return train_tokenizer(words + [str(i) for i in range(40)], vocabulary_size=100)


def rows(dataset):
    """The non-padding rows of a batched dataset, as sorted tuples of (encoder, decoder, target)."""
    found = []
    for inputs, targets in dataset:
        for encoder, decoder, target in zip(
            inputs["encoder_inputs"].numpy(),
            inputs["decoder_inputs"].numpy(),
            targets.numpy(),
            strict=True,
        ):
            if encoder.any():
                found.append(
                    (
                        tuple(encoder[encoder > 0]),
                        tuple(decoder[decoder > 0]),
                        tuple(target[target > 0]),
                    )
                )
    return sorted(found)


def test_streaming_gives_the_in_memory_pairs_and_batches(tmp_path, tokenizer):
    corpora = two_corpora(tmp_path)
    in_memory = scan_corpora(corpora, num_validation=4, num_test=3)
    streamed = scan_corpora(corpora, 4, 3, keep_train=False, keys_dir=str(tmp_path))
    assert (
        streamed.splits.train is None and tuple(streamed.splits)[1:] == tuple(in_memory.splits)[1:]
    )
    assert sum(streamed.num_train) == len(in_memory.splits.train) == 80 - 7
    pairs = stream_pairs(corpora, streamed.keys_paths, streamed.threshold, repeat=False)
    assert [
        (s.decode(), t.decode()) for s, t in pairs.as_numpy_iterator()
    ] == in_memory.splits.train

    options = dict(tokens_per_batch=64, max_length=8, bucket_boundaries=[4, 8])
    memory = make_dataset(in_memory.splits.train, tokenizer, shuffle=False, **options)
    stream = make_streaming_dataset(
        corpora,
        streamed.keys_paths,
        streamed.threshold,
        tokenizer,
        shuffle_buffer=0,
        repeat=False,
        num_examples=sum(streamed.num_train),
        sample=in_memory.tokenizer_sample,
        **options,
    )
    assert rows(stream.dataset) == rows(memory.dataset)
    # The sample is every training pair here, so the estimates are exact.
    assert stream.bucket_counts == memory.bucket_counts and stream.num_dropped == memory.num_dropped
    # A translator imported from Marian encodes sources as `pieces [END]` (no start token),
    # with a target tokenizer of its own: both pipelines train on those ids.
    text = dict(source_start_token=False, target_tokenizer=tokenizer)
    memory = make_dataset(in_memory.splits.train, tokenizer, shuffle=False, **options, **text)
    stream = make_streaming_dataset(
        corpora, streamed.keys_paths, streamed.threshold, tokenizer, shuffle_buffer=0,
        repeat=False, **options, **text,
    )  # fmt: skip
    found = rows(stream.dataset)
    assert found == rows(memory.dataset) and found
    for encoder, decoder, _ in found:
        assert encoder[0] != tokenizer.start_id and encoder[-1] == tokenizer.end_id
        assert decoder[0] == tokenizer.start_id


def test_corpora_are_mixed_by_weight(tmp_path):
    corpora = two_corpora(tmp_path, size=10)
    scan = scan_corpora(corpora, 0, 0, keep_train=False, keys_dir=str(tmp_path))
    pairs = stream_pairs(corpora, scan.keys_paths, scan.threshold, seed=3).take(4000).batch(4000)
    sources, _ = next(pairs.as_numpy_iterator())
    first = sum(source.startswith(b"uno") for source in sources)
    # Weights 3 : 1. The standard deviation of the fraction is 0.007: 0.03 is 4 of them.
    assert abs(first / 4000 - 0.75) < 0.03


def test_a_training_stream_batches_within_the_token_budget(tmp_path, tokenizer):
    corpora = two_corpora(tmp_path)
    scan = scan_corpora(corpora, 4, 3, keep_train=False, keys_dir=str(tmp_path))
    stream = make_streaming_dataset(
        corpora,
        scan.keys_paths,
        scan.threshold,
        tokenizer,
        tokens_per_batch=64,
        max_length=8,
        shuffle_buffer=16,
        num_examples=sum(scan.num_train),
        sample=scan.tokenizer_sample,
    )
    held_out = {source for source, _ in scan.splits.validation + scan.splits.test}
    encoded_held_out = {tuple(ids) for ids in tokenizer.tokenize(sorted(held_out)).to_list()}
    for inputs, targets in stream.dataset.take(30):
        batch, length = targets.shape
        assert batch * length <= 64 and length in (4, 8)
        for encoder in inputs["encoder_inputs"].numpy():
            assert tuple(encoder[encoder > 0][1:-1]) not in encoded_held_out
