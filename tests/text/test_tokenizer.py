"""Tests for keras_transformer.text: training, round trip, [UNK], tf.function, saving."""

import json
import os
import subprocess
import sys
import textwrap
import warnings
import zipfile

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

# Tokenizers run TensorFlow Text ops whatever the Keras backend: one_backend, but for what
# they take from the backend (`all_backends`).
pytestmark = pytest.mark.one_backend

from keras_transformer.text import (  # noqa: E402
    END_TOKEN,
    PAD_TOKEN,
    START_TOKEN,
    UNK_TOKEN,
    Tokenizer,
    normalize,
    train_tokenizer,
)

SPANISH = [
    "¿Dónde está la biblioteca?",
    "¡Hola, señor Muñoz! Tengo 42 años.",
    "El pingüino comió 3,5 kilos de atún; después, durmió.",
    "Él dijo: «sí», y ella respondió: “no”.",
    "La niña pidió 17 caramelos (de fresa) a las 10:30.",
    "Sea la luz: y fué la luz.",
]
ENGLISH = [
    "Where is the library?",
    "Hello, Mr. Muñoz! I'm 42 years old.",
    "The penguin ate 3.5 kilos of tuna; then, it slept.",
    'He said: "yes", and she answered: “no”.',
    "The girl asked for 17 candies (strawberry) at 10:30.",
    "Let there be light: and there was light.",
]
SAMPLES = SPANISH + ENGLISH


def texts(strings):
    return [s.decode("utf-8") for s in np.asarray(strings).reshape(-1)]


@pytest.fixture(scope="module")
def tokenizer():
    # Repeated so that whole words reach the learner's minimum count and become pieces.
    return train_tokenizer(SAMPLES * 12, vocabulary_size=400)


def test_reserved_ids_come_first(tokenizer):
    vocabulary = tokenizer.get_vocabulary()
    assert vocabulary[:4] == [PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id) == (
        0,
        1,
        2,
        3,
    )
    assert tokenizer.vocabulary_size() == len(vocabulary) <= 400


def test_every_seen_character_and_its_continuation_is_in_the_vocabulary(tokenizer):
    vocabulary = set(tokenizer.get_vocabulary())
    for char in set("".join(SAMPLES)) - {" "}:
        assert char in vocabulary, char
        assert "##" + char in vocabulary, char


@pytest.mark.parametrize("sentence", SAMPLES)
def test_round_trip_scalar(tokenizer, sentence):
    ids = tokenizer.tokenize(sentence)
    assert isinstance(ids, tf.Tensor) and ids.shape.rank == 1 and ids.dtype == tf.int32
    assert tokenizer.unk_id not in ids.numpy().tolist()
    assert tokenizer.detokenize(ids).numpy().decode("utf-8") == sentence


def test_round_trip_batch_of_both_languages(tokenizer):
    ids = tokenizer.tokenize(SAMPLES)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.shape[0] == len(SAMPLES)
    assert texts(tokenizer.detokenize(ids)) == SAMPLES
    # Dense and 0-padded, as a model would hand the ids back.
    assert texts(tokenizer.detokenize(ids.to_tensor())) == SAMPLES


def test_round_trip_unseen_sentences_of_seen_characters(tokenizer):
    sentences = ["¿Está Muñoz allí?", "¡Hola niña, pingüino!", "Tuna, 1735: the end?"]
    assert set("".join(sentences)) <= set("".join(SAMPLES))
    ids = tokenizer.tokenize(sentences)
    assert tokenizer.unk_id not in ids.flat_values.numpy().tolist()
    assert texts(tokenizer.detokenize(ids)) == sentences


def test_round_trip_is_exact_on_normalized_text(tokenizer):
    raw = "  ¿Dónde\u00a0está   la\tbiblioteca?\u200b  "
    normalized = tokenizer.normalize(raw).numpy().decode("utf-8")
    assert normalized == "¿Dónde está la biblioteca?"
    assert tokenizer.detokenize(tokenizer.tokenize(raw)).numpy().decode("utf-8") == normalized
    # Decomposed accents (e + U+0301) are composed (NFC): same ids as the composed text.
    decomposed = "¿Do\u0301nde esta\u0301 la biblioteca?"
    np.testing.assert_array_equal(
        tokenizer.tokenize(decomposed).numpy(), tokenizer.tokenize(normalized).numpy()
    )


def test_default_keeps_case_and_accents(tokenizer):
    ids = tokenizer.tokenize("Él está")
    assert tokenizer.detokenize(ids).numpy().decode("utf-8") == "Él está"
    assert normalize("Él está").numpy().decode("utf-8") == "Él está"


def test_lowercase_and_strip_accents():
    tokenizer = train_tokenizer(
        SAMPLES * 12, vocabulary_size=300, lowercase=True, strip_accents=True
    )
    assert tokenizer.lowercase and tokenizer.strip_accents
    ids = tokenizer.tokenize("¿DÓNDE ESTÁ Muñoz?")
    assert tokenizer.detokenize(ids).numpy().decode("utf-8") == "¿donde esta munoz?"
    assert not any(char in tokenizer.get_vocabulary() for char in "ÁÉÓáéóñÑ")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("hola ☃", "hola [UNK]"),
        ("hola☃", "hola [UNK]"),  # only the unseen character is lost, not its word
        ("Ωhola", "[UNK] hola"),
        ("漢字 ok", "[UNK] [UNK] ok"),
        ("🙂🙂", "[UNK] [UNK]"),
    ],
)
def test_unseen_characters_map_to_unk(tokenizer, text, expected):
    ids = tokenizer.tokenize(text).numpy().tolist()
    assert ids.count(tokenizer.unk_id) == expected.count(UNK_TOKEN)
    assert tokenizer.detokenize(ids).numpy().decode("utf-8") == expected


def test_unseen_characters_and_invalid_utf8_never_crash(tokenizer):
    inputs = tf.constant([b"caf\xff\xfe", b"\x00\x01 hola", b"", b"   "])
    ids = tokenizer.tokenize(inputs)
    assert ids.shape[0] == 4
    assert ids[2].shape[0] == 0 and ids[3].shape[0] == 0
    assert texts(tokenizer.detokenize(ids))[2:] == ["", ""]


@pytest.mark.all_backends  # Detokenizes a tensor of the backend too.
def test_detokenize_drops_padding_start_and_everything_after_end(tokenizer):
    ids = tokenizer.tokenize("¿Dónde está?").numpy().tolist()
    start, end = tokenizer.start_id, tokenizer.end_id
    padded = np.array(
        [[start] + ids + [end, 0, 0, 0], [start] + ids + [end] + ids[:2] + [0]], "int32"
    )
    assert texts(tokenizer.detokenize(padded)) == ["¿Dónde está?", "¿Dónde está?"]
    # Ragged Python lists, 1-D NumPy arrays and tf tensors.
    assert texts(tokenizer.detokenize([[start] + ids, ids[:1]]))[0] == "¿Dónde está?"
    one = tokenizer.detokenize(np.array([start] + ids + [end]))
    assert one.shape.rank == 0 and one.numpy().decode("utf-8") == "¿Dónde está?"
    backend_ids = keras.ops.convert_to_tensor(np.array([ids], "int32"))
    assert texts(tokenizer.detokenize(backend_ids)) == ["¿Dónde está?"]


def test_works_inside_tf_function_and_tf_data(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings).to_tensor())

    assert texts(round_trip(tf.constant(SAMPLES))) == SAMPLES
    dataset = tf.data.Dataset.from_tensor_slices(SAMPLES).map(tokenizer.tokenize)
    for ids, sentence in zip(dataset, SAMPLES, strict=True):
        assert tokenizer.detokenize(ids).numpy().decode("utf-8") == sentence


def test_tokenizer_built_first_inside_a_trace():
    vocabulary = [PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN, "a", "##a", "b", "##b"]
    tokenizer = Tokenizer(vocabulary)

    @tf.function
    def tokenize(strings):
        return tokenizer.tokenize(strings).to_tensor()

    np.testing.assert_array_equal(tokenize(tf.constant(["ab", "ba"])).numpy(), [[4, 7], [6, 5]])
    # The tf-text tokenizer was built eagerly (init_scope), so it is reusable eagerly.
    assert tokenizer.tokenize("ab").numpy().tolist() == [4, 7]


def test_get_config_round_trip(tokenizer):
    config = tokenizer.get_config()
    json.dumps(config)
    assert config["vocabulary"] is None  # saved as an asset
    restored = Tokenizer.from_config(config)
    assert restored.get_config() == config
    with pytest.raises(ValueError, match="no vocabulary"):
        restored.tokenize("hola")
    restored.set_vocabulary(tokenizer.get_vocabulary())
    assert restored.tokenize(SAMPLES).to_list() == tokenizer.tokenize(SAMPLES).to_list()


def test_vocabulary_from_file(tokenizer, tmp_path):
    tokenizer.save_assets(str(tmp_path))
    restored = Tokenizer(str(tmp_path / "vocabulary.txt"))
    assert restored.get_vocabulary() == tokenizer.get_vocabulary()
    # A file written with Windows line ends reads the same.
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes("\r\n".join(tokenizer.get_vocabulary()).encode("utf-8") + b"\r\n")
    assert Tokenizer(crlf).get_vocabulary() == tokenizer.get_vocabulary()


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_vocabulary_file_must_be_a_regular_file():
    # A device would stream without end: refused before any read.
    with pytest.raises(ValueError, match="regular file. Received: path='/dev/zero'"):
        Tokenizer("/dev/zero")


def test_from_config_takes_tokens_but_never_a_path(tokenizer, tmp_path, monkeypatch):
    config = tokenizer.get_config()
    restored = Tokenizer.from_config({**config, "vocabulary": tokenizer.get_vocabulary()})
    assert restored.get_vocabulary() == tokenizer.get_vocabulary()

    tokenizer.save_assets(str(tmp_path))
    path = str(tmp_path / "vocabulary.txt")
    opened = []
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda file, *a, **k: opened.append(file) or real_open(file, *a, **k)
    )
    for vocabulary in (path, "/etc/passwd", {"path": path}):
        with pytest.raises(ValueError, match="`vocabulary`.*never opens a path"):
            Tokenizer.from_config({**config, "vocabulary": vocabulary})
    assert path not in opened and "/etc/passwd" not in opened


@pytest.mark.parametrize(
    "vocabulary, match",
    [
        ([UNK_TOKEN, PAD_TOKEN, START_TOKEN, END_TOKEN], r"vocabulary\[0\]='\[UNK\]'"),
        ([PAD_TOKEN, UNK_TOKEN, "a"], r"\[START\]"),
        ([PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN, "a", "a"], "duplicate"),
    ],
)
def test_invalid_vocabulary(vocabulary, match):
    with pytest.raises(ValueError, match=match):
        Tokenizer(vocabulary)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="max_bytes_per_word=0"):
        Tokenizer(max_bytes_per_word=0)
    with pytest.raises(ValueError, match="vocabulary_size=3"):
        train_tokenizer(SAMPLES, vocabulary_size=3)
    with pytest.raises(ValueError, match="vocabulary_size=20"):
        train_tokenizer(SAMPLES, vocabulary_size=20)  # fewer than 2 * characters
    with pytest.raises(ValueError, match="not one string"):
        train_tokenizer("hola", vocabulary_size=100)
    with pytest.raises(ValueError, match="no words"):
        train_tokenizer(["", "  "], vocabulary_size=100)
    with pytest.raises(ValueError, match="lower_threshold"):
        train_tokenizer(SAMPLES, vocabulary_size=100, lower_threshold=3)


def test_vocabulary_size_is_a_maximum():
    small = train_tokenizer(SAMPLES * 12, vocabulary_size=200)
    large = train_tokenizer(SAMPLES * 12, vocabulary_size=1000)
    assert small.vocabulary_size() <= 200
    assert small.vocabulary_size() < large.vocabulary_size() <= 1000
    # Fewer pieces, longer sequences; still reversible.
    assert texts(small.detokenize(small.tokenize(SAMPLES))) == SAMPLES


def test_extra_characters():
    tokenizer = train_tokenizer(["abc abc"] * 20, vocabulary_size=100, extra_characters="0123")
    assert tokenizer.detokenize(tokenizer.tokenize("abc 3210")).numpy().decode() == "abc 3210"


def _save_model(tokenizer, path):
    model = keras.Sequential([tokenizer], name="tokenizer_model")
    with warnings.catch_warnings():
        # A model made of a weightless tokenizer is never "built"; nothing is lost.
        warnings.filterwarnings("ignore", message=".*has not yet been built")
        model.save(path)
    return model


def test_keras_file_contains_vocabulary_asset_and_reloads(tokenizer, tmp_path):
    path = str(tmp_path / "tokenizer.keras")
    _save_model(tokenizer, path)
    with zipfile.ZipFile(path) as archive:
        assets = [name for name in archive.namelist() if name.endswith("vocabulary.txt")]
        assert len(assets) == 1
        saved = archive.read(assets[0]).decode("utf-8").splitlines()
    assert saved == tokenizer.get_vocabulary()
    restored = keras.saving.load_model(path).layers[0]
    assert isinstance(restored, Tokenizer)
    assert restored.get_config() == tokenizer.get_config()
    assert restored.tokenize(SAMPLES).to_list() == tokenizer.tokenize(SAMPLES).to_list()


@pytest.mark.slow
def test_keras_file_reloads_in_a_fresh_process(tokenizer, tmp_path):
    path = str(tmp_path / "tokenizer.keras")
    _save_model(tokenizer, path)
    script = textwrap.dedent(
        """
        import json, sys
        import keras
        import keras_transformer.text  # registers the Tokenizer class
        tokenizer = keras.saving.load_model(sys.argv[1]).layers[0]
        samples = json.loads(sys.stdin.read())
        ids = tokenizer.tokenize(samples).to_list()
        text = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
        print("RESULT" + json.dumps({"ids": ids, "text": text}))
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, path],
        input=json.dumps(SAMPLES),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [line for line in completed.stdout.splitlines() if line.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT") :])
    assert result["ids"] == tokenizer.tokenize(SAMPLES).to_list()
    assert result["text"] == SAMPLES


def test_tokenize_and_detokenize_export_in_a_saved_model(tokenizer, tmp_path):
    class Module(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, strings):
            ids = self.tokenizer.tokenize(strings).to_tensor()  # (batch, length)
            return {"ids": ids, "text": self.tokenizer.detokenize(ids)}

    path = str(tmp_path / "saved_model")
    tf.saved_model.save(Module(tokenizer), path)
    outputs = tf.saved_model.load(path).round_trip(tf.constant(SAMPLES))
    np.testing.assert_array_equal(
        outputs["ids"].numpy(), tokenizer.tokenize(SAMPLES).to_tensor().numpy()
    )
    assert texts(outputs["text"]) == SAMPLES
