"""LoRA on the Transformer (`keras_transformer.models.lora`), on every backend: what trains, what
stays frozen, what is saved, and the merged plain model."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.models import lora
from tests.test_case import to_numpy

RNG = np.random.default_rng(0)
SOURCE = RNG.integers(3, 30, size=(8, 6)).astype("int32")
BATCH = {"encoder_inputs": SOURCE, "decoder_inputs": np.pad(SOURCE, ((0, 0), (1, 0)))[:, :-1]}
BATCH["decoder_inputs"][:, 0] = 1


def make_model():
    return kt.Transformer.from_preset("tiny", vocabulary_size=30, dropout=0.0, seed=1)


@pytest.fixture(scope="module")
def trained():
    """A LoRA model on every projection after 3 steps: `(model, outputs before, base weights
    before)`. Trained once for the module (compiling `fit` dominates these tests' time)."""
    model = make_model()
    before = to_numpy(model(BATCH))
    base = [to_numpy(variable) for variable in model.weights]
    lora.enable_lora(model, rank=4, targets=lora.ALL_TARGETS)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=kt.LabelSmoothedCrossentropy(),
        run_eagerly=keras.backend.backend() == "tensorflow",  # 3 steps: tracing costs more
    )
    model.fit(BATCH, SOURCE, batch_size=8, epochs=3, verbose=0)
    return model, before, base


def test_only_lora_weights_train_and_outputs_start_unchanged():
    model = make_model()
    before = to_numpy(model(BATCH))
    paths = lora.enable_lora(model, rank=4)
    # tiny: 2 encoder blocks (1 attention each), 2 decoder blocks (2 each): 6 attention layers.
    assert len(paths) == 12 and all(path.rsplit("/", 1)[1] in ("query", "value") for path in paths)
    assert {id(v) for v in model.trainable_weights} == {id(v) for v in lora.lora_weights(model)}
    d_model = model.d_model
    assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == 12 * 2 * d_model * 4
    np.testing.assert_array_equal(to_numpy(model(BATCH)), before)  # B starts at zero


def test_targets_cover_every_projection_and_are_checked():
    model = make_model()
    assert len(lora.enable_lora(model, rank=2, targets=lora.ALL_TARGETS)) == 6 * 4 + 4 * 2
    with pytest.raises(ValueError, match="already enabled"):
        lora.enable_lora(model, rank=2)
    with pytest.raises(ValueError, match=r"Received: targets=\['embedding'\]"):
        lora.enable_lora(make_model(), rank=2, targets=("embedding",))
    # The named sets: "all" is ALL_TARGETS, "qv" the default.
    assert len(lora.enable_lora(make_model(), rank=2, targets="all")) == 6 * 4 + 4 * 2
    assert lora.enable_lora(make_model(), rank=2, targets="qv") == lora.enable_lora(
        make_model(), rank=2
    )
    with pytest.raises(ValueError, match="rank"):
        lora.enable_lora(make_model(), rank=0)


def test_fit_changes_outputs_and_leaves_base_weights_bit_identical(trained):
    model, before, base = trained
    assert np.abs(to_numpy(model(BATCH)) - before).max() > 1e-3
    for variable, initial in zip(lora.base_weights(model), base, strict=True):
        np.testing.assert_array_equal(to_numpy(variable), initial, err_msg=variable.path)


def test_lora_weights_alone_save_and_load(trained, tmp_path):
    model, _, base = trained
    expected = to_numpy(model(BATCH))
    path = lora.save_lora_weights(model, tmp_path / "adapter.lora.h5")
    fresh = make_model()
    fresh.set_weights(base)  # the base weights; the LoRA ones (and the targets) from the file
    lora.load_lora_weights(fresh, path)
    np.testing.assert_array_equal(to_numpy(fresh(BATCH)), expected)
    other = make_model()
    lora.enable_lora(other, rank=2)
    with pytest.raises(ValueError, match="LoRA"):
        lora.load_lora_weights(other, path)


# The reloaded plain model's optimizer is built for all its weights, not the LoRA ones.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_merge_gives_a_plain_model_with_the_same_outputs(trained, tmp_path):
    model, _, _ = trained
    expected = to_numpy(model(BATCH))
    merged = lora.merge_lora(model)
    assert type(merged) is kt.Transformer and lora.lora_layers(merged) == {}
    assert len(merged.weights) == len(make_model().weights)
    assert len(merged.trainable_weights) == len(merged.weights)
    np.testing.assert_allclose(to_numpy(merged(BATCH)), expected, atol=1e-5)
    assert lora.lora_layers(model)  # the LoRA model is left as it was
    merged.save(tmp_path / "merged.keras")
    reloaded = keras.saving.load_model(tmp_path / "merged.keras")
    np.testing.assert_array_equal(to_numpy(reloaded(BATCH)), to_numpy(merged(BATCH)))
    # Keras' own save of the LoRA model writes the merged kernels: it loads as a plain model.
    model.save(tmp_path / "lora.keras")
    reloaded = keras.saving.load_model(tmp_path / "lora.keras")
    assert lora.lora_layers(reloaded) == {}
    np.testing.assert_allclose(to_numpy(reloaded(BATCH)), expected, atol=1e-5)


@pytest.mark.one_backend  # no backend code of its own; decoding costs 15 s on JAX
def test_merged_translator_keeps_settings_and_tokenizer(tmp_path):
    from keras_transformer.text import train_tokenizer

    tokenizer = train_tokenizer(["dos mil", "two thousand"], vocabulary_size=30)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size())
    translator = kt.Translator(model, tokenizer, beam_size=2, extra_length=3, jit_compile=False)
    assert lora.merged_translator(translator) is translator
    lora.enable_lora(model, rank=2)
    merged = lora.merged_translator(translator)
    assert merged is not translator and lora.lora_layers(merged.model) == {}
    assert merged.tokenizer is tokenizer and merged.beam_size == 2 and not merged.jit_compile
    assert merged(["dos mil"]) == translator(["dos mil"])
    # A compiled LoRA translator's preset is the merged one.
    model.compile(optimizer="adam", loss=kt.LabelSmoothedCrossentropy())
    translator.save_to_preset(tmp_path / "preset")
    reloaded = kt.Translator.from_preset(tmp_path / "preset")
    assert lora.lora_layers(reloaded.model) == {} and reloaded.beam_size == 2
    assert reloaded(["dos mil"]) == translator(["dos mil"])


def test_a_compiled_lora_model_saves_to_a_preset_merged(trained, tmp_path):
    model, _, _ = trained  # compiled and trained: its optimizer holds the LoRA weights' state
    expected = to_numpy(model(BATCH))
    model.save_to_preset(tmp_path / "preset")
    reloaded = kt.Transformer.from_preset(tmp_path / "preset")
    assert lora.lora_layers(reloaded) == {} and len(reloaded.weights) == len(make_model().weights)
    np.testing.assert_allclose(to_numpy(reloaded(BATCH)), expected, atol=1e-5)
    assert lora.lora_layers(model) and model.optimizer is not None  # left as it was
