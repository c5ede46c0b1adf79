"""Inputs without a bound, user text that would drive the terminal, and settings that would
change nothing: each is one line on stderr and exit code 2 (or, for a setting that is merely
idle, a note), never a read that fills the memory, raw control characters on the screen, or
work done before an output that cannot be written is refused."""
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from rnnlens.app.predict import _bounded_lines, read_texts
from rnnlens.cli.explain import _read_document
from rnnlens.data.tokenize import shown
from rnnlens.errors import RnnlensError
from tests.support import assert_clean_error, untrained_checkpoint
from tests.support import run_cli as run

ESC = "\x1b"
DEV_ZERO = Path("/dev/zero")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return untrained_checkpoint(tmp_path_factory.mktemp("bounds") / "m")


# --- shown: what a terminal is given ---------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("plain words", "plain words"),
    ("caf\u00e9 \u4e2d\u6587", "caf\u00e9 \u4e2d\u6587"),         # printable non-ASCII passes
    ("a\x1b[31mred", "a\\x1b[31mred"),                            # ESC: the colour sequence is inert
    ("nul\x00bell\x07", "nul\\x00bell\\x07"),
    ("zero\u200bwidth", "zero\\u200bwidth"),                      # a format character
    ("line\u2028sep", "line\\u2028sep"),                          # splits lines in some terminals
    ("tab\there", "tab\\there"),
    ("\U000e0041tag", "\\U000e0041tag"),                          # a tag character, outside the BMP
])
def test_shown_escapes_what_is_not_printable(text, expected):
    assert shown(text) == expected


def test_shown_keeps_the_characters_asked_for():
    assert shown("one\ntwo\x1b", keep="\n") == "one\ntwo\\x1b"
    assert shown("one\ntwo") == "one\\ntwo"


def test_explain_prints_no_control_character(capsys, model):
    code, out, err = run(capsys, "explain", "--model", model, f"the {ESC}[2J film was good")
    assert code == 0, err
    assert ESC not in out and ESC not in err
    assert "\\x1b" in out and "\\x1b" in err       # the table and the unknown-word warning show it escaped


def test_explain_document_prints_no_control_character(capsys, model, tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text(f"the film {ESC}]0;title{ESC}\\ was good . " * 30, encoding="utf-8")
    code, out, err = run(capsys, "explain", "--model", model, "--file", doc)
    assert code == 0, err
    assert ESC not in out and ESC not in err


# --- bounded reads -----------------------------------------------------------------------------

def test_bounded_lines_refuses_a_line_past_the_limit():
    assert list(_bounded_lines(io.StringIO("short\nlines\n"), "f", limit=10)) == ["short\n", "lines\n"]
    assert list(_bounded_lines(io.StringIO("exactly10!"), "f", limit=10)) == ["exactly10!"]
    with pytest.raises(RnnlensError, match=r"f:2: a line longer than"):
        list(_bounded_lines(io.StringIO("ok\n" + "x" * 11 + "\n"), "f", limit=10))


def test_read_texts_reads_files_through_the_bound(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("one\n\ntwo\n", encoding="utf-8")
    with open(p, encoding="utf-8") as f:
        assert list(read_texts(f, "lines", str(p))) == [(1, "one"), (3, "two")]


def test_read_document_refuses_past_the_limit(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("a" * 11, encoding="utf-8")
    assert _read_document(str(p), limit=11) == "a" * 11
    with pytest.raises(RnnlensError, match="longer than"):
        _read_document(str(p), limit=10)


@pytest.mark.skipif(not DEV_ZERO.exists(), reason="no /dev/zero here")
@pytest.mark.parametrize("argv, needle", [
    (["explain", "--file", "/dev/zero"], "longer than 64 MiB"),
    (["predict", "/dev/zero"], "/dev/zero:1: a line longer than 16 MiB"),
    (["explain", "--lines", "/dev/zero", "--out", "{tmp}/x"], "/dev/zero:1: a line longer than 16 MiB"),
    (["eval", "--test-file", "/dev/zero"], "not a regular file"),
])
def test_an_endless_input_is_refused(capsys, model, tmp_path, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = run(capsys, argv[0], "--model", model, *argv[1:])
    assert_clean_error(code, err, needle)
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(not DEV_ZERO.exists(), reason="no /dev/zero here")
def test_an_endless_training_file_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "train", "--corpus", "tsv", "--train-file", "/dev/zero", "--epochs", "1",
                       "--out", tmp_path / "o")
    assert_clean_error(code, err, "data file /dev/zero is not a regular file")
    assert not (tmp_path / "o").exists()


# --- settings that would change nothing --------------------------------------------------------

def test_budget_needs_a_config(capsys, tmp_path):
    code, _, err = run(capsys, "train", "--budget", "quick", "--epochs", "1", "--out", tmp_path / "o")
    assert_clean_error(code, err, "--budget quick names a budget of a --config file")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("task", ["dyck", "crossserial", "agreement"])
def test_an_own_corpus_task_refuses_the_polarity_corpus(capsys, tmp_path, task):
    code, _, err = run(capsys, "train", "--corpus", "polarity", "--task", task, "--epochs", "1",
                       "--out", tmp_path / "o")
    assert_clean_error(code, err, f"--task {task} generates its own data")
    assert not (tmp_path / "o").exists()


def test_layer_dropout_with_one_layer_is_noted(capsys, tmp_path):
    code, _, err = run(capsys, "train", "--layer-dropout", "0.3", "--epochs", "1", "--embedding-dim", "8",
                       "--hidden-size", "8", "--quiet", "--out", tmp_path / "o")
    assert code == 0, err
    assert "note: model.layer_dropout 0.3 acts between stacked layers" in err
    code, _, err = run(capsys, "train", "--layer-dropout", "0.3", "--layers", "2", "--epochs", "1",
                       "--embedding-dim", "8", "--hidden-size", "8", "--quiet", "--out", tmp_path / "o2")
    assert code == 0, err
    assert "layer_dropout" not in err


def test_max_n_is_for_documents(capsys, model, tmp_path):
    code, _, err = run(capsys, "explain", "--model", model, "--max-n", "3", "the film was good")
    assert_clean_error(code, err, "--max-n limits a document's n-grams")
    lines = tmp_path / "l.txt"
    lines.write_text("the film was good\n", encoding="utf-8")
    code, _, err = run(capsys, "explain", "--model", model, "--max-n", "3", "--lines", lines, "--out", tmp_path / "o")
    assert_clean_error(code, err, "--max-n limits a document's n-grams")
    assert not (tmp_path / "o").exists()
    doc = tmp_path / "d.txt"
    doc.write_text("the film was not good . " * 20, encoding="utf-8")
    code, out, err = run(capsys, "explain", "--model", model, "--max-n", "3", "--file", doc, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["max_n"] == 3 and all(r["end"] - r["start"] < 3 for r in res["ngrams"])


@pytest.mark.parametrize("flag", [["--tiny"], ["--seeds", "3"], ["--out", "x"], ["--rows", "GRU"]])
def test_repro_list_refuses_flags_it_does_not_read(capsys, flag):
    code, _, err = run(capsys, "repro", "--list", *flag)
    assert_clean_error(code, err, "--list lists the tables", flag[0])


# --- outputs that cannot be written, refused before the work -----------------------------------

@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
@pytest.mark.parametrize("argv", [
    ["train", "--epochs", "1", "--out", "/proc/rnnlens-out"],
    ["report", "--model", "{model}", "--out", "/proc/rnnlens-out"],
    ["negation", "--model", "{model}", "--out", "/proc/rnnlens-out"],
    ["unitary", "--model", "{model}", "--out", "/proc/rnnlens-out"],
    ["demo", "--out", "/proc/rnnlens-out"],
    ["explain", "--model", "{model}", "--lines", "{lines}", "--out", "/proc/rnnlens-out"],
])
def test_a_folder_where_no_file_can_be_made_is_refused_first(capsys, model, tmp_path, argv):
    lines = tmp_path / "lines.txt"
    lines.write_text("the film was good\n", encoding="utf-8")
    argv = [a.replace("{model}", str(model)).replace("{lines}", str(lines)) for a in argv]
    code, _, err = run(capsys, *argv)
    assert_clean_error(code, err, "/proc")
    assert "does not exist" not in err
    assert "report:" not in err                   # refused before any of the report's work


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_folder_is_refused_first(capsys, model, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = run(capsys, "report", "--model", model, "--out", ro / "r")
        assert_clean_error(code, err, "cannot write in folder")
    finally:
        ro.chmod(0o755)


# --- checkpoint configs ----------------------------------------------------------------------

@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.__setitem__("labels", None), "'labels' is null, but a 'classify' model"),
    (lambda m: m["config"].__setitem__("version", "1"), "config version '1' is not supported"),
    (lambda m: m["config"].__setitem__("version", True), "config version True is not supported"),
])
def test_checkpoint_config_errors_say_what_is_wrong(capsys, model, tmp_path, edit, needle):
    m = tmp_path / "m"
    shutil.copytree(model, m)
    meta = json.loads((m / "config.json").read_text(encoding="utf-8"))
    edit(meta)
    (m / "config.json").write_text(json.dumps(meta), encoding="utf-8")
    code, _, err = run(capsys, "explain", "--model", m, "good")
    assert_clean_error(code, err, needle)


def test_bptt_on_a_model_that_does_not_read_it_is_noted(capsys, tmp_path):
    code, _, err = run(capsys, "train", "--bptt", "20", "--epochs", "1", "--embedding-dim", "8",
                       "--hidden-size", "8", "--quiet", "--out", tmp_path / "o")
    assert code == 0, err
    assert "note: --bptt cuts the token stream of a language model" in err and "(polarity) is not a token stream" in err
    (tmp_path / "ptb").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "ptb" / f"ptb.{split}.txt").write_text("the cat sat on the mat\na dog ran\n" * 20)
    code, _, err = run(capsys, "train", "--data", "ptb", "--data-dir", tmp_path, "--bptt", "5", "--batch-size", "4",
                       "--epochs", "1", "--embedding-dim", "8", "--hidden-size", "8", "--quiet",
                       "--out", tmp_path / "lm")
    assert code == 0, err
    assert "--bptt" not in err
