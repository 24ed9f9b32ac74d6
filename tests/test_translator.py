"""Tests for `keras_transformer.Translator`, on small untrained models."""

import keras
import numpy as np
import pytest

from keras_transformer import Transformer
from keras_transformer.translation import Translation, sampling_options
from keras_transformer.translator import Translator

BACKEND = keras.backend.backend()

SENTENCES = [
    "uno",
    "dos mil trescientos",
    "¿Dónde está?",
    "cuarenta y dos",
    "mil novecientos sesenta y seis",
]
CORPUS = SENTENCES + [
    "one",
    "two thousand, three hundred",
    "Where is it?",
    "forty-two",
    "one thousand, nine hundred and sixty-six",
]


@pytest.fixture(scope="module")
def tokenizer():
    from keras_transformer.text import train_tokenizer

    return train_tokenizer(CORPUS, vocabulary_size=200)


@pytest.fixture(scope="module")
def translator(tokenizer):
    return make_translator(tokenizer, max_source_length=16)


def make_translator(tokenizer, **kwargs):
    """A small untrained Translator. Eager on TensorFlow unless `jit_compile=True` (an XLA
    compile per new shape costs more than running these few sentences eagerly); compiled on
    JAX, whose eager mode compiles every operation for every new shape."""
    keras.utils.set_random_seed(3)
    model = Transformer.from_preset(
        "tiny", vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, dropout=0.0
    )
    kwargs = {"extra_length": 6, "jit_compile": BACKEND == "jax", **kwargs}
    return Translator(model, tokenizer, **kwargs)


# --------------------------------------------------------------------------- Translator


def test_translator_returns_strings_in_input_order(translator):
    outputs = translator(SENTENCES)
    assert isinstance(outputs, list) and len(outputs) == len(SENTENCES)
    assert all(isinstance(output, str) for output in outputs)
    # Sorting, bucketing and batch padding do not change any translation.
    assert [translator(sentence) for sentence in SENTENCES] == outputs
    assert translator([]) == []
    assert translator(np.array(SENTENCES[:2])) == outputs[:2]


def test_translate_details_scores_and_attention(translator):
    translation = translator.translate("dos mil trescientos", return_attention=True)
    assert isinstance(translation, Translation)
    assert translation.source_tokens[0] == "[START]" and translation.source_tokens[-1] == "[END]"
    assert len(translation.target_tokens) == len(translation.tokens) >= 1
    assert np.isfinite(translation.score) and translation.score <= 0
    model = translator.model
    assert translation.attention.shape == (
        model.num_decoder_layers,
        model.num_heads,
        len(translation.tokens),
        len(translation.source_tokens),
    )
    np.testing.assert_allclose(translation.attention.sum(axis=-1), 1.0, atol=1e-5)
    greedy = translator.translate(["dos mil trescientos"], beam_size=1)[0]  # Greedy search.
    assert isinstance(greedy.score, float) and greedy.attention is None
    # The attention of many hypotheses is computed in padded batches: the same as one
    # teacher-forced pass per hypothesis, on sources and outputs of different lengths.
    from keras_transformer.generation import cross_attention

    sentences = ["dos", "dos mil trescientos", "", "cuarenta y dos mil uno", "tres"]
    translations = translator.translate(sentences, return_attention=True, num_hypotheses=2)
    start_id = translator.preprocessor.targets.start_id
    compared = 0
    for sentence, hypotheses in zip(sentences, translations, strict=True):
        source_ids = translator.preprocessor.generate_preprocess([sentence])["encoder_inputs"]
        for hypothesis in hypotheses:
            alone = cross_attention(model, start_id, source_ids.to_list()[0], hypothesis.tokens)
            if alone is None:
                assert hypothesis.attention is None
                continue
            np.testing.assert_allclose(hypothesis.attention, alone, atol=1e-5)
            compared += 1
    assert compared >= 7


def test_output_length_is_bounded_by_source_length_plus_extra(tokenizer):
    translator = make_translator(tokenizer, extra_length=3, bucket_boundaries=(8, 16))
    translation = translator.translate("uno")  # An untrained model rarely stops by itself.
    assert len(translation.tokens) <= 8 + 3


@pytest.mark.parametrize(
    "sentence",
    ["", "   \t ", "x" * 10_000, "palabra " * 2_000, b"\xff\xfe\xfa", "😀🎉 dos", "你好，世界"],
    ids=["empty", "whitespace", "10k-chars", "10k-words", "invalid-utf8", "emoji", "chinese"],
)
def test_bad_inputs_give_strings(translator, sentence):
    translation = translator.translate([sentence])[0]
    assert isinstance(translation.text, str)
    assert len(translation.source_tokens) <= 16
    if sentence in ("", "   \t "):
        assert translation.text == "" and translation.score == 0.0
    assert translation.truncated == (sentence == "palabra " * 2_000)


def test_truncation_keeps_the_first_pieces(tokenizer):
    translator = make_translator(tokenizer, max_source_length=6)
    ids, truncated = translator.preprocessor.encode_source(
        ["uno dos tres cuatro cinco seis", "uno"]
    )
    pieces = tokenizer.tokenize("uno dos tres cuatro cinco seis").numpy().tolist()
    assert len(pieces) > 4
    assert ids.to_list()[0] == [tokenizer.start_id, *pieces[:4], tokenizer.end_id]
    assert truncated.numpy().tolist() == [True, False]


def test_non_string_inputs_raise_value_error(translator):
    with pytest.raises(ValueError, match="sentences"):
        translator([1, 2])
    with pytest.raises(ValueError, match="sentences"):
        translator(3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beam_size": 0}, "beam_size=0"),
        ({"alpha": -1.0}, "alpha=-1.0"),
        ({"max_source_length": 2}, "max_source_length=2"),
        ({"extra_length": 0}, "extra_length=0"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"concurrent_batches": 0}, "concurrent_batches=0"),
        ({"concurrent_batches": 1.5}, "concurrent_batches=1.5"),
        ({"bucket_boundaries": [16, 8]}, r"bucket_boundaries=\[16, 8\]"),
        ({"patience": 0}, "patience=0"),
        ({"patience": "2"}, "patience='2'"),
    ],
)
def test_translator_bad_arguments_are_named(tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_translator(tokenizer, **kwargs)


def test_translator_needs_a_model_and_a_tokenizer(tokenizer):
    with pytest.raises(ValueError, match="model="):
        Translator(object(), tokenizer)
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size())
    with pytest.raises(ValueError, match="tokenizer="):
        Translator(model, "not a tokenizer")


def test_save_and_load_round_trip(tokenizer, tmp_path):
    translator = make_translator(tokenizer, beam_size=3, alpha=0.5, max_source_length=24)
    expected = translator(SENTENCES)
    path = tmp_path / "translator.keras"
    translator.save(path)
    loaded = Translator.load(path)
    assert isinstance(loaded, Translator)
    assert loaded(SENTENCES) == expected
    config = loaded.get_config()
    assert config["beam_size"] == 3 and config["alpha"] == 0.5
    assert config["max_source_length"] == 24 and config["bucket_boundaries"][-1] == 24
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    # Also through keras.saving.load_model, the generic loader.
    assert isinstance(keras.saving.load_model(path), Translator)


def test_load_rejects_a_file_without_a_translator(tmp_path):
    path = tmp_path / "model.keras"
    Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1).save(path)
    with pytest.raises(ValueError, match="Transformer"):
        Translator.load(path)


def test_config_round_trip(tokenizer):
    translator = make_translator(tokenizer, beam_size=2, batch_size=8)
    config = translator.get_config()
    clone = Translator.from_config(config)
    assert clone.get_config() == config
    assert config["patience"] == 2  # CTranslate2's stop, the CTranslate2 engine's setting
    exact = Translator.from_config({**config, "patience": None})
    assert exact.patience is None and exact.get_config()["patience"] is None
    # A configuration written before `patience` existed loads with the default.
    assert (
        Translator.from_config({k: v for k, v in config.items() if k != "patience"}).patience == 2
    )


def test_patience_reaches_the_search(tokenizer, monkeypatch):
    # The translator's patience is the search's, n-best lists included (they read the same
    # compiled searches); the exact stop (`None`) stays exact.
    from keras_transformer.generation import Generator

    seen = []
    search = Generator.__call__

    def recording(self, *args, **kwargs):
        seen.append(kwargs["patience"])
        return search(self, *args, **kwargs)

    monkeypatch.setattr(Generator, "__call__", recording)
    for patience, num_hypotheses in ((2, None), (2, 3), (None, 3), (6, None)):
        translator = make_translator(tokenizer, patience=patience)
        translator.translate(SENTENCES[:1], num_hypotheses=num_hypotheses)
        assert seen[-1] == patience


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_an_n_best_list_compiles_no_search_of_its_own(tokenizer):
    translator = make_translator(tokenizer, jit_compile=True)
    translator(SENTENCES[:2])
    traces = translator.generator.trace_count
    translator.translate(SENTENCES[:2], num_hypotheses=3)
    assert translator.generator.trace_count == traces


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_translator_second_call_does_not_retrace(tokenizer):
    translator = make_translator(tokenizer, jit_compile=True, beam_size=1)
    translator(SENTENCES)
    traces = translator.generator.trace_count
    assert traces >= 1
    translator(SENTENCES)
    translator(list(reversed(SENTENCES)))  # Same buckets and batch sizes.
    assert translator.generator.trace_count == traces


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_a_compiled_translator_searches_short_buckets_at_a_longer_shape_with_the_same_output(
    tokenizer, monkeypatch
):
    import keras_transformer.translator as translator_module
    from keras_transformer.buckets import bucket_length

    sentences = ["uno", "mil novecientos sesenta y seis " * 2, "cuarenta y dos"]
    options = {
        "jit_compile": True,
        "beam_size": 2,
        "batch_size": 1,  # a batch, and a bucket, per sentence
        "bucket_boundaries": (4, 8, 16, 32),
    }
    merged = make_translator(tokenizer, max_source_length=32, **options)
    features = merged.preprocessor.generate_preprocess(sentences)
    lengths = [len(ids) for ids in features["encoder_inputs"].to_list()]
    expected_buckets = {8, 16, 32}  # 3 shapes, bucket by bucket
    assert {bucket_length(n, merged.bucket_boundaries) for n in lengths} == expected_buckets
    outputs = merged.translate(sentences, num_hypotheses=2)
    # Two lengths are needed within 2x; the 8-bucket's sentence is searched at 16 (fewer
    # padded positions than the 16-bucket's at 32).
    assert merged._search_lengths == (16, 32)
    assert merged.generator.trace_count == 2
    monkeypatch.setattr(translator_module, "SHAPE_MERGE_RATIO", 1.0)
    separate = Translator(merged.model, tokenizer, max_source_length=32, extra_length=6, **options)
    expected = separate.translate(sentences, num_hypotheses=2)
    # The same hypotheses; the scores sum more (masked) padding: equal to float rounding.
    assert [[h.tokens for h in n_best] for n_best in outputs] == [
        [h.tokens for h in n_best] for n_best in expected
    ]
    np.testing.assert_allclose(
        [[h.score for h in n_best] for n_best in outputs],
        [[h.score for h in n_best] for n_best in expected],
        rtol=1e-5,
    )
    assert set(separate._search_lengths) == expected_buckets
    assert separate.generator.trace_count == 3
    # A later call reuses a compiled length: the 8-bucket's sentence alone runs at 16.
    monkeypatch.setattr(translator_module, "SHAPE_MERGE_RATIO", 2.0)
    assert merged.translate(sentences[0], num_hypotheses=2) == outputs[0]
    assert merged.generator.trace_count == 2


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_a_compiled_translator_scores_short_pairs_at_a_longer_shape_with_the_same_scores(
    tokenizer, monkeypatch
):
    import keras_transformer.translator as translator_module

    sources = ["uno", "mil novecientos sesenta y seis " * 2, "cuarenta y dos", "dos"]
    targets = ["one", "one thousand nine hundred and sixty-six", "forty-two", "two " * 6]
    options = {"jit_compile": True, "batch_size": 1, "bucket_boundaries": (4, 8, 16, 32)}
    merged = make_translator(tokenizer, max_source_length=32, **options)
    scores = merged.score(sources, targets)
    monkeypatch.setattr(translator_module, "SHAPE_MERGE_RATIO", 1.0)
    separate = Translator(merged.model, tokenizer, max_source_length=32, extra_length=6, **options)
    expected = separate.score(sources, targets)
    for one, other in zip(scores, expected, strict=True):
        np.testing.assert_allclose(one.token_scores, other.token_scores, rtol=1e-5, atol=1e-6)
    # Longest first, each shape reused within 2x on both sides: fewer shapes compiled.
    assert len(merged._score_shapes) < len(separate._score_shapes) == len(sources)
    functions = [key for key in merged.generator._functions if key[0] == "score"]
    assert len(functions) == len(merged._score_shapes)


def test_concurrent_batches_change_nothing_but_the_threads(tokenizer):
    translator = make_translator(tokenizer, batch_size=2, max_source_length=16)
    one_at_a_time = translator.translate(SENTENCES * 2, beam_size=2, num_hypotheses=2)
    translator.concurrent_batches = 3  # 5 batches of at most 2 sentences, 3 at once
    concurrent = translator.translate(SENTENCES * 2, beam_size=2, num_hypotheses=2)
    assert concurrent == one_at_a_time
    assert Translator.from_config(translator.get_config()).concurrent_batches == 3


def test_run_translation_searches_batches_in_threads_and_keeps_the_order(translator):
    import threading

    from keras_transformer.buckets import bucket_length
    from keras_transformer.translation import run_translation

    boundaries = translator.preprocessor.bucket_boundaries
    threads, calls, lock = set(), [], threading.Lock()
    started = threading.Barrier(2, timeout=30)
    targets = translator.preprocessor.targets

    def search(source_ids, bucket, max_lengths, prefixes, batch_number):
        assert max_lengths == [bucket_length(len(ids), boundaries) + 7 for ids in source_ids]
        assert prefixes is None and batch_number in range(len(sentences))
        with lock:
            threads.add(threading.get_ident())
            calls.append(bucket)
            first_two = len(calls) <= 2
        if first_two:
            started.wait()  # The first two batches must be searched at the same time.
        # "Translate" each source to its own first piece, then the end token.
        return [[([ids[1], targets.end_id], -float(len(ids)))] for ids in source_ids]

    sentences = SENTENCES * 2
    results = run_translation(translator.preprocessor, sentences, search, 1, 7, None, workers=2)
    assert len(threads) == 2 and len(calls) == len(sentences)
    # Each result holds its own source's search result.
    assert all(r.target_tokens == [r.source_tokens[1], "[END]"] for r in results)
    assert [r.score for r in results] == [-float(len(r.source_tokens)) for r in results]
    assert [r.source_tokens for r in results[:5]] == [r.source_tokens for r in results[5:]]


def test_n_best_lists_are_sorted_and_start_with_the_best(translator):
    best = translator.translate(SENTENCES, beam_size=3)
    n_best = translator.translate(SENTENCES, beam_size=3, num_hypotheses=3)
    assert len(n_best) == len(SENTENCES)
    for one, hypotheses in zip(best, n_best, strict=True):
        assert len(hypotheses) == 3 and all(isinstance(h, Translation) for h in hypotheses)
        assert hypotheses[0] == one
        scores = [hypothesis.score for hypothesis in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert all(h.source_tokens == one.source_tokens for h in hypotheses)
    single = translator.translate("uno", beam_size=3, num_hypotheses=2)
    assert [h.tokens for h in single] == [h.tokens for h in n_best[0][:2]]
    assert translator.translate([""], num_hypotheses=2)[0] == [
        Translation("", 0.0, [], False, ["[START]", "[END]"], [])
    ]


@pytest.mark.parametrize("beam_size, num_hypotheses", [(4, 5), (1, 2), (4, 0), (4, 1.0), (4, True)])
def test_num_hypotheses_outside_one_to_beam_size_is_an_error(translator, beam_size, num_hypotheses):
    with pytest.raises(ValueError, match=f"num_hypotheses={num_hypotheses!r}"):
        translator.translate("uno", beam_size=beam_size, num_hypotheses=num_hypotheses)


def test_a_sampling_option_alone_samples_with_beam_size_one(translator):
    # Before: "needs beam_size=1" (the translator's beam size is 4), while the command line
    # switched to beam size 1 by itself.
    sentences = ["dos mil trescientos"]  # the shape test_translate_details_... compiled
    sampled = translator.translate(sentences, sampling_topk=1, seed=1)  # top-k 1: greedy
    greedy = translator.translate(sentences, beam_size=1)
    assert [t.tokens for t in sampled] == [t.tokens for t in greedy]
    translator.check_search_options(sampling=sampling_options(sampling_topk=5))
    with pytest.raises(ValueError, match=r"beam_size=1 \(the default when sampling\)"):
        translator.translate("uno", beam_size=4, sampling_topk=5)
