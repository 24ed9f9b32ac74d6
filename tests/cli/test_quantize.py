"""`keras-transformer quantize` and `export --quantization int8`."""

import keras
import pytest

from keras_transformer import Translator, cli


def texts(translations):
    return [t.text for t in translations]


def test_quantize_writes_a_keras_file_and_a_preset_that_load_quantized(
    number_translator, tmp_path, capsys
):
    _, test_pairs, keras_path = number_translator
    sources = [source for source, _ in test_pairs[:8]]
    expected = Translator.load(keras_path)
    expected.quantize("int8")
    expected = texts(expected.translate(sources))

    assert cli.main(["quantize", str(keras_path), str(tmp_path / "int8.keras")]) == 0
    assert "int8" in capsys.readouterr().err
    from_file = Translator.load(tmp_path / "int8.keras")
    assert from_file.model.quantization == "int8"
    assert texts(from_file.translate(sources)) == expected
    # Half the size or less: the weights are int8 and the optimizer is gone.
    assert (tmp_path / "int8.keras").stat().st_size < 0.5 * keras_path.stat().st_size

    assert cli.main(["quantize", str(tmp_path / "int8.keras"), str(tmp_path / "again.keras")]) == 2
    assert "already quantized" in capsys.readouterr().err

    assert cli.main(["quantize", str(keras_path), str(tmp_path / "preset")]) == 0
    from_preset = Translator.from_preset(tmp_path / "preset")
    assert texts(from_preset.translate(sources)) == expected


def test_quantize_refuses_an_existing_output_and_a_missing_translator(
    number_translator, tmp_path, capsys
):
    _, _, keras_path = number_translator
    taken = tmp_path / "taken.keras"
    taken.write_bytes(b"mine")
    assert cli.main(["quantize", str(keras_path), str(taken)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert taken.read_bytes() == b"mine"
    assert cli.main(["quantize", str(tmp_path / "none.keras"), str(tmp_path / "out.keras")]) == 2
    assert "none.keras" in capsys.readouterr().err


def test_export_saved_model_takes_int8_and_no_other_quantization(number_translator, tmp_path, capsys):
    _, _, keras_path = number_translator
    argv = ["export", str(keras_path), str(tmp_path / "sm"), "--quantization", "float16"]
    assert cli.main(argv) == 2
    assert "--format ctranslate2" in capsys.readouterr().err
    assert not (tmp_path / "sm").exists()


@pytest.mark.slow
def test_export_quantization_int8_writes_an_int8_saved_model(number_translator, tmp_path):
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_text")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the export's TensorFlow subprocess is tested in tests/models/test_quantization.py")
    _, test_pairs, keras_path = number_translator
    sources = [source for source, _ in test_pairs[:8]]
    expected = Translator.load(keras_path)
    expected.quantize("int8")
    expected = texts(expected.translate(sources))
    assert cli.main(["export", str(keras_path), str(tmp_path / "sm"), "--quantization", "int8"]) == 0
    served = tf.saved_model.load(str(tmp_path / "sm"))
    outputs = served.signatures["serving_default"](tf.constant(sources))
    assert [x.decode() for x in outputs["translations"].numpy()] == expected
    int8_variables = [v for v in served.variables if v.dtype == tf.int8]
    assert len(int8_variables) >= 10
