"""An outside user's input that once gave a wrong answer, a misleading error or lost data:
an output folder that is (or holds) what the command reads, replaced with --force; vocabulary
tokens the tokenizer would split (<eos>) as URN items; a tagger's labels in the BIO scheme;
flags that --lines ignored; a folder where a file goes and a file where a folder goes; progress
lines around a one-line error. Untrained checkpoints: no training time."""
import hashlib
import json
from pathlib import Path

import pytest

from tests.support import run_cli as run
from tests.support import untrained_checkpoint


def assert_clean_error(code, err, *needles):
    """Exit code 2 and one line on stderr holding every needle."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rnnlens: error: "), (code, err)
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    return {"clf": untrained_checkpoint(root / "clf"),
            "urn": untrained_checkpoint(root / "urn", cell="urn", embedding_dim=6, hidden_size=4),
            "urn-lm": untrained_checkpoint(root / "urn-lm", task="lm", labels=None, data={"sentence_level": True},
                                           cell="urn", embedding_dim=6, hidden_size=4),
            "memory-lm": untrained_checkpoint(root / "memory-lm", task="lm", labels=None,
                                              data={"sentence_level": True}, cell="lstm", memory="rm", memory_size=3),
            "tagger": untrained_checkpoint(root / "tagger", task="tag", labels=("O", "B-PER", "I-PER"))}


# --- an output folder that --force would replace must not be (or hold) an input --------------

def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _file_in_out(tmp, name, text):
    d = tmp / "work"
    d.mkdir()
    (d / name).write_text(text)
    return d


TSV = "positive\tgood film\nnegative\tbad film\n"
# name -> (models, tmp) -> (argv, the folder given as --out, which holds what the command reads)
CASES = {
    "report-model": lambda m, t: (lambda d: (["report", "--model", d, "--out", d, "--no-negation", "--samples", "1",
                                              "--faithfulness-sentences", "0", "--quiet"], d))(
        _copy(m["clf"], t / "model")),
    "unitary-model": lambda m, t: (lambda d: (["unitary", "--model", d, "--words", "good", "--out", d], d))(
        _copy(m["urn"], t / "model")),
    "attention-model": lambda m, t: (lambda d: (["attention", "--model", d, "--data", d / "s.txt", "--out", d], d))(
        _with_file(_copy(m["memory-lm"], t / "model"), "s.txt", "the film was good\n")),
    "negation-adjectives": lambda m, t: (lambda d: (["negation", "--model", m["clf"], "--adjectives", d / "a.json",
                                                     "--out", d], d))(
        _file_in_out(t, "a.json", json.dumps({"positive": ["good"], "negative": ["bad"]}))),
    "negation-model": lambda m, t: (lambda d: (["negation", "--model", d / "model", "--adjectives", d / "a.json",
                                                "--out", d], d))(
        _with_model(_file_in_out(t, "a.json", json.dumps({"positive": ["good"], "negative": ["bad"]})), m["clf"])),
    "explain-lines": lambda m, t: (lambda d: (["explain", "--model", m["clf"], "--lines", d / "in.txt", "--out", d], d))(
        _file_in_out(t, "in.txt", "good film\n")),
    "train-data": lambda m, t: (lambda d: (["train", "--corpus", "tsv", "--train-file", d / "train.tsv",
                                            "--dev-file", d / "train.tsv", "--test-file", d / "train.tsv",
                                            "--embedding-dim", "2", "--hidden-size", "2", "--epochs", "1", "--quiet",
                                            "--out", d], d))(
        _file_in_out(t, "train.tsv", TSV)),
}


def _with_file(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text)
    return d


def _with_model(d: Path, model: Path) -> Path:
    _copy(model, d / "model")
    return d


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_folder_that_holds_an_input_is_never_replaced(models, tmp_path, capsys, case):
    argv, out = CASES[case](models, tmp_path)
    before = _digest(out)
    code, _, err = run(capsys, *argv, "--force", "--threads", "1")
    assert_clean_error(code, err, "which this command reads", "choose another --out")
    assert _digest(out) == before                      # the model / data is still there, untouched


def test_an_output_folder_beside_the_model_is_fine(models, tmp_path, capsys):
    code, _, err = run(capsys, "unitary", "--model", models["urn"], "--words", "good", "--out", tmp_path / "u",
                       "--threads", "1")
    assert code == 0, err
    assert (tmp_path / "u" / "unitary.json").is_file()


# --- URN items that are vocabulary tokens the tokenizer would split -------------------------------

@pytest.mark.parametrize("words", [[], ["<eos>"], ["the <eos>", "The film"]])
def test_unitary_reads_vocabulary_tokens_whole(models, capsys, words):
    """A language model's vocabulary holds <eos> (among its most frequent tokens, so among the
    default items); the tokenizer alone would make it '<', 'eos', '>'."""
    extra = ["--words", *words] if words else []
    code, out, err = run(capsys, "unitary", "--model", models["urn-lm"], *extra, "--json", "--threads", "1")
    assert code == 0, err
    names = [r["name"] for r in json.loads(out)["items"]]
    assert "<eos>" in names or "the <eos>" in names


# --- a tagger whose labels have no E-/S- tags (BIO) ---------------------------------------------

def test_eval_test_file_of_a_bio_tagger(models, tmp_path, capsys):
    (tmp_path / "t.conll").write_text("John NNP B-NP I-PER\nSmith NNP I-NP I-PER\nwas VBD B-VP O\n\n"
                                      "good JJ B-ADJP O\n")
    code, out, err = run(capsys, "eval", "--model", models["tagger"], "--test-file", tmp_path / "t.conll", "--json",
                         "--threads", "1")
    assert code == 0, err
    assert "loss" in json.loads(out)


# --- explain --lines: the flags of one text are refused, not ignored -------------------------------

@pytest.mark.parametrize("flag", ["--png", "--json"])
def test_explain_lines_refuses_the_flags_of_one_text(models, tmp_path, capsys, flag):
    (tmp_path / "in.txt").write_text("good film\n")
    extra = [flag, tmp_path / "h.png"] if flag == "--png" else [flag]
    code, _, err = run(capsys, "explain", "--model", models["clf"], "--lines", tmp_path / "in.txt",
                       "--out", tmp_path / "ex", *extra)
    assert_clean_error(code, err, flag, "--lines")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


# --- a folder where a file goes, a file where a folder goes ---------------------------------------

FOLDER_AS_FILE = {
    "eval --test-file": lambda m, d: ["eval", "--model", m["clf"], "--test-file", d],
    "complete --questions": lambda m, d: ["complete", "--model", m["memory-lm"], "--questions", d],
    "attention --train": lambda m, d: ["attention", "--model", m["memory-lm"], "--data", d / "s.txt", "--train", d],
    "explain --file": lambda m, d: ["explain", "--model", m["clf"], "--file", d],
    "negation --adjectives": lambda m, d: ["negation", "--model", m["clf"], "--adjectives", d],
}


@pytest.mark.parametrize("case", list(FOLDER_AS_FILE))
def test_a_folder_given_as_a_file_says_so(models, tmp_path, capsys, case):
    (tmp_path / "s.txt").write_text("the film was good\n")
    code, _, err = run(capsys, *FOLDER_AS_FILE[case](models, tmp_path), "--threads", "1")
    assert_clean_error(code, err, str(tmp_path))
    assert "does not exist" not in err and "Errno" not in err
    assert "folder" in err or "directory" in err.lower()


@pytest.mark.parametrize("command", ["eval", "approx-error", "vectors"])
def test_a_file_given_as_the_data_folder_says_so(tmp_path, capsys, command):
    (tmp_path / "f.txt").write_text("x\n")
    model = untrained_checkpoint(tmp_path / "m", task="lm", labels=None, data={"corpus": "ptb", "sentence_level": True})
    argv = (["vectors", "--corpus", "ptb", "--out", tmp_path / "v.txt"] if command == "vectors"
            else [command, "--model", model])
    code, _, err = run(capsys, *argv, "--data-dir", tmp_path / "f.txt")
    assert_clean_error(code, err, f"data directory {tmp_path / 'f.txt'} is a file, not a folder")


def test_explain_file_that_is_not_utf8_is_named_so(models, tmp_path, capsys):
    (tmp_path / "d.txt").write_bytes(b"good \xff film\n")
    code, _, err = run(capsys, "explain", "--model", models["clf"], "--file", tmp_path / "d.txt")
    assert_clean_error(code, err, "is not UTF-8 text")


# --- progress lines do not surround a one-model error -----------------------------------------

def test_negation_of_one_model_fails_in_one_line(models, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"positive": ["zzz"], "negative": ["qqq"]}))
    code, _, err = run(capsys, "negation", "--model", models["clf"], "--adjectives", tmp_path / "a.json")
    assert_clean_error(code, err, "none of the adjectives is in the model's vocabulary")


def test_negation_quiet_has_no_progress_lines(models, tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"positive": ["good"], "negative": ["bad"]}))
    code, _, err = run(capsys, "negation", "--model", models["clf"], "--model", models["clf"],
                       "--adjectives", tmp_path / "a.json", "--quiet")
    assert code == 0 and err == "", err


def test_eval_an_empty_split_name_is_refused(models, capsys):
    """--split "" is not the default split: it names none, and says so."""
    code, out, err = run(capsys, "eval", "--model", models["clf"], "--split", "")
    assert_clean_error(code, err, "split ''")


def test_bench_out_replaces_only_a_report_of_the_suite(tmp_path, capsys):
    """bench --all --out remakes its report in place, but refuses to overwrite any other file
    (unless --force), before measuring anything."""
    from rnnlens.bench import REPORT_HEADER
    from rnnlens.cli.bench import _check_replaces_a_report

    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    code, out, err = run(capsys, "bench", "--all", "--quick", "--out", notes)
    assert_clean_error(code, err, "not a benchmark report", "--force")
    assert notes.read_text() == "my notes\n"
    report = tmp_path / "RESULTS.md"
    report.write_text(REPORT_HEADER + " (quick: smoke sizes, the ratios mean nothing)\n\nold\n")
    _check_replaces_a_report(report, force=False)            # an earlier report: replaced, no error
    _check_replaces_a_report(notes, force=True)
