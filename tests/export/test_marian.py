"""Marian / OPUS-MT import and export (`keras_transformer.export.marian`).

No model can be downloaded here, so the `marian_directory` fixture builds one the way an
OPUS-MT directory is laid out: two SentencePiece models trained on a few hundred generated
sentences, one shared `vocab.json` (`</s>` 0, `<unk>` 1, ..., `<pad>` last), and a tiny random
`MarianMTModel` (swish, sinusoid halves, a random `final_logits_bias`) saved by
transformers' `save_pretrained`. The imported Translator must compute transformers' logits
on every backend, and generate its greedy and beam outputs.
"""

import json
import logging
import os
import random
import warnings

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
        init_std=0.1,
        dropout=0.0,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config)
    tokenizer = transformers.MarianTokenizer(
        *(str(directory / name) for name in ("source.spm", "target.spm", "vocab.json"))
    )
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)  # a buffer: training leaves it as it is
    _train(model, tokenizer, steps=40)
    with torch.no_grad():  # As in every OPUS-MT model (and as CTranslate2 assumes): the
        model.model.shared.weight[pad] = 0.0  # decoder starts from a zero embedding.
    model.eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _train(model, tokenizer, steps):
    """A few steps on word-by-word pairs: enough for outputs that end (a random model
    repeats one token to the length limit), and for beam searches that differ from greedy."""
    lexicon = dict(zip(WORDS, TARGET_WORDS, strict=True))
    sources = _sentences(WORDS, 256, 3)
    targets = [" ".join(lexicon[word] for word in sentence.split()) for sentence in sources]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for step in range(steps):
        rows = slice(32 * (step % 8), 32 * (step % 8 + 1))
        batch = tokenizer(
            sources[rows], text_target=targets[rows], return_tensors="pt", padding=True
        )
        batch["labels"][batch["labels"] == model.config.pad_token_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


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


# Decoding runs the same compiled search on every backend (tests/test_translator.py): the
# comparisons of whole outputs run once.
SOURCES = _sentences(WORDS, 16, 4)


@pytest.fixture(scope="session")
def imported(marian_directory, tmp_path_factory):
    """`(translator, preset directory)`: the fixture's model imported once."""
    preset = tmp_path_factory.mktemp("imported") / "preset"
    translator = import_marian(marian_directory, preset)
    translator.extra_length = 40
    return translator, preset


def _hf_generate(hugging_face, sentences, **options):
    model, tokenizer = hugging_face
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    pad = model.config.pad_token_id
    with torch.no_grad():
        outputs = model.generate(
            **batch, max_new_tokens=48, do_sample=False, bad_words_ids=[[pad]], **options
        )
    rows = outputs.reshape(len(sentences), -1, outputs.shape[-1]).tolist()
    return [
        [tokenizer.convert_ids_to_tokens([i for i in row[1:] if i != pad]) for row in hypotheses]
        for hypotheses in rows
    ]


@pytest.mark.slow
@pytest.mark.one_backend
def test_greedy_and_beam_outputs_equal_transformers(hugging_face, imported):
    translator, _ = imported
    greedy = _hf_generate(hugging_face, SOURCES, num_beams=1)
    ours = translator.translate(SOURCES, beam_size=1)
    same = sum(o.target_tokens == g[0] for o, g in zip(ours, greedy, strict=True))
    print(f"greedy: {same} of {len(SOURCES)} identical")
    assert same == len(SOURCES)
    assert all(g[0][-1] == "</s>" for g in greedy)  # finished, not cut at max_new_tokens

    # Without a length penalty both searches rank by the sum of log probabilities: the best
    # hypotheses agree. Lower in the n-best lists the searches differ in when they stop
    # collecting finished hypotheses (measured: 15 of 16 lists identical).
    beams = _hf_generate(
        hugging_face, SOURCES, num_beams=4, length_penalty=0.0, num_return_sequences=4
    )
    ours = translator.translate(SOURCES, beam_size=4, alpha=0.0, num_hypotheses=4)
    assert [o[0].target_tokens for o in ours] == [b[0] for b in beams]
    same = sum([h.target_tokens for h in o] == b for o, b in zip(ours, beams, strict=True))
    print(f"beam 4, no length penalty: {same} of {len(SOURCES)} 4-best lists identical")

    # transformers divides by length ** length_penalty, ours by ((5 + length) / 6) ** alpha
    # (GNMT): the 1-best outputs agree on most sentences, not all.
    beams = _hf_generate(hugging_face, SOURCES, num_beams=4, length_penalty=1.0)
    ours = translator.translate(SOURCES, beam_size=4, alpha=1.0)
    same = sum(o.target_tokens == b[0] for o, b in zip(ours, beams, strict=True))
    print(f"beam 4, length_penalty=1.0 vs alpha=1.0: {same} of {len(SOURCES)} identical")


@pytest.mark.slow
@pytest.mark.one_backend
def test_ctranslate2_converter_gives_our_tokens(marian_directory, hugging_face, imported, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    translator, _ = imported
    output = TransformersConverter(str(marian_directory)).convert(str(tmp_path / "ct2"))
    engine = ctranslate2.Translator(output, device="cpu")
    _, tokenizer = hugging_face
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(s)["input_ids"]) for s in SOURCES]
    ours = translator.translate(SOURCES, beam_size=1)
    # CTranslate2 forbids </s> as the first token unless min_decoding_length=0, and leaves
    # </s> out of its hypotheses.
    theirs = engine.translate_batch(
        sources, beam_size=1, max_decoding_length=48, min_decoding_length=0
    )
    same = sum(o.target_tokens[:-1] == t.hypotheses[0] for o, t in zip(ours, theirs, strict=True))
    print(f"CTranslate2's own converter, greedy: {same} of {len(SOURCES)} identical")
    assert same == len(SOURCES)


@pytest.mark.slow
@pytest.mark.one_backend
def test_imported_preset_translates_and_exports(imported, tmp_path):
    from keras_transformer import cli
    from keras_transformer.engines import CTranslate2Translator
    from keras_transformer.export import export_ctranslate2
    from keras_transformer.translator import Translator

    translator, preset = imported
    loaded = Translator.from_preset(preset)
    expected = translator.translate(SOURCES[:6], beam_size=4, num_hypotheses=2)
    again = loaded.translate(SOURCES[:6], beam_size=4, num_hypotheses=2)
    assert [[h.tokens for h in o] for o in again] == [[h.tokens for h in o] for o in expected]
    assert loaded.preprocessor.encode_source(["el perro"])[0].to_list()[0][-1] == 3  # </s>

    ct2 = export_ctranslate2(translator, tmp_path / "ct2", beam_size=1)
    engine = CTranslate2Translator(ct2)
    assert engine(SOURCES[:6]) == translator(SOURCES[:6], beam_size=1)
    assert cli.main(["translate", "--model", str(preset), "--beam-size", "1", *SOURCES[:2]]) == 0


def _copy(directory, tmp_path):
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(directory, target)
    return target


def _set_config(**changes):
    """A change of a directory: `changes` written into its config.json."""

    def apply(directory):
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps(dict(config, **changes)))

    return apply


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: (d / "source.spm").unlink(), "lacks source.spm"),
        (lambda d: (d / "model.safetensors").unlink(), "lacks model.safetensors"),
        (lambda d: (d / "vocab.json").write_text("[1, 2]"), "vocab.json must hold a JSON object"),
        (lambda d: (d / "config.json").write_text("{"), "config.json is not valid JSON"),
        (
            lambda d: (d / "config.json").write_text(
                (d / "config.json").read_text().replace('"swish"', '"tanh"')
            ),
            "activation_function='tanh'",
        ),
        (
            lambda d: (d / "config.json").write_text(
                (d / "config.json").read_text().replace('"d_model": 16', '"d_model": 32')
            ),
            "has shape",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(b"junk"),
            "model.safetensors cannot be read",
        ),
        (lambda d: (d / "target.spm").write_bytes(b"junk"), "SentencePiece"),
        # Issue 39: these were tracebacks (TypeError), or a preset that could not load.
        (_set_config(max_position_embeddings="abc"), "max_position_embeddings='abc'"),
        (_set_config(dropout=[0.1]), r"dropout=\[0.1\] .expected a number in \[0, 1"),
        (_set_config(num_beams=[4]), r"config.json's num_beams must be a positive int.*\[4\]"),
        (_set_config(num_beams=10**9), "config.json's num_beams=1000000000 is too large"),
    ],
)
def test_hostile_directories_get_one_clear_error(marian_directory, tmp_path, change, message):
    directory = _copy(marian_directory, tmp_path)
    change(directory)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        import_marian(directory)


@pytest.mark.one_backend
def test_import_command(marian_directory, tmp_path, capsys):
    from keras_transformer import cli

    output = tmp_path / "preset"
    assert cli.main(["import", "--from", "marian", str(marian_directory), str(output)]) == 0
    assert (output / "config.json").is_file()
    assert cli.main(["import", "--from", "marian", str(marian_directory), str(output)]) == 2
    # Issue 39: each side names its own spelling (it said "pass overwrite=True (--overwrite)").
    error = capsys.readouterr().err
    assert f"OUT exists; pass --overwrite to replace it. Received: OUT {str(output)!r}" in error
    with pytest.raises(ValueError, match="`output` exists; pass `overwrite=True` to") as caught:
        import_marian(marian_directory, output)
    assert "--overwrite" not in str(caught.value)
    assert (
        cli.main(["import", "--from", "marian", str(tmp_path / "none"), str(tmp_path / "x")]) == 2
    )
    broken = _copy(marian_directory, tmp_path)
    _set_config(dropout=[0.1])(broken)
    capsys.readouterr()
    assert cli.main(["import", "--from", "marian", str(broken), str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "config.json" in error[0] and "dropout=[0.1]" in error[0], error


@pytest.mark.slow
@pytest.mark.one_backend
def test_export_back_to_transformers(imported, tmp_path, capsys):
    from keras_transformer import cli

    translator, preset = imported
    output = tmp_path / "marian"
    assert cli.main(["export", str(preset), str(output), "--format", "marian"]) == 0
    # Issue 39: `max_length: 512` made transformers warn on `generate(max_new_tokens=N)`.
    logged = _TransformersLogs()
    with logged, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        model = transformers.MarianMTModel.from_pretrained(output).eval()
        tokenizer = transformers.MarianTokenizer.from_pretrained(output)
        exported = _hf_generate((model, tokenizer), SOURCES, num_beams=1)
        with torch.no_grad():  # No length given: the model's own limit, not 20 tokens.
            unbounded = model.generate(**tokenizer(SOURCES[:2], return_tensors="pt", padding=True))
    messages = logged.messages + [str(warning.message) for warning in warned]
    assert not [message for message in messages if "length" in message], messages
    assert unbounded.shape[1] < 48
    ours = translator.translate(SOURCES, beam_size=1)
    assert [o.target_tokens for o in ours] == [e[0] for e in exported]
    assert cli.main(["export", str(preset), str(output), "--format", "marian"]) == 2
    assert "OUTPUT exists; pass --overwrite to replace it" in capsys.readouterr().err
    # ... and back again: the same weights.
    again = import_marian(output)
    for first, second in zip(translator.model.weights, again.model.weights, strict=True):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(first), keras.ops.convert_to_numpy(second)
        )


class _TransformersLogs(logging.Handler):
    """Collects what transformers logs (its logger does not propagate to the root)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("transformers").addHandler(self)
        return self

    def __exit__(self, *exc_info):
        logging.getLogger("transformers").removeHandler(self)


@pytest.mark.one_backend
def test_export_refuses_what_marian_cannot_express(tmp_path):
    from keras_transformer import Transformer
    from keras_transformer.export.marian import export_marian
    from keras_transformer.text import train_tokenizer
    from keras_transformer.translator import Translator

    tokenizer = train_tokenizer(SENTENCES, vocabulary_size=64)
    model = Transformer(
        tokenizer.vocabulary_size(),
        num_layers=1,
        d_model=16,
        num_heads=2,
        ff_dim=32,
        norm_first=True,
    )
    message = "norm_first=True .*source_start_token=True .*not a SentencePieceTokenizer"
    with pytest.raises(ValueError, match=message):
        export_marian(Translator(model, tokenizer), tmp_path / "marian")
    assert not (tmp_path / "marian").exists()


# === Marian NMT .npz checkpoints ===
# The fixture's model written as Marian's C++ writes an OPUS-MT release (our own inverse of
# transformers' convert_marian_to_pytorch.py naming): `Wemb` without the `<pad>` row, matrices
# `(in, out)`, biases and LayerNorm parameters `(1, width)`, the settings as YAML bytes.
MARIAN_LAYER = {
    "self_attn": "self",
    "encoder_attn": "context",
    "q_proj": "q",
    "k_proj": "k",
    "v_proj": "v",
    "out_proj": "o",
}
MODEL_YML = {
    "type": "transformer",
    "dim-emb": 16,
    "enc-depth": 1,
    "dec-depth": 2,
    "transformer-heads": 2,
    "transformer-dim-ffn": 32,
    "transformer-ffn-depth": 2,
    "transformer-ffn-activation": "swish",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-no-projection": False,
    "transformer-tied-layers": [],
    "transformer-guided-alignment-layer": "last",
    "transformer-dropout": 0.1,
    "tied-embeddings-all": True,
}


def _marian_name(name):
    """`model.encoder.layers.0.self_attn.q_proj.weight` -> `encoder_l1_self_Wq`."""
    stack, _, index, *rest = name.removeprefix("model.").split(".")
    prefix = f"{stack}_l{int(index) + 1}_"
    kind = "W" if rest[-1] == "weight" else "b"
    if rest[0] in ("fc1", "fc2"):
        return f"{prefix}ffn_{kind}{rest[0][-1]}"
    if rest[0] == "final_layer_norm":
        return f"{prefix}ffn_ffn_ln_{'scale' if kind == 'W' else 'bias'}"
    if rest[0].endswith("_layer_norm"):
        part = MARIAN_LAYER[rest[0].removesuffix("_layer_norm")]
        return f"{prefix}{part}_Wo_ln_{'scale' if kind == 'W' else 'bias'}"
    return f"{prefix}{MARIAN_LAYER[rest[0]]}_{kind}{MARIAN_LAYER[rest[1]]}"


def write_npz_directory(hf_directory, directory, model_yml=MODEL_YML, arrays=None):
    """An unzipped OPUS-MT release of the Hugging Face fixture's model."""
    import shutil

    import yaml
    from safetensors.numpy import load_file

    tensors = load_file(hf_directory / "model.safetensors")
    vocabulary = json.loads((hf_directory / "vocab.json").read_text(encoding="utf-8"))
    size = len(vocabulary) - 1  # without <pad>, the last id
    assert vocabulary["<pad>"] == size
    npz = {
        "Wemb": tensors["model.shared.weight"][:size],
        "decoder_ff_logit_out_b": tensors["final_logits_bias"][:, :size],
    }
    for name, value in tensors.items():
        if ".layers." in name:
            npz[_marian_name(name)] = value.T if value.ndim == 2 else value[None]
    config = dict(model_yml, **{"dim-vocabs": [size, size]})
    text = yaml.safe_dump(config, sort_keys=False).encode() + b"\0"
    npz["special:model.yml"] = np.frombuffer(text, dtype="int8")
    npz.update(arrays or {})
    directory.mkdir()
    name = "opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz"
    np.savez(directory / name, **{k: v for k, v in npz.items() if v is not None})
    pieces = {piece: index for piece, index in vocabulary.items() if index < size}
    (directory / "opus.spm32k-spm32k.vocab.yml").write_text(
        yaml.safe_dump(pieces, allow_unicode=True, sort_keys=False), encoding="utf-8"
    )
    for side in ("source", "target"):
        shutil.copy(hf_directory / f"{side}.spm", directory / f"{side}.spm")
    (directory / "decoder.yml").write_text(
        f"models:\n  - {name}\nvocabs:\n  - opus.spm32k-spm32k.vocab.yml\n"
        "  - opus.spm32k-spm32k.vocab.yml\nbeam-size: 4\nnormalize: 1\nrelative-paths: true\n",
        encoding="utf-8",
    )
    return directory


@pytest.fixture(scope="session")
def npz_directory(marian_directory, tmp_path_factory):
    return write_npz_directory(marian_directory, tmp_path_factory.mktemp("npz") / "opus")


def _marian_cpp_positions(length, d_model):
    """A transcription of Marian's `SinusoidalPositionEmbeddings` (C++ float arithmetic)."""
    timescales = np.float32(d_model / 2)
    increment = np.float32(np.log(np.float32(10000)) / (timescales - np.float32(1)))
    table = np.zeros((length, d_model), "float32")
    for j in range(length):
        for i in range(d_model):
            v = np.float32(j) * np.exp(np.float32(i % int(timescales)) * -increment)
            table[j, i] = np.sin(v) if i < int(timescales) else np.cos(v)
    return table


@pytest.mark.parametrize("d_model", [16, 512])
def test_marian_frequencies_are_marian_cpp(d_model):
    from keras_transformer.layers import sinusoidal_encoding

    ours = keras.ops.convert_to_numpy(
        sinusoidal_encoding(64, d_model, layout="halves", frequencies="marian")
    )
    np.testing.assert_allclose(ours, _marian_cpp_positions(64, d_model), atol=2e-5)
    paper = keras.ops.convert_to_numpy(sinusoidal_encoding(64, d_model, layout="halves"))
    print(f"{BACKEND}: d_model {d_model}, max |Marian - paper| = {np.abs(ours - paper).max():.3g}")
    assert np.abs(ours - paper).max() > 0.05  # measured: 1.97 (d_model 16), 0.089 (512)


@pytest.fixture(scope="session")
def ctranslate2_npz(npz_directory, tmp_path_factory):
    """CTranslate2's own MarianConverter on the .npz: `{"paper": its output, "marian": the
    same with Marian C++'s position table swapped in}` (ctranslate2.Translator each)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import MarianConverter

    class MarianPositions(MarianConverter):
        def _load(self):
            spec = super()._load()
            for stack in (spec.encoder, spec.decoder):
                length, d_model = stack.position_encodings.encodings.shape
                stack.position_encodings.encodings = _marian_cpp_positions(length, d_model)
            return spec

    npz = str(next(npz_directory.glob("*.npz")))
    vocabularies = [str(npz_directory / "opus.spm32k-spm32k.vocab.yml")] * 2
    root = tmp_path_factory.mktemp("ct2npz")
    engines = {}
    for frequencies, converter in (("paper", MarianConverter), ("marian", MarianPositions)):
        converter = converter(npz, vocabularies)
        output = converter.convert(str(root / frequencies))
        engines[frequencies] = ctranslate2.Translator(output, device="cpu")
    return engines


@pytest.fixture(scope="session")
def imported_npz(npz_directory):
    """Our import of the .npz: `{"marian": default, "paper": sinusoid_frequencies="paper"}`."""
    translators = {
        "marian": import_marian(npz_directory),
        "paper": import_marian(npz_directory, sinusoid_frequencies="paper"),
    }
    for translator in translators.values():
        translator.extra_length = 40
    return translators


def _pieces(npz_directory, sentences):
    processor = spm.SentencePieceProcessor(model_file=str(npz_directory / "source.spm"))
    return [processor.encode(sentence, out_type=str) for sentence in sentences]


def test_npz_import_equals_the_directory_import_but_positions_and_epsilon(
    npz_directory, imported_npz, imported
):
    hf_translator, _ = imported
    assert hf_translator.model.sinusoid_frequencies == "paper"
    assert (
        hf_translator.tokenizer.get_vocabulary()
        == imported_npz["marian"].tokenizer.get_vocabulary()
    )
    for translator in imported_npz.values():  # the same weights, in the same order
        assert translator.model.layer_norm_epsilon == 1e-6
        for ours, theirs in zip(translator.model.weights, hf_translator.model.weights, strict=True):
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs)
            )
    inputs = {
        "encoder_inputs": np.array([[5, 9, 12, 3], [7, 8, 3, 0]], "int32"),
        "decoder_inputs": np.array([[2, 14, 6, 20], [2, 30, 9, 0]], "int32"),
    }
    keep = inputs["decoder_inputs"] != 0

    def logits(translator):
        return keras.ops.convert_to_numpy(translator.model(inputs))[keep][:, 4:]

    reference = logits(hf_translator)
    paper = np.abs(logits(imported_npz["paper"]) - reference).max()
    marian = np.abs(logits(imported_npz["marian"]) - reference).max()
    print(
        f"{BACKEND}: max |logit difference| to the directory import: paper frequencies "
        f"{paper:.3g} (epsilon 1e-6 vs 1e-5), Marian's {marian:.3g}"
    )
    assert paper < 1e-3 and marian > 1e-2


@pytest.mark.parametrize("frequencies", ["paper", "marian"])
def test_npz_scores_equal_ctranslate2(npz_directory, imported_npz, ctranslate2_npz, frequencies):
    translator, engine = imported_npz[frequencies], ctranslate2_npz[frequencies]
    targets = [" ".join(TARGET_WORDS[i % 31] for i in range(n, n + 4)) for n in range(8)]
    ours = translator.score(SOURCES[:8], targets)
    theirs = engine.score_batch(
        _pieces(npz_directory, SOURCES[:8]), [o.target_tokens[:-1] for o in ours]
    )
    tokens = max(
        np.abs(np.array(o.token_scores) - np.array(t.log_probs)).max()
        for o, t in zip(ours, theirs, strict=True)
    )
    print(
        f"{BACKEND}, {frequencies} frequencies: max |token log-probability difference| "
        f"to CTranslate2's score_batch = {tokens:.3g}"
    )
    assert tokens < 1e-3


@pytest.mark.one_backend
@pytest.mark.parametrize("frequencies", ["paper", "marian"])
def test_npz_outputs_equal_ctranslate2(npz_directory, imported_npz, ctranslate2_npz, frequencies):
    translator, engine = imported_npz[frequencies], ctranslate2_npz[frequencies]
    pieces = _pieces(npz_directory, SOURCES)
    # Beam search once, on the default import (measured: 16 of 16 with either table).
    for beam_size in (1, 4) if frequencies == "marian" else (1,):
        ours = translator.translate(SOURCES, beam_size=beam_size, alpha=0.0)
        theirs = engine.translate_batch(
            pieces,
            beam_size=beam_size,
            length_penalty=0.0,  # CTranslate2's default, 1, divides by the length
            max_decoding_length=48,
            min_decoding_length=0,
        )
        same = sum(
            o.target_tokens[:-1] == t.hypotheses[0] for o, t in zip(ours, theirs, strict=True)
        )
        print(f"{frequencies} frequencies, beam {beam_size}: {same} of {len(SOURCES)} identical")
        assert same == len(SOURCES)


def _npz_variant(marian_directory, tmp_path, model_yml=None, arrays=None):
    return write_npz_directory(
        marian_directory, tmp_path / "opus", dict(MODEL_YML, **(model_yml or {})), arrays
    )


def _with_decoder_yml(change):
    def apply(directory):
        path = directory / "decoder.yml"
        path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")

    return apply


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "model_yml, arrays, change, message",
    [
        (None, {"decoder_l2_context_Wk": None}, None, "missing: decoder_l2_context_Wk"),
        (
            None,
            {"encoder_l1_ffn_W1": np.zeros((16, 33), "float32")},
            None,
            r"wrong shape: encoder_l1_ffn_W1 \(16, 33\) \(expected \(16, 32\)\)",
        ),
        (None, {"Wpos": np.zeros((64, 16), "float32")}, None, "no place in the model: .Wpos."),
        (
            {"transformer-postprocess": "da", "transformer-ffn-activation": "gelu"},
            None,
            None,
            "transformer-postprocess='da' .*transformer-ffn-activation='gelu'",
        ),
        ({"tied-embeddings-all": False}, None, None, "tied-embeddings-all=false"),
        ({"transformer-tied-layers": [1, 1]}, None, None, r"transformer-tied-layers=\[1, 1\]"),
        (None, {"special:model.yml": np.frombuffer(b"type: [\0", "int8")}, None, "not valid YAML"),
        (None, {"special:model.yml": None}, None, "holds no 'special:model.yml'"),
        ({"transformer-dropout": "abc"}, None, None, "transformer-dropout='abc'"),
        (
            None,
            None,
            _with_decoder_yml(lambda text: text.replace("beam-size: 4", "beam-size: 1000000000")),
            "decoder.yml's beam-size=1000000000 is too large: Decoding a batch",
        ),
        (
            None,
            None,
            lambda d: (d / "opus.spm32k-spm32k.vocab.yml").write_text("a: 0\nb: 0\n"),
            "distinct pieces",
        ),
        (None, None, lambda d: (d / "source.spm").unlink(), "lacks source.spm"),
        (
            None,
            None,
            lambda d: [(d / "decoder.yml").unlink(), (d / "second.npz").write_bytes(b"")],
            "holds 2 Marian checkpoints",
        ),
        (
            None,
            None,
            lambda d: next(d.glob("*.best-perplexity.npz")).write_bytes(b"junk"),
            "cannot be read as a NumPy .npz",
        ),
    ],
)
def test_hostile_npz_gets_one_clear_error(
    marian_directory, tmp_path, model_yml, arrays, change, message
):
    directory = _npz_variant(marian_directory, tmp_path, model_yml, arrays)
    if change is not None:
        change(directory)
    with pytest.raises(ValueError, match=message):
        import_marian(directory)


@pytest.mark.one_backend
def test_npz_import_command(npz_directory, marian_directory, tmp_path, capsys):
    from keras_transformer import cli

    # The .npz file as SRC, with its directory's vocabulary and SentencePiece models.
    npz = next(npz_directory.glob("*.npz"))
    output = tmp_path / "preset"
    arguments = ["import", "--from", "marian", str(npz), str(output)]
    assert cli.main([*arguments, "--sinusoid-frequencies", "paper"]) == 0
    config = json.loads((output / "config.json").read_text())["config"]
    assert (config["sinusoid_frequencies"], config["layer_norm_epsilon"]) == ("paper", 1e-6)
    broken = _npz_variant(marian_directory, tmp_path, {"transformer-postprocess": "nda"})
    capsys.readouterr()
    assert cli.main(["import", "--from", "marian", str(broken), str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "transformer-postprocess='nda'" in error


@pytest.mark.one_backend
def test_npz_vocabulary_reads_like_ctranslate2(tmp_path):
    """YAML's look-alikes of booleans, numbers and nulls stay pieces, as CTranslate2's own
    line reader reads them."""
    import yaml

    ctranslate2 = pytest.importorskip("ctranslate2.converters.marian")
    from keras_transformer.export import marian_npz

    pieces = ["</s>", "<unk>", "yes", "no", "~", "null", "1", "0.5", "'", '"', ": a", "- b", "#"]
    pieces += ["▁a", "[", "{", "&x", "*y", "?", "!tag", "%", "@", "`", "✓", "on", "True"]
    path = tmp_path / "test.vocab.yml"
    path.write_text(
        yaml.safe_dump({p: i for i, p in enumerate(pieces)}, allow_unicode=True, sort_keys=False),
        encoding="utf-8",
    )
    read = marian_npz.read_vocabulary(str(tmp_path), ["test.vocab.yml"])
    assert sorted(read, key=read.get) == pieces == ctranslate2.load_vocab(str(path))


# === An imported model's life: serve it, evaluate it, fine-tune it ===


def _lexicon_pairs(count, seed):
    """Word-by-word pairs of the fixture's two languages (what it was trained on)."""
    lexicon = dict(zip(WORDS, TARGET_WORDS, strict=True))
    sources = _sentences(WORDS, count, seed)
    return [(s, " ".join(lexicon[word] for word in s.split())) for s in sources]


@pytest.mark.slow
@pytest.mark.one_backend
def test_an_imported_model_serves_evaluates_and_fine_tunes(imported, tmp_path, capsys):
    from keras_transformer import cli
    from keras_transformer.engines import SavedModelTranslator
    from keras_transformer.export import export_saved_model
    from keras_transformer.training import train
    from keras_transformer.translator import Translator

    translator, preset = imported
    # A SavedModel: strings in, strings out, both SentencePiece models inside.
    # (One bucket: each bucket is traced apart, the preset's 64 positions make 4 of them.)
    one_bucket = Translator(
        translator.model,
        translator.tokenizer,
        target_tokenizer=translator.target_tokenizer,
        source_start_token=False,
        max_source_length=32,
        bucket_boundaries=(32,),
        extra_length=16,
        beam_size=4,
    )
    exported = export_saved_model(one_bucket, tmp_path / "served", jit_compile=False)
    served = SavedModelTranslator(exported)
    sentences = [s for s, _ in _lexicon_pairs(12, 7)]
    assert served(sentences) == one_bucket(sentences)
    assert served(sentences[:6]) == translator(sentences[:6], beam_size=4)

    # `evaluate` on the imported preset: the figures of its own hypotheses.
    pairs = _lexicon_pairs(60, 8)
    (tmp_path / "src.txt").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    hypotheses = translator([s for s, _ in pairs])
    (tmp_path / "hyp.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    capsys.readouterr()
    common = ["--references", str(tmp_path / "ref.txt"), "--json"]
    assert cli.main(["evaluate", "--model", str(preset), "--sources", str(tmp_path / "src.txt"), *common]) == 0  # fmt: skip
    by_model = json.loads(capsys.readouterr().out)
    assert cli.main(["evaluate", "--hypotheses", str(tmp_path / "hyp.txt"), *common]) == 0
    given = json.loads(capsys.readouterr().out)
    assert by_model["sentences"] == 60 and by_model["scores"] == given["scores"]

    # Fine-tuning with `init_from`: both tokenizers and the source encoding (`pieces </s>`,
    # no start token) carry over, and the model learns the new pairs.
    rows = _lexicon_pairs(400, 9)
    (tmp_path / "new.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    architecture = {
        key: value
        for key, value in translator.model.get_config().items()
        if key in ("num_layers", "num_decoder_layers", "d_model", "num_heads", "ff_dim",
                   "activation", "layer_norm_epsilon", "sinusoid_layout",
                   "sinusoid_frequencies", "output_bias", "share_embeddings", "norm_first")
    }  # fmt: skip
    config = {
        "output_dir": str(tmp_path / "run"),
        "data": {"dataset": "tsv", "path": str(tmp_path / "new.tsv"), "max_length": 32,
                 "num_validation": 20, "num_test": 40, "tokens_per_batch": 512},
        "model": {"preset": "", "dropout": 0.0, **architecture},
        "optimizer": {"learning_rate_scale": 0.5, "warmup_steps": 10},
        "training": {"init_from": str(preset), "train_steps": 30, "steps_per_epoch": 10,
                     "average_checkpoints": 1, "label_smoothing": 0.0},
        "evaluation": {"beam_size": 1, "bleu_every": -1, "extra_length": 20, "test": False},
        "export": {"saved_model": False},
    }  # fmt: skip
    result = train(config, verbose=0)
    tuned = Translator.load(tmp_path / "run" / "translator.keras")
    assert tuned.source_start_token is False
    assert tuned.target_tokenizer.get_config() == translator.target_tokenizer.get_config()
    test_sources = [s for s, _ in rows[:40]]
    encoded = tuned.preprocessor.generate_preprocess(test_sources)["encoder_inputs"]
    assert (
        encoded.to_list()
        == translator.preprocessor.generate_preprocess(test_sources)["encoder_inputs"].to_list()
    )
    losses = result.history["loss"]
    assert losses[-1] < losses[0]
    # The new pairs are likelier under the fine-tuned model (held out: the last 40 rows are
    # the run's test split only if the hash says so, so score pairs never seen: new ones).
    held_out = _lexicon_pairs(40, 10)
    sources, references = [s for s, _ in held_out], [t for _, t in held_out]
    before = sum(scoring.score for scoring in translator.score(sources, references))
    after = sum(scoring.score for scoring in tuned.score(sources, references))
    print(f"log p(references) of 40 new pairs: imported {before:.1f}, fine-tuned {after:.1f}")
    assert after > before
