"""Files written by earlier releases load and translate the same: a `translator.keras` of
0.1.0, a preset directory and a SavedModel of 0.2.0; and the import paths of 0.2.0 still work.

`tests/fixtures/translator_v0_1.keras` (a one-layer tiny model trained briefly on number words)
and the outputs that version gave, `tests/fixtures/translator_v0_1.json`, were written by
`tests/fixtures/make_translator_v0_1.py`. Token ids and strings must match exactly; scores to
float32 rounding (the backends and XLA sum in different orders).
"""

import json
import os

import keras
import numpy as np
import pytest

from keras_transformer import Translator

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
KERAS_PATH = os.path.join(FIXTURES, "translator_v0_1.keras")


@pytest.fixture(scope="module")
def record():
    with open(os.path.join(FIXTURES, "translator_v0_1.json"), encoding="utf-8") as file:
        return json.load(file)


def test_fixture_is_small():
    assert os.path.getsize(KERAS_PATH) < 1_000_000


@pytest.mark.parametrize("search, beam_size", [("beam", None), ("greedy", 1)])
def test_old_file_loads_and_translates_the_same(record, search, beam_size):
    translator = keras.saving.load_model(KERAS_PATH)  # safe_mode=True, no custom_objects.
    assert isinstance(translator, Translator)
    translations = translator.translate(record["sources"], beam_size=beam_size)
    expected = record[search]
    assert [t.text for t in translations] == expected["translations"]
    assert [t.tokens for t in translations] == expected["tokens"]
    assert [t.source_tokens for t in translations] == expected["source_tokens"]
    assert [t.truncated for t in translations] == expected["truncated"]
    np.testing.assert_allclose(
        [t.score for t in translations], expected["scores"], rtol=1e-4, atol=1e-4
    )
    assert translator(record["sources"], beam_size=beam_size) == expected["translations"]


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="SavedModel export runs on TensorFlow"
)
def test_saved_model_exported_from_old_file_serves_the_same(record, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from keras_transformer.export import export_saved_model

    path = export_saved_model(KERAS_PATH, tmp_path / "saved_model")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    outputs = serve(inputs=tf.constant(record["sources"]))
    expected = record["saved_model"]
    texts = [text.decode("utf-8") for text in outputs["translations"].numpy()]
    assert texts == expected["translations"]
    assert outputs["truncated"].numpy().tolist() == expected["truncated"]
    np.testing.assert_allclose(outputs["scores"].numpy(), expected["scores"], rtol=1e-4, atol=1e-4)


def test_the_0_2_import_paths_still_work(tmp_path):
    """The modules that moved in 0.3.0 keep their 0.2.0 paths for one release (the same
    objects, not copies)."""
    from keras_transformer import buckets, cli, engines, generation, losses, translation
    from keras_transformer import ctranslate2 as old_ctranslate2
    from keras_transformer import presets as old_presets
    from keras_transformer.cli import train as cli_train
    from keras_transformer.data import buckets as old_buckets
    from keras_transformer.export import ctranslate2 as converter
    from keras_transformer.saving import preset
    from keras_transformer.training import cli as old_training_cli
    from keras_transformer.training import mirrored, tokenizers, trainer
    from keras_transformer.translator import Translation, check_search_options, run_translation

    assert old_buckets.bucket_length is buckets.bucket_length
    assert old_buckets.padded_batch_size is buckets.padded_batch_size
    assert generation.bucket_length is buckets.bucket_length
    assert generation.padded_batch_size is buckets.padded_batch_size
    assert old_ctranslate2.CTranslate2Translator is engines.CTranslate2Translator
    assert old_ctranslate2.export_ctranslate2 is converter.export_ctranslate2
    assert old_presets.is_preset is preset.is_preset
    assert old_presets.FORMAT_VERSION == preset.FORMAT_VERSION
    assert old_training_cli.main is cli_train.main
    assert old_training_cli.add_train_parser is cli_train.add_train_parser
    assert mirrored.GlobalTokenMeanCrossentropy is losses.GlobalTokenMeanCrossentropy
    assert trainer.save_tokenizer is tokenizers.save_tokenizer
    assert trainer.load_or_train_tokenizer is tokenizers.load_or_train_tokenizer
    assert Translation is translation.Translation
    assert run_translation is translation.run_translation
    assert check_search_options is translation.check_search_options
    assert cli.run_handler is cli.common.run_handler
    # The 0.2.0 functions of `presets` still read and write presets.
    translator = old_presets.load_saved_translator(KERAS_PATH)
    assert isinstance(translator, Translator)
    directory = old_presets.save_translator(translator, tmp_path / "preset")
    assert old_presets.is_preset(directory)
    assert old_presets.load_translator(directory).get_config() == translator.get_config()


# A preset directory and a SavedModel written by keras-transformer 0.2.0 (from the 0.1.0
# fixture's translator) with what 0.2.0 answered: `tests/fixtures/make_preset_v0_2.py`.
PRESET_V0_2 = os.path.join(FIXTURES, "preset_v0_2")
SAVED_MODEL_V0_2 = os.path.join(FIXTURES, "saved_model_v0_2")


@pytest.fixture(scope="module")
def record_v0_2():
    with open(os.path.join(FIXTURES, "preset_v0_2.json"), encoding="utf-8") as file:
        return json.load(file)


@pytest.mark.parametrize(
    "search, options",
    [("beam", {}), ("greedy", {"beam_size": 1}), ("n_best", {"num_hypotheses": 3})],
)
def test_0_2_preset_loads_and_translates_the_same(record_v0_2, search, options):
    from keras_transformer.engines import load_translator

    assert record_v0_2["keras_transformer_version"] == "0.2.0"
    for translator in (Translator.from_preset(PRESET_V0_2), load_translator(PRESET_V0_2)):
        assert translator.patience == 2  # The stop a preset without one gets now.
        if search == "n_best":
            # 0.2.0 stopped exactly; with patience 2 the third hypothesis of one of these 10
            # sentences differs (the best ones do not): n-best lists are compared with the
            # exact stop, which the translator still offers.
            translator.patience = None
        translations = translator.translate(record_v0_2["sources"], **options)
        if search == "n_best":
            translations = [hypothesis for hypotheses in translations for hypothesis in hypotheses]
        expected = record_v0_2[search]
        assert [t.text for t in translations] == expected["translations"]
        assert [t.tokens for t in translations] == expected["tokens"]
        assert [t.truncated for t in translations] == expected["truncated"]
        np.testing.assert_allclose(
            [t.score for t in translations], expected["scores"], rtol=1e-4, atol=1e-4
        )


@pytest.mark.one_backend  # TensorFlow serves a SavedModel whatever KERAS_BACKEND says.
def test_0_2_saved_model_serves_the_same_through_the_engine(record_v0_2):
    from keras_transformer.engines import SavedModelTranslator, load_translator

    served = load_translator(SAVED_MODEL_V0_2)
    assert isinstance(served, SavedModelTranslator)
    translations = served.translate(record_v0_2["sources"])
    expected = record_v0_2["saved_model"]
    assert [t.text for t in translations] == expected["translations"]
    assert [t.truncated for t in translations] == expected["truncated"]
    np.testing.assert_allclose(
        [t.score for t in translations], expected["scores"], rtol=1e-4, atol=1e-4
    )
