"""`keras-transformer export` (`keras_transformer.cli.export`)."""


from tests.cli.helpers import run_main, tensorflow_only


@tensorflow_only  # Other backends: tests/export/test_export.py::test_export_from_another_backend.
def test_export_subcommand(small_keras_translator, tmp_path, capsysbinary):
    _, path = small_keras_translator
    argv = ["export", str(path), str(tmp_path / "out"), "--beam-size", "1"]
    status, _, errors = run_main(capsysbinary, argv)
    assert status == 0 and f"wrote {tmp_path / 'out'}" in errors
    assert (tmp_path / "out" / "saved_model.pb").exists()
