"""`keras-transformer translate` (`keras_transformer.cli.translate`).

Tested on the SavedModel of the `exported` fixture (`tests/conftest.py`, TensorFlow backend: it
is trained and exported once per session) and, on every backend, on a small `.keras`
Translator.
"""

import os
import re
import subprocess

import pytest

from keras_transformer import engines
from tests.cli.helpers import SCRIPT, Recorded, parse_n_best, run_main, tensorflow_only
from tests.export_helpers import BAD_INPUTS, SENTENCES, TRUNCATED

# The command's own logic does not depend on the Keras backend: it runs once (one_backend);
# the engines it calls are tested on every backend (tests/test_translator.py, tests/saving/).
pytestmark = pytest.mark.one_backend


@tensorflow_only
def test_translate_sentences_from_arguments(
    exported, loaded_saved_model, capsysbinary, monkeypatch
):
    translator, _, saved_model_path = exported
    assert loaded_saved_model.max_source_length == 32
    # The SavedModel is loaded once for these tests (each load compiles anew); the real
    # loading runs in test_console_script_reads_stdin.
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded_saved_model)
    status, lines, errors = run_main(
        capsysbinary, ["translate", "--model", str(saved_model_path), *SENTENCES]
    )
    assert status == 0 and errors == ""
    assert lines == translator(SENTENCES)


@tensorflow_only
def test_translate_stdin_with_bad_inputs(exported, loaded_saved_model, capsysbinary, monkeypatch):
    _, _, saved_model_path = exported
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded_saved_model)
    inputs = [sentence.encode() for sentence in SENTENCES[:2]] + BAD_INPUTS
    # What the SavedModel returns for these lines, batched as the command batches them.
    expected = loaded_saved_model.translate(inputs)
    expected_texts = [translation.text for translation in expected]
    expected_truncated = [translation.truncated for translation in expected]
    status, lines, errors = run_main(
        capsysbinary,
        # Each line whole, as before 0.4 (segmentation cuts an over-long line instead).
        ["translate", "--model", str(saved_model_path), "--batch-size", "16", "--scores", "--no-segment"],
        stdin=b"\n".join(inputs) + b"\n",
        monkeypatch=monkeypatch,
    )
    assert status == 0
    assert len(lines) == len(inputs)  # One line per input line, even empty ones.
    scores, texts = zip(*(line.split("\t", 1) for line in lines), strict=True)
    assert list(texts) == expected_texts
    assert texts[2] == texts[3] == ""  # The empty and the whitespace-only lines.
    assert all(float(score) <= 0 for score in scores)
    # The over-long input is truncated, and the note says so.
    assert expected_truncated == [False, False] + TRUNCATED
    long_line = 2 + TRUNCATED.index(True) + 1
    assert f"note: input line {long_line} is longer than the model's maximum source length" in errors
    assert errors.count("note:") == 1


@tensorflow_only
def test_translate_empty_stdin_prints_nothing(
    exported, loaded_saved_model, capsysbinary, monkeypatch
):
    _, _, saved_model_path = exported
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded_saved_model)
    status, lines, errors = run_main(
        capsysbinary, ["translate", "--model", str(saved_model_path)], b"", monkeypatch
    )
    assert (status, lines, errors) == (0, [], "")


@tensorflow_only
@pytest.mark.slow
def test_console_script_reads_stdin(exported):
    translator, _, saved_model_path = exported
    result = subprocess.run(
        [SCRIPT, "translate", "--model", str(saved_model_path)],
        input="\n".join(SENTENCES[:3] + ["", "你好"]).encode() + b"\n",
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.decode().splitlines() == translator(SENTENCES[:3] + ["", "你好"])


def test_translate_with_a_keras_file(small_keras_translator, capsysbinary):
    translator, path = small_keras_translator
    sentences = [SENTENCES[3], "", "tres " * 15]
    translations = translator.translate(sentences)
    assert [translation.truncated for translation in translations] == [False, False, True]
    argv = ["translate", "--model", str(path), "--no-segment", *sentences]
    status, lines, errors = run_main(capsysbinary, argv)
    assert status == 0
    assert lines == [translation.text for translation in translations]
    assert errors.count("note:") == 1
    assert "note: input line 3 is longer than the model's maximum source length (16 tokens" in errors


def test_an_over_long_line_is_cut_and_translated_whole(small_keras_translator, capsysbinary):
    from keras_transformer.documents.texts import plan_texts

    translator, path = small_keras_translator
    long_line = "tres " * 15 + "mil. Cuarenta y dos."  # More pieces than the model's 14.
    assert translator.translate(long_line).truncated
    status, lines, errors = run_main(capsysbinary, ["translate", "--model", str(path), long_line])
    assert status == 0 and errors == "" and len(lines) == 1  # No truncation note.
    plan = plan_texts(
        [long_line],
        max_pieces=translator.max_source_pieces,
        count_tokens=translator.count_tokens,
    )
    assert len(plan.sentences) >= 3 and " ".join(plan.sentences) == long_line.strip()
    translations = translator.translate(plan.sentences)
    assert not any(translation.truncated for translation in translations)
    assert lines[0].split() == " ".join(t.text for t in translations).split()


def test_invalid_utf8_argument_is_translated(small_keras_translator, capsysbinary):
    translator, path = small_keras_translator
    argument = os.fsdecode(b"dos \xff\xfe")  # What Python makes of such bytes in argv.
    status, lines, _ = run_main(capsysbinary, ["translate", "--model", str(path), argument])
    assert status == 0 and lines == translator([b"dos \xff\xfe"])


def test_translate_n_best_lines_parse_back(small_keras_translator, capsysbinary):
    translator, path = small_keras_translator
    sentences = [SENTENCES[3], "", SENTENCES[0]]
    # Each line whole (`--no-segment`): the n-best lists of the engine itself.
    argv = ["translate", "--model", str(path), "--n-best", "2", "--no-segment", *sentences]
    status, lines, _ = run_main(capsysbinary, argv)
    assert status == 0 and len(lines) == 2 + 1 + 2
    parsed = parse_n_best(lines)
    expected = translator.translate(sentences, num_hypotheses=2)
    assert sorted(parsed) == [0, 1, 2]
    for index, hypotheses in enumerate(expected):
        assert [text for text, _ in parsed[index]] == [h.text for h in hypotheses]
        scores = [score for _, score in parsed[index]]
        assert scores == pytest.approx([h.score for h in hypotheses], abs=1e-6)
        assert scores == sorted(scores, reverse=True)
    assert parsed[1] == [("", 0.0)]
    # The first hypothesis is the translation `translate` prints without --n-best.
    argv = ["translate", "--model", str(path), "--no-segment", *sentences]
    status, plain, _ = run_main(capsysbinary, argv)
    assert plain == [parsed[index][0][0] for index in range(3)]
    argv = ["translate", "--model", str(path), "--beam-size", "1", "--no-segment", *sentences]
    status, greedy, _ = run_main(capsysbinary, argv)
    assert status == 0 and greedy == translator(sentences, beam_size=1)


def test_translate_n_best_above_the_beam_size_is_a_clear_error(
    small_keras_translator, capsysbinary
):
    _, path = small_keras_translator  # beam_size=2
    argv = ["translate", "--model", str(path), "--n-best", "3", "uno"]
    status, lines, errors = run_main(capsysbinary, argv)
    assert status == 2 and lines == []
    assert "error: --n-best must be an int from 1 to the beam size (2)" in errors


@tensorflow_only
def test_translate_n_best_with_a_saved_model_is_the_translators(
    exported, loaded_saved_model, capsysbinary, monkeypatch
):
    translator, _, saved_model_path = exported  # beam_size=4, translate_n_best: 4 columns
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded_saved_model)
    sentences = [SENTENCES[0], "", SENTENCES[3]]
    model = ["translate", "--model", str(saved_model_path)]
    status, lines, errors = run_main(
        capsysbinary, [*model, "--n-best", "3", "--beam-size", "4", *sentences]
    )
    assert status == 0 and errors == "" and len(lines) == 3 + 1 + 3
    parsed = parse_n_best(lines)
    expected = translator.translate(sentences, num_hypotheses=3)
    for index, hypotheses in enumerate(expected):
        assert [text for text, _ in parsed[index]] == [h.text for h in hypotheses]
        scores = [score for _, score in parsed[index]]
        assert scores == pytest.approx([h.score for h in hypotheses], abs=1e-4)
    assert parsed[1] == [("", 0.0)]
    # What the SavedModel does not offer is refused, naming the argument and its value.
    for options, message in (
        (["--n-best", "5"], r"must be at most 4 .* Received: --n-best 5"),
        (["--beam-size", "2"], r"exported with \(4\).* Received: --beam-size 2"),
        (["--n-best", "2", "--beam-size", "1"], r"Received: --beam-size 1"),
    ):
        status, lines, errors = run_main(capsysbinary, [*model, *options, "uno"])
        assert status == 2 and lines == [] and re.search(message, errors), errors


def test_saved_model_without_the_n_best_signature_refuses_n_best():
    # A SavedModel exported before `translate_n_best` existed (its settings, without loading).
    backend = object.__new__(engines.SavedModelTranslator)
    backend.beam_size, backend._n_best_signature, backend.num_hypotheses = 4, None, None
    backend.check_search_options(4, None)  # The exported beam size is taken.
    with pytest.raises(ValueError, match=r"no `translate_n_best` signature.*Received: n_best=1"):
        backend.check_search_options(None, 1)


def test_translate_picks_the_highest_version_of_a_base_path(tmp_path, capsysbinary, monkeypatch):
    loaded = []
    from keras_transformer.engines import loading  # The engines as `open_engine` opens them.

    for name in ("load_keras_translator", "SavedModelTranslator", "CTranslate2Translator"):
        monkeypatch.setattr(loading, name, lambda path: loaded.append(path) or Recorded(["ok"]))
    # Versions are compared as numbers; temporaries, other names and files are not versions.
    for name in ("2", "10", "9", ".tmp-ab12cd34-11", "notes"):
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("")
    for engine in ("keras", "saved_model", "ctranslate2"):
        argv = ["translate", "--engine", engine, "--model", str(tmp_path), "uno"]
        assert run_main(capsysbinary, argv)[:2] == (0, ["ok"])
    # A model directory (no numbered directories inside) is used as it is.
    argv = ["translate", "--engine", "saved_model", "--model", str(tmp_path / "9"), "uno"]
    assert run_main(capsysbinary, argv)[0] == 0
    assert loaded == [str(tmp_path / "10")] * 3 + [str(tmp_path / "9")]


def test_missing_model_is_a_clear_error(capsysbinary, tmp_path):
    argv = ["translate", "--model", str(tmp_path / "missing"), "hola"]
    status, lines, errors = run_main(capsysbinary, argv)
    assert status == 2 and lines == []
    assert "error: cannot load the model" in errors and "Traceback" not in errors
    status, _, errors = run_main(capsysbinary, ["export", str(tmp_path / "missing.keras"), "out"])
    assert status == 2 and "error: cannot export" in errors  # the same mistake, the same status


def test_a_failing_batch_prints_empty_lines_and_exits_with_1(capsysbinary, monkeypatch):
    failing = Recorded(fail_on=2)
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: failing)
    argv = ["translate", "--model", "any", "--batch-size", "2"]
    status, lines, errors = run_main(capsysbinary, argv, b"a\nb\nc\nd\ne\n", monkeypatch)
    assert status == 1
    assert lines == ["A", "B", "", "", "E"]
    assert "error: input lines 3-4 failed: RuntimeError: out of memory" in errors


def test_the_engine_choices_are_the_engines():
    # `cli.translate` spells them out to stay free of frameworks at import.
    from keras_transformer.cli.translate import ENGINES

    assert ENGINES == engines.ENGINES


def test_translate_prefix_sampling_and_alignment_options(small_keras_translator, capsysbinary, tmp_path):
    translator, path = small_keras_translator
    sentences = ["cuarenta y dos", "tres"]
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("forty\n\n", encoding="utf-8")
    status, lines, errors = run_main(
        capsysbinary,
        ["translate", "--model", str(path), "--target-prefix", str(prefixes), "--alignments", *sentences],
    )
    assert status == 0 and errors == ""
    expected = translator.translate(sentences, target_prefix=["forty", ""], alignments=True)
    for line, translation in zip(lines, expected, strict=True):
        links = " ".join(f"{s}-{t}" for s, t in translation.word_alignments)
        assert line == f"{translation.text} ||| {links}"
    sample = ["translate", "--model", str(path), "--sampling-topk", "5", "--seed", "3", *sentences]
    first = run_main(capsysbinary, sample)  # reproducibility: tests/export/test_ctranslate2.py
    assert first[0] == 0 and first[1] == [t.text for t in translator.translate(sentences, beam_size=1, sampling_topk=5, seed=3)]
    prefixes.write_text("forty\n", encoding="utf-8")  # one line for two sentences
    status, _, errors = run_main(
        capsysbinary, ["translate", "--model", str(path), "--target-prefix", str(prefixes), *sentences]
    )
    assert status == 2 and "fewer than the sentences" in errors
    status, _, errors = run_main(
        capsysbinary, ["translate", "--model", str(path), "--beam-size", "2", "--sampling-topp", "0.9", "dos"]
    )
    assert status == 2 and "--beam-size 1" in errors and "--sampling-topp" in errors


def test_score_command_prints_the_translators_scores(small_keras_translator, capsysbinary, tmp_path):
    translator, path = small_keras_translator
    sources, targets = tmp_path / "sources.txt", tmp_path / "targets.txt"
    sources.write_text("cuarenta y dos\ntres\n", encoding="utf-8")
    targets.write_text("forty-two\nthree\n", encoding="utf-8")
    command = ["score", "--model", str(path), "--sources", str(sources), "--translations", str(targets)]
    status, lines, errors = run_main(capsysbinary, [*command, "--token-scores"])
    assert status == 0 and errors == ""
    expected = translator.score(["cuarenta y dos", "tres"], ["forty-two", "three"])
    for line, scoring in zip(lines, expected, strict=True):
        score, tokens = line.split("\t")
        assert float(score) == pytest.approx(scoring.score, abs=1e-5)
        assert [pair.rsplit(":", 1)[0] for pair in tokens.split(" ")] == scoring.target_tokens
    targets.write_text("forty-two\n", encoding="utf-8")
    status, _, errors = run_main(capsysbinary, command)
    assert status == 2 and "must pair up" in errors


def test_few_sentences_from_arguments_search_without_xla(
    number_translator, tmp_path, capsysbinary, monkeypatch
):
    """Up to `FEW_SENTENCES` sentences given as arguments, a compiled Keras Translator runs
    its search without XLA (TensorFlow: a trace costs less than a compilation), with the
    compiled search's output; more sentences keep XLA."""
    from keras_transformer.translator import FEW_SENTENCES, Translator

    _, test_pairs, keras_path = number_translator
    compiled = Translator.load(keras_path)
    compiled.jit_compile = True  # a fresh translator: its generator is made on first use
    path = tmp_path / "compiled.keras"
    compiled.save(path)
    loaded = []

    def load(model, engine):
        loaded.append(Translator.load(model))
        return loaded[-1]

    monkeypatch.setattr(engines, "load_translator", load)
    sources = [source for source, _ in test_pairs]
    for count, uses_xla in ((FEW_SENTENCES, False), (FEW_SENTENCES + 1, True)):
        status, lines, _ = run_main(
            capsysbinary, ["translate", "--model", str(path), *sources[:count]]
        )
        assert status == 0 and lines == compiled(sources[:count])
        assert loaded[-1].jit_compile is uses_xla


def test_format_html_keeps_the_markup(small_keras_translator, capsysbinary):
    from bs4 import BeautifulSoup

    translator, path = small_keras_translator
    markup = '<p>dos <b>mil</b> <a href="#x">tres</a></p><code>dos</code>'
    argv = ["translate", "--model", str(path), "--format", "html", markup]
    status, lines, errors = run_main(capsysbinary, argv)
    assert status == 0 and errors == "" and len(lines) == 1
    soup = BeautifulSoup(lines[0], "html.parser")
    # Every tag kept (in the translation's word order: inline tags follow their words).
    assert sorted(tag.name for tag in soup.find_all()) == ["a", "b", "code", "p"]
    assert soup.a["href"] == "#x" and soup.code.get_text() == "dos"  # Code is never translated.
    # The paragraph's words are the translation of its text, the tags around some of them.
    expected = translator.translate("dos mil tres").text
    assert soup.p.get_text(" ", strip=True).split() == expected.split()
    status, _, errors = run_main(capsysbinary, [*argv[:-1], "--n-best", "2", markup])
    assert status == 2 and "cannot be used with --n-best" in errors
