"""`keras-transformer quantize` and `export --quantization int8` (the translations of a quantized
translator, its reloads and its SavedModel: tests/models/test_quantization.py)."""

import keras
import numpy as np

from keras_transformer import Translator, cli

BATCH = {"encoder_inputs": np.array([[5, 6, 7, 0]]), "decoder_inputs": np.array([[2, 5, 6]])}


def logits(translator):
    return keras.ops.convert_to_numpy(translator.model(BATCH))


def test_quantize_writes_a_keras_file_and_a_preset_that_load_quantized(
    number_translator, tmp_path, capsys
):
    _, _, keras_path = number_translator
    expected = Translator.load(keras_path)
    expected.quantize("int8")
    expected = logits(expected)

    assert cli.main(["quantize", str(keras_path), str(tmp_path / "int8.keras")]) == 0
    assert "int8" in capsys.readouterr().err
    from_file = Translator.load(tmp_path / "int8.keras")
    assert from_file.model.quantization == "int8"
    np.testing.assert_array_equal(logits(from_file), expected)
    # Half the size or less: the weights are int8 and the optimizer is gone.
    assert (tmp_path / "int8.keras").stat().st_size < 0.5 * keras_path.stat().st_size

    assert cli.main(["quantize", str(tmp_path / "int8.keras"), str(tmp_path / "again.keras")]) == 2
    assert "already quantized" in capsys.readouterr().err

    assert cli.main(["quantize", str(keras_path), str(tmp_path / "preset")]) == 0
    np.testing.assert_array_equal(logits(Translator.from_preset(tmp_path / "preset")), expected)


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


def test_export_quantization_int8_hands_the_exporter_an_int8_translator(
    number_translator, tmp_path, capsys, monkeypatch
):
    import keras_transformer.export as export

    _, _, keras_path = number_translator
    handed = []

    def export_saved_model(translator, path, **options):  # the export itself is tested elsewhere
        handed.append(translator)
        return str(path)

    monkeypatch.setattr(export, "export_saved_model", export_saved_model)
    assert cli.main(["export", str(keras_path), str(tmp_path / "sm"), "--quantization", "int8"]) == 0
    assert handed[0].model.quantization == "int8"
    argv = ["export", str(keras_path), str(tmp_path / "sm"), "--quantization", "float16"]
    assert cli.main(argv) == 2
    assert "--format ctranslate2" in capsys.readouterr().err
    assert len(handed) == 1


def test_quantize_says_when_this_cpu_has_no_int8_dot_product(
    number_translator, tmp_path, capsys, monkeypatch
):
    from keras_transformer.cli import quantize

    _, _, keras_path = number_translator
    for found, noted in (((), True), (("avx512_vnni",), False), (None, False)):
        monkeypatch.setattr(quantize, "int8_dot_instructions", lambda found=found: found)
        output = tmp_path / f"int8-{noted}-{found}.keras"
        assert cli.main(["quantize", str(keras_path), str(output)]) == 0
        errors = capsys.readouterr().err
        assert ("note: this CPU has no int8 dot-product instructions" in errors) is noted


def test_int8_dot_instructions_reads_the_flags_line(tmp_path):
    from keras_transformer._checks import int8_dot_instructions

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n")
    assert int8_dot_instructions(cpuinfo) == ()
    cpuinfo.write_text("flags\t: avx2 amx_tile amx_int8 avx512_vnni avx_vnni\n")
    assert int8_dot_instructions(cpuinfo) == ("amx_int8", "avx512_vnni", "avx_vnni")
    cpuinfo.write_text("Features\t: fp asimd\n")  # Not x86: no flags line.
    assert int8_dot_instructions(cpuinfo) is None
    assert int8_dot_instructions(tmp_path / "missing") is None
