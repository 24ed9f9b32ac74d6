"""`keras-transformer evaluate` (`keras_transformer.cli.evaluate`) and the scores it shares
with `train` (`keras_transformer.training.scores`, `training.evaluation`): the same figures and
signatures as sacreBLEU's own command line on the same files."""

import gzip
import json
import re
import subprocess
import sys

import pytest

from keras_transformer.training.evaluation import evaluate_translations
from keras_transformer.training.scores import paired_bootstrap, score_corpus
from tests.cli.helpers import run_main

pytestmark = pytest.mark.one_backend  # Text files and sacreBLEU: no backend involved.

REFERENCES = [
    "the cat sat on the mat .",
    "there is a book on the table",
    "she walks to school every morning",
    "we had dinner at eight",
    "it rained all day yesterday",
    "my brother plays the guitar",
    "the train leaves at noon",
    "they bought a new house",
] * 3
SYSTEM = [
    "the cat sat on a mat .",
    "a book is on the table",
    "she walks to school each morning",
    "we had dinner at eight",
    "it was raining all day yesterday",
    "my brother plays guitar",
    "the train leaves at twelve",
    "they have bought a new house",
] * 3
BASELINE = [
    "cat sat mat",
    "there is book on table",
    "she go school morning",
    "we dinner at eight",
    "rained all day",
    "my brother plays the guitar",
    "train leaves noon",
    "they buy new house",
] * 3


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    return (
        write(tmp_path / "ref.en", REFERENCES),
        write(tmp_path / "system.en", [line + "  " for line in SYSTEM]),  # trailing blanks
        write(tmp_path / "baseline.en", BASELINE),
    )


def sacrebleu(*arguments):
    return subprocess.run(
        [sys.executable, "-m", "sacrebleu", *arguments],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_scores_and_paired_bootstrap_equal_sacrebleu_command_line(files, capsysbinary):
    references, system, baseline = files
    status, lines, errors = run_main(
        capsysbinary,
        [
            "evaluate",
            "--hypotheses",
            system,
            "--references",
            references,
            "--compare",
            baseline,
            "--json",
        ],
    )
    assert status == 0, errors
    result = json.loads("\n".join(lines))
    assert result["sentences"] == len(REFERENCES)
    # sacreBLEU's JSON output: one record per metric, scores rounded to `-w` decimals.
    expected = json.loads(
        sacrebleu(references, "-i", system, "-m", "bleu", "chrf", "ter", "-w", "6")
    )
    assert [score["name"] for score in result["scores"].values()] == ["BLEU", "chrF2", "TER"]
    for score, reference in zip(result["scores"].values(), expected, strict=True):
        assert score["name"] == reference["name"]
        assert score["score"] == pytest.approx(reference["score"], abs=1e-6)
        assert score["signature"] == reference["signature"]
    assert "smooth:exp" in result["scores"]["bleu"]["signature"]  # sacreBLEU's default is on
    assert result["scores"]["bleu"]["verbose_score"] == expected[0]["verbose_score"]

    # Paired bootstrap: sacreBLEU's table (its JSON output fails on float32 in 2.6) gives the
    # p-values with 4 decimals and the scores with `-w`; the first system is the baseline.
    table = sacrebleu(
        references,
        "-i",
        baseline,
        system,
        "-m",
        "bleu",
        "chrf",
        "ter",
        "--paired-bs",
        "--format",
        "text",
        "-w",
        "4",
    )
    p_values = [float(value) for value in re.findall(r"\(p = ([0-9.]+)\)", table)]
    compared = result["paired_bootstrap"]
    assert [test["system"]["p_value"] for test in compared.values()] == pytest.approx(
        p_values, abs=5e-5
    )
    for test in compared.values():
        assert f"{test['baseline']['score']:.4f} ({test['baseline']['mean']:.4f} ± " in table
        assert f"{test['system']['score']:.4f} ({test['system']['mean']:.4f} ± " in table
        assert test["signature"] in table
    assert compared["bleu"]["system"]["p_value"] < 0.05  # a real difference


def test_text_report_and_user_errors(files, tmp_path, capsysbinary):
    references, system, baseline = files
    status, lines, _ = run_main(
        capsysbinary, ["evaluate", "--hypotheses", system, "--references", references]
    )
    scores = score_corpus([line.rstrip() for line in SYSTEM], REFERENCES)
    assert status == 0
    assert lines[1].startswith(f"BLEU  = {scores['bleu']['score']:.2f} ")
    assert lines[2].split("signature: ")[1] == scores["bleu"]["signature"]
    assert lines[3] == f"chrF2 = {scores['chrf']['score']:.2f}"
    short = write(tmp_path / "short.en", SYSTEM[:-1])
    for argv, message in [
        (
            ["--hypotheses", short, "--references", references],
            f"--hypotheses {short} has {len(SYSTEM) - 1} lines and --references {references} has "
            f"{len(REFERENCES)}",
        ),
        (
            ["--hypotheses", system, "--references", references, "--compare", short],
            f"--compare {short} has {len(SYSTEM) - 1} lines",
        ),
        (["--model", "m.keras", "--references", references], "evaluate --model needs --sources"),
        (
            ["--hypotheses", system, "--sources", system, "--references", references],
            "evaluate --sources goes with --model",
        ),
        (["--hypotheses", str(tmp_path / "missing.en"), "--references", references], "missing.en"),
    ]:
        status, lines, errors = run_main(capsysbinary, ["evaluate", *argv])
        assert status == 2 and lines == [], errors
        assert errors.startswith("keras-transformer: error: ") and message in errors, errors
        assert errors.count("\n") == 1


def test_a_byte_order_mark_is_not_scored_as_text(files, tmp_path, capsysbinary):
    references = files[0]
    marked = tmp_path / "marked.en"
    marked.write_bytes(b"\xef\xbb\xbf" + open(references, "rb").read())
    status, lines, _ = run_main(
        capsysbinary, ["evaluate", "--hypotheses", str(marked), "--references", references, "--json"]
    )
    assert status == 0
    assert json.loads("\n".join(lines))["scores"]["chrf"]["score"] == 100.0


def test_empty_files_an_endless_line_and_a_truncated_gz_are_one_line(tmp_path, capsysbinary):
    empty = write(tmp_path / "empty.en", [])
    endless = tmp_path / "endless.en"
    endless.write_bytes(b"x" * (2 << 20))  # 2 MiB without a line break
    truncated = tmp_path / "hypotheses.en.gz"
    truncated.write_bytes(gzip.compress("".join(line + "\n" for line in SYSTEM).encode())[:-12])
    for hypotheses, references, message in [
        (empty, empty, f"--hypotheses {empty} holds no lines: there is nothing to score"),
        (str(endless), empty, f"{endless}, line 1: longer than 1048576 bytes"),
        (str(truncated), empty, f"{truncated}: a truncated or damaged .gz file"),
    ]:
        status, lines, errors = run_main(
            capsysbinary, ["evaluate", "--hypotheses", hypotheses, "--references", references]
        )
        assert status == 2 and lines == [], errors
        assert errors.startswith("keras-transformer: error: ") and message in errors, errors
        assert errors.count("\n") == 1


def test_model_translates_sources(tmp_path, capsysbinary, monkeypatch):
    # Any engine, opened by `engines.load_translator` (tested engine by engine in
    # tests/test_engines.py and tests/cli/test_translate.py): here one that upper-cases.
    from keras_transformer import engines

    opened = []

    class Upper:
        def __call__(self, sentences):
            return [sentence.upper() for sentence in sentences]

    def load_translator(path, engine=None):
        opened.append((path, engine))
        return Upper()

    monkeypatch.setattr(engines, "load_translator", load_translator)
    sources = ["hola", "buenos días", "¿dónde está?"] * 3
    references = ["HOLA", "good morning", "¿DÓNDE ESTÁ?"] * 3
    output = tmp_path / "out.en"
    status, lines, errors = run_main(
        capsysbinary,
        [
            "evaluate",
            "--model",
            "runs/mine",
            "--engine",
            "ctranslate2",
            "--batch-size",
            "4",
            "--sources",
            write(tmp_path / "src.es", sources),
            "--references",
            write(tmp_path / "ref.en", references),
            "--output",
            str(output),
            "--json",
            "--metrics",
            "chrf",
        ],
    )
    assert status == 0, errors
    assert opened == [("runs/mine", "ctranslate2")]
    hypotheses = [source.upper() for source in sources]
    assert output.read_text(encoding="utf-8").splitlines() == hypotheses
    result = json.loads("\n".join(lines))
    assert result["scores"] == score_corpus(hypotheses, references, metrics=["chrf"])
    # Progress off a terminal: whole lines, no bar redrawn with carriage returns.
    assert "translating: 3/3 chunks" in errors
    assert "\r" not in errors and "\x1b" not in errors


def test_train_test_split_reports_chrf_with_the_same_code():
    pairs = list(zip(SYSTEM, REFERENCES, strict=True))
    result = evaluate_translations(lambda sources: list(sources), pairs, verbose=False)
    expected = score_corpus(SYSTEM, REFERENCES, metrics=["bleu", "chrf"])
    assert result["test_bleu"] == expected["bleu"]["score"]
    assert result["test_chrf"] == expected["chrf"]["score"]
    assert result["test_signatures"] == {
        name: score["signature"] for name, score in expected.items()
    }


def test_scores_check_their_inputs():
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        score_corpus(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="`metrics` must name some of bleu, chrf, ter"):
        score_corpus(["a"], ["a"], metrics=["meteor"])
    with pytest.raises(ValueError, match="`baseline` must have one translation per hypothesis"):
        paired_bootstrap(["a"], ["a", "b"], ["a"])
    # Several references per sentence: one list per reference set, as sacreBLEU takes them.
    two = score_corpus(["a b c d"], [["a b c d"], ["w x y z"]], metrics=["bleu"])
    assert two["bleu"]["score"] == pytest.approx(100.0) and two["bleu"]["signature"].startswith(
        "nrefs:2|"
    )


def test_run_errors_name_run_and_the_path(files, tmp_path, capsysbinary):
    # `evaluate --run` on a real run: tests/training/test_run_files.py.
    references, system, _ = files
    run = tmp_path / "run"
    run.mkdir()
    untested = str(run)
    for argv, message in [
        (["--run", str(tmp_path / "missing")], f"evaluate --run {tmp_path / 'missing'}: no such directory"),
        (
            ["--run", untested],
            f"evaluate --run {untested}: the run has no test split files (test.src, test.ref "
            f"missing in {untested})",
        ),
        (
            ["--run", untested, "--references", references],
            f"evaluate --run and --references conflict: --run {untested} scores",
        ),
        (["--run", untested, "--sources", system], "evaluate --run and --sources conflict"),
        (["--hypotheses", system], "evaluate needs --references FILE (or --run DIR"),
    ]:
        status, lines, errors = run_main(capsysbinary, ["evaluate", *argv])
        assert status == 2 and lines == [], errors
        assert errors.startswith("keras-transformer: error: ") and message in errors, errors
        assert errors.count("\n") == 1
    write(run / "test.src", ["hola"])
    write(run / "test.ref", ["hello"])
    status, lines, errors = run_main(capsysbinary, ["evaluate", "--run", untested])
    assert status == 2 and lines == []
    assert f"evaluate --run {untested}: the run has no translator ({run / 'translator.keras'}" in errors
    # --run is one system, as --model and --hypotheses are: argparse names both options.
    with pytest.raises(SystemExit):
        run_main(capsysbinary, ["evaluate", "--run", untested, "--model", "m.keras"])
    assert "argument --model: not allowed with argument --run" in capsysbinary.readouterr().err.decode()
