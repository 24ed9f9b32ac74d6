"""Marian / OPUS-MT import and export (`keras_transformer.export.marian`).

No model can be downloaded here, so the `marian_directory` fixture builds one the way an
OPUS-MT directory is laid out: two SentencePiece models trained on a few hundred generated
sentences, one shared `vocab.json` (`</s>` 0, `<unk>` 1, ..., `<pad>` last), and a tiny random
`MarianMTModel` (swish, sinusoid halves, a random `final_logits_bias`) saved by
transformers' `save_pretrained`. The imported Translator must compute transformers' logits
on every backend, and generate its greedy and beam outputs.
"""

import json
import os
import random

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
spm = pytest.importorskip("sentencepiece")

from keras_transformer.export.marian import BANNED_LOGIT, import_marian  # noqa: E402

BACKEND = keras.backend.backend()
WORDS = (
    "casa perro gato mesa libro agua fuego tierra cielo mar sol luna árbol flor camino ciudad "
    "rojo verde azul grande pequeño nuevo viejo bueno malo come bebe lee escribe ve corre"
).split()
TARGET_WORDS = (
    "house dog cat table book water fire earth sky sea sun moon tree flower road city red "
    "green blue big small new old good bad eats drinks reads writes sees runs"
).split()
SENTENCES = ["el perro come", "la casa grande", "un libro nuevo y viejo", "el sol ve la luna"]


def _sentences(words, count, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) for _ in range(count)]


def _train_spm(sentences, prefix, vocabulary_size):
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_prefix=str(prefix),
        vocab_size=vocabulary_size,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=0,
        unk_id=1,
        pad_id=-1,
        normalization_rule_name="nmt_nfkc",
        minloglevel=2,
        hard_vocab_limit=False,
    )
    return f"{prefix}.model"


def write_marian_directory(directory, seed=0):
    """A tiny random OPUS-MT-like `MarianMTModel` directory."""
    source_model = _train_spm(_sentences(WORDS, 400, 1), directory / "src", 50)
    target_model = _train_spm(_sentences(TARGET_WORDS, 400, 2), directory / "tgt", 50)
    pieces = ["</s>", "<unk>"]
    for path in (source_model, target_model):
        processor = spm.SentencePieceProcessor(model_file=path)
        for index in range(processor.get_piece_size()):
            piece = processor.id_to_piece(index)
            if (
                piece not in pieces
                and not processor.is_control(index)
                and not processor.is_unknown(index)
            ):
                pieces.append(piece)
    pieces.append("<pad>")
    vocabulary = {piece: index for index, piece in enumerate(pieces)}
    (directory / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    os.replace(source_model, directory / "source.spm")
    os.replace(target_model, directory / "target.spm")
    pad = len(pieces) - 1
    config = transformers.MarianConfig(
        vocab_size=len(pieces),
        d_model=16,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        activation_function="swish",
        max_position_embeddings=64,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        bad_words_ids=[[pad]],
        num_beams=4,
        init_std=0.3,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] = 2.5  # ends sentences after a few tokens
    model.save_pretrained(directory)
    transformers.MarianTokenizer(
        *(str(directory / name) for name in ("source.spm", "target.spm", "vocab.json"))
    ).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def marian_directory(tmp_path_factory):
    return write_marian_directory(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="session")
def hugging_face(marian_directory):
    model = transformers.MarianMTModel.from_pretrained(marian_directory).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian_directory)
    return model, tokenizer


def _marian_to_ours(translator):
    """Our id of each Marian id."""
    vocabulary = translator.tokenizer.get_vocabulary()
    return {piece: index for index, piece in enumerate(vocabulary)}


def test_logits_equal_transformers(marian_directory, hugging_face):
    hf_model, hf_tokenizer = hugging_face
    translator = import_marian(marian_directory)
    batch = hf_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    targets = hf_tokenizer(text_target=SENTENCES[::-1], return_tensors="pt", padding=True)
    decoder_inputs = hf_model.prepare_decoder_input_ids_from_labels(targets["input_ids"])
    with torch.no_grad():
        expected = hf_model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_inputs,
        ).logits.numpy()

    ours = _marian_to_ours(translator)
    marian_vocabulary = json.loads((marian_directory / "vocab.json").read_text())
    to_ours = np.zeros(len(marian_vocabulary), "int64")
    for piece, index in marian_vocabulary.items():
        to_ours[index] = ours[piece]
    pad = hf_model.config.pad_token_id
    encoder_inputs = to_ours[batch["input_ids"].numpy()]
    encoder_inputs[~batch["attention_mask"].numpy().astype(bool)] = 0  # our padding
    # Our own tokenization gives the same ids.
    np.testing.assert_array_equal(
        translator.preprocessor.pad_batch(
            translator.preprocessor.encode_source(SENTENCES)[0], encoder_inputs.shape[1]
        ).numpy()[: len(SENTENCES)],
        encoder_inputs,
    )
    logits = keras.ops.convert_to_numpy(
        translator.model(
            {"encoder_inputs": encoder_inputs, "decoder_inputs": to_ours[decoder_inputs.numpy()]}
        )
    )
    # Every position where the target is not padding (transformers attends to them anyway).
    keep = decoder_inputs.numpy() != pad
    keep[:, 0] = True
    compared = [index for index in range(len(to_ours)) if index != pad]
    difference = np.abs(logits[..., to_ours[compared]] - expected[..., compared])[keep]
    print(f"{BACKEND}: max |logit difference| = {difference.max():.3g}")
    assert difference.max() < 1e-4
    assert np.all(logits[..., [0, ours["<pad>"]]] < BANNED_LOGIT / 2)
