"""Tests for keras_transformer.text.sentencepiece: training, round trip, reserved ids, loading a
`.model` file, `.keras` reload, crafted assets, SavedModel export and a Bible training run."""

import io
import json
import os
import zipfile

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

# SentencePiece runs TensorFlow Text ops whatever the Keras backend: one_backend, but for the
# Translators built on it (`all_backends`).
pytestmark = pytest.mark.one_backend
sentencepiece = pytest.importorskip("sentencepiece")

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.text import (  # noqa: E402
    END_TOKEN,
    PAD_TOKEN,
    START_TOKEN,
    UNK_TOKEN,
    SentencePieceTokenizer,
    normalize,
    train_sentencepiece,
)
from keras_transformer.text import sentencepiece as sentencepiece_module  # noqa: E402
from keras_transformer.translator import Translator  # noqa: E402

CORPUS = [
    "¿Dónde está la biblioteca?",
    "Él dijo: «sí», y ella respondió: “no”.",
    "El pingüino comió atún; después, durmió.",
    "Where is the library?",
    "He said: yes, and she answered: no.",
    "The penguin ate tuna; then, it slept.",
]
# Unseen sentences of seen characters, an empty one and one of spaces only.
UNSEEN = ["¿Dónde durmió él?", "the library is here", "", "   \t "]


def texts(strings):
    return [s.decode("utf-8") for s in np.asarray(strings).reshape(-1)]


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def tokenizer(request):
    return train_sentencepiece(CORPUS * 10, vocabulary_size=120, model_type=request.param)


def test_reserved_pieces_are_ids_0_to_3_and_training_is_deterministic(tokenizer):
    assert tokenizer.get_vocabulary()[:4] == [PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id) == (
        0,
        1,
        2,
        3,
    )
    again = train_sentencepiece(CORPUS * 10, vocabulary_size=120, model_type=_type(tokenizer))
    assert again.proto == tokenizer.proto
    assert 10 < tokenizer.vocabulary_size() <= 120


def _type(tokenizer):
    model = sentencepiece.sentencepiece_model_pb2.ModelProto.FromString(tokenizer.proto)
    return {1: "unigram", 2: "bpe"}[model.trainer_spec.model_type]


def test_round_trip_is_normalize_on_seen_characters(tokenizer):
    sentences = CORPUS + UNSEEN + ["  ¿Dónde\u00a0 está   e\u0301l? "]
    ids = tokenizer.tokenize(sentences)
    assert texts(tokenizer.detokenize(ids)) == texts(normalize(sentences))
    assert texts(tokenizer.detokenize(ids))[-4:] == [
        "the library is here",
        "",
        "",
        "¿Dónde está él?",
    ]
    assert ids.row_lengths().numpy().tolist()[-3:-1] == [0, 0]  # "" and spaces
    assert not np.isin(ids.flat_values.numpy(), [0, 1, 2, 3]).any()
    scalar = tokenizer.tokenize(CORPUS[0])
    assert scalar.shape.rank == 1
    assert tokenizer.detokenize(scalar).numpy().decode() == CORPUS[0]


def test_unseen_characters_map_to_unk_and_never_crash(tokenizer):
    ids = tokenizer.tokenize(["la 😀🎉 biblioteca", "\xff\xfe", "你好"])
    rows = ids.to_list()
    assert tokenizer.unk_id in rows[0] and tokenizer.unk_id in rows[2]
    assert texts(tokenizer.detokenize(ids))[0] == f"la {UNK_TOKEN} biblioteca"
    invalid = tokenizer.tokenize(tf.constant([b"\xff\xfe la"]))
    assert texts(tokenizer.detokenize(invalid))[0].endswith(" la")


def test_detokenize_drops_padding_start_and_everything_after_end(tokenizer):
    pieces = tokenizer.tokenize("la biblioteca").numpy().tolist()
    ids = [[2, *pieces, 3, *pieces, 0], [2, *pieces, 0, 0, 0, 0, 0][: len(pieces) + 5]]
    assert texts(tokenizer.detokenize(ids)) == ["la biblioteca", "la biblioteca"]


def test_works_traced_in_tf_function_and_tf_data(tokenizer):
    fresh = SentencePieceTokenizer(tokenizer.proto)  # built first inside the trace

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return fresh.detokenize(fresh.tokenize(strings).to_tensor())

    assert texts(round_trip(tf.constant(CORPUS))) == CORPUS
    dataset = tf.data.Dataset.from_tensor_slices(CORPUS).batch(3).map(fresh.tokenize)
    rows = [row for batch in dataset for row in batch.to_list()]
    assert rows == tokenizer.tokenize(CORPUS).to_list()


def test_survives_clear_session(tokenizer):
    expected = tokenizer.tokenize(CORPUS).to_list()
    keras.backend.clear_session()  # clears TensorFlow's kernel cache
    assert tokenizer.tokenize(CORPUS).to_list() == expected


def _default_ids_model():
    """A model trained with SentencePiece's default ids: <unk>=0 <s>=1 </s>=2, no padding."""
    writer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 10),
        model_writer=writer,
        vocab_size=80,  # SentencePiece's name
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    return writer.getvalue()


def test_a_model_file_with_other_reserved_ids_is_reordered(tmp_path):
    proto = _default_ids_model()
    path = tmp_path / "external.model"
    path.write_bytes(proto)
    tokenizer = SentencePieceTokenizer(str(path))
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    assert tokenizer.get_vocabulary()[:4] == [PAD_TOKEN, "<unk>", "<s>", "</s>"]
    assert tokenizer.vocabulary_size() == processor.get_piece_size() + 1  # [PAD] added
    # The same pieces as SentencePiece's own encoder, under the new ids.
    expected = [[processor.id_to_piece(i) for i in row] for row in processor.encode(CORPUS)]
    rows = tokenizer.tokenize(CORPUS).to_list()
    assert [[tokenizer.id_to_token(i) for i in row] for row in rows] == expected
    assert texts(tokenizer.detokenize(rows)) == CORPUS
    # Canonical already: reading it again changes nothing.
    assert SentencePieceTokenizer(tokenizer.proto).proto == tokenizer.proto


@pytest.mark.parametrize(
    "proto, match",
    [
        (b"not a model", "not a serialized SentencePiece model"),
        (b"", "between 1 and"),
        (3, "must be bytes"),
    ],
)
def test_invalid_models_are_refused(proto, match):
    with pytest.raises(ValueError, match=match):
        SentencePieceTokenizer(proto)


def test_invalid_training_arguments():
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(CORPUS, 60, model_type="word")
    with pytest.raises(ValueError, match="vocabulary_size"):
        train_sentencepiece(CORPUS, 5)
    with pytest.raises(ValueError, match="max_sentences"):
        train_sentencepiece(CORPUS, 60, max_sentences=0)
    with pytest.raises(ValueError, match="SentencePiece training failed"):
        train_sentencepiece(CORPUS, 60, no_such_option=1)


def test_max_sentences_takes_evenly_spaced_sentences():
    # Half of [A, B, A, B, ...] evenly spaced is all A: B's words are then unknown.
    corpus = ["alpha beta gamma", "zulu yankee xray"] * 20
    tokenizer = train_sentencepiece(corpus, 40, max_sentences=20)
    assert tokenizer.unk_id not in tokenizer.tokenize("alpha gamma").numpy()
    assert tokenizer.unk_id in tokenizer.tokenize("zulu").numpy()


def test_from_config_never_opens_a_path(tokenizer, tmp_path, monkeypatch):
    config = tokenizer.get_config()
    assert config["proto"] is None and "vocabulary" not in config
    empty = SentencePieceTokenizer.from_config(config)
    with pytest.raises(ValueError, match="no model yet"):
        empty.tokenize("x")
    path = tmp_path / "model.model"
    path.write_bytes(tokenizer.proto)
    monkeypatch.setattr(os, "stat", _fail)
    monkeypatch.setattr(os, "lstat", _fail)
    with pytest.raises(ValueError, match="never opens a path"):
        SentencePieceTokenizer.from_config({**config, "proto": str(path)})


def _fail(*args, **kwargs):
    raise AssertionError("a path was opened")


# --------------------------------------------------------------------------- .keras files


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """`(path, translator)`: a tiny SentencePiece Translator saved to a `.keras` file."""
    tokenizer = train_sentencepiece(CORPUS * 10, vocabulary_size=100)
    model = Transformer(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, d_model=16, num_heads=2, ff_dim=32
    )
    translator = Translator(
        model, tokenizer, max_source_length=8, extra_length=4, jit_compile=False
    )
    path = tmp_path_factory.mktemp("spm_translator") / "translator.keras"
    translator.save(path)
    return path, translator


@pytest.mark.all_backends
def test_translator_reloads_with_its_sentencepiece_model(saved):
    path, translator = saved
    with zipfile.ZipFile(path) as archive:
        assets = [name for name in archive.namelist() if name.endswith("sentencepiece.model")]
        assert len(assets) == 1
        assert archive.read(assets[0]) == translator.tokenizer.proto
    restored = Translator.load(path)
    assert isinstance(restored.tokenizer, SentencePieceTokenizer)
    assert restored.tokenizer.proto == translator.tokenizer.proto
    sources = CORPUS[:3] + [""]
    assert restored(sources) == translator(sources)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(restored.model.weights[0]),
        keras.ops.convert_to_numpy(translator.model.weights[0]),
    )



@pytest.mark.all_backends
def test_preset_directory_carries_the_sentencepiece_model(saved, tmp_path):
    _, translator = saved
    translator.save_to_preset(tmp_path / "preset")
    restored = Translator.from_preset(tmp_path / "preset")
    assert isinstance(restored.tokenizer, SentencePieceTokenizer)
    assert restored.tokenizer.proto == translator.tokenizer.proto
    sources = CORPUS[:3] + [""]
    expected = [t.text for t in translator.translate(sources)]
    assert [t.text for t in restored.translate(sources)] == expected

def _rewrite(saved, tmp_path, asset):
    target = tmp_path / "crafted.keras"
    with zipfile.ZipFile(saved[0]) as reader, zipfile.ZipFile(target, "w") as writer:
        for item in reader.infolist():
            data = reader.read(item)
            if item.filename.endswith("sentencepiece.model"):
                if asset is None:
                    continue
                data = asset
            writer.writestr(item, data)
    return target


def _load_error(path):
    with pytest.raises(ValueError) as info:
        Translator.load(path)
    return str(info.value)


def test_crafted_assets_are_refused(saved, tmp_path, monkeypatch):
    proto = saved[1].tokenizer.proto
    message = _load_error(_rewrite(saved, tmp_path, b"\x08garbage"))
    assert "sentencepiece.model" in message and "not a serialized" in message
    # Another size than the embedding's.
    other = train_sentencepiece(CORPUS * 10, vocabulary_size=60).proto
    message = _load_error(_rewrite(saved, tmp_path, other))
    assert (
        "sentencepiece.model" in message
        and f"vocabulary_size={len(saved[1].tokenizer.get_vocabulary())}" in message
    )
    # The same pieces with [PAD] and [UNK] swapped: a valid model, never written by
    # `save_assets` (the padding piece must be id 0).
    model = sentencepiece.sentencepiece_model_pb2.ModelProto.FromString(proto)
    first, second = model.pieces[0].__deepcopy__(), model.pieces[1].__deepcopy__()
    model.pieces[0].CopyFrom(second)
    model.pieces[1].CopyFrom(first)
    message = _load_error(_rewrite(saved, tmp_path, model.SerializeToString()))
    assert "sentencepiece.model" in message and "ids 0-3" in message
    message = _load_error(_rewrite(saved, tmp_path, None))
    assert "no vocabulary asset" in message
    monkeypatch.setattr(sentencepiece_module, "MAX_MODEL_BYTES", len(proto) - 1)
    message = _load_error(_rewrite(saved, tmp_path, proto))
    assert "sentencepiece.model" in message and "too large" in message


# --------------------------------------------------------------------------- serving, training


@pytest.mark.slow
def test_saved_model_translates_as_the_translator(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export runs on the TensorFlow backend")
    from keras_transformer import LabelSmoothedCrossentropy, transformer_adam
    from keras_transformer.data import make_dataset
    from keras_transformer.datasets import number_words
    from keras_transformer.export import export_saved_model
    from tests.export_helpers import BAD_INPUTS, SENTENCES

    keras.utils.set_random_seed(0)
    splits = number_words(num_train=600, num_validation=0, num_test=0, max_number=5000)
    tokenizer = train_sentencepiece([text for pair in splits.train for text in pair], 200)
    data = make_dataset(
        splits.train, tokenizer, tokens_per_batch=768, max_length=24, bucket_boundaries=[24]
    )
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), dropout=0.0)
    model.compile(transformer_adam(64, warmup_steps=100), LabelSmoothedCrossentropy(0.1))
    model.fit(data.dataset.take(12), verbose=0)  # a few steps: the outputs are not empty
    translator = Translator(
        model,
        tokenizer,
        beam_size=1,
        max_source_length=16,
        extra_length=8,
        bucket_boundaries=(16,),
        jit_compile=False,
    )
    path = export_saved_model(translator, tmp_path / "saved_model", jit_compile=False)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    # Empty, invalid UTF-8, unseen characters, truncated.
    inputs = [sentence.encode() for sentence in SENTENCES[:3]] + BAD_INPUTS[:1] + BAD_INPUTS[3:6]
    outputs = serve(inputs=tf.constant(inputs))
    expected = translator([text.decode("utf-8", "replace") for text in inputs])
    assert texts(outputs["translations"]) == expected
    assert any(expected[:3])  # something was translated


@pytest.mark.slow
@pytest.mark.one_backend
def test_bible_trains_end_to_end_with_sentencepiece(tmp_path):
    pytest.importorskip("pysword")
    from keras_transformer.training import train
    from tests.datasets.test_sword_bible import INSTALLED
    from tests.training.training_helpers import TINY_RUN, merge

    if not INSTALLED:
        pytest.skip("apt-get install -y sword-text-sparv sword-text-web")
    config = merge(
        TINY_RUN,
        {
            "output_dir": str(tmp_path / "run"),
            "data": {
                "dataset": "sword_bible",
                "tokenizer": "sentencepiece",
                "sentencepiece_options": {"max_sentences": 2000},
                "vocabulary_size": 500,
                "max_length": 64,
                "tokens_per_batch": 1024,
                "bucket_boundaries": [64],
                "num_validation": 0,
                "num_test": 4,
            },
            "training": {"train_steps": 4, "steps_per_epoch": 4},
            "evaluation": {"test": True, "beam_size": 1, "extra_length": 4},
            "export": {"translator": True, "saved_model": False},
        },
    )
    config["data"]["options"] = {}  # `merge` keeps the number-words options
    result = train(config, verbose=0)
    assert isinstance(result.tokenizer, SentencePieceTokenizer)
    assert result.tokenizer.vocabulary_size() <= 500
    assert "test_bleu" in result.metrics
    restored = Translator.load(os.path.join(result.output_dir, "translator.keras"))
    assert restored.tokenizer.proto == result.tokenizer.proto
    with open(os.path.join(result.output_dir, "tokenizer.json"), encoding="utf-8") as file:
        assert "sentencepiece" in json.load(file)
