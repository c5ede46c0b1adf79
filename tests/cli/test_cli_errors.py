"""Bad numbers on the command line, an output that is a folder, and a closed stdout pipe:
one line on stderr and exit code 2 for the first two, a quiet end for the third."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, run_cli
from rnnlens.cli import main

PIPE_CLOSED = 141            # 128 + SIGPIPE: what the shell reports for `cat big | head -1`
TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1", "--quiet"]


run = run_cli


def assert_one_line(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]


M = "no-such-model"          # every case below is refused before the model is read
BAD_FLAGS = [
    (["explain", "--model", M, "good", "--top", "-3"], "--top must be >= 1"),
    (["explain", "--model", M, "good", "--top", "0"], "--top must be >= 1"),
    (["explain", "--model", M, "good", "--top", "two"], "--top must be an integer"),
    (["explain", "--model", M, "good", "--max-n", "0"], "--max-n must be >= 1"),
    (["explain", "--model", M, "good", "--max-n", "-2"], "--max-n must be >= 1"),
    (["wfsa", "--model", M, "--text", "a", "--dim", "-1"], "--dim must be >= 0"),
    (["wfsa", "--model", M, "--text", "a", "--dim", "0", "--top", "0"], "--top must be >= 1"),
    (["faithfulness", "--model", M, "--sentences", "0"], "--sentences must be >= 1"),
    (["faithfulness", "--model", M, "--max-k", "0"], "--max-k must be >= 1"),
    (["faithfulness", "--model", M, "--seed", "-1"], "--seed must be in [0, 4294967295]"),
    (["report", "--model", M, "--out", "r", "--samples", "-1"], "--samples must be >= 0"),
    (["report", "--model", M, "--out", "r", "--faithfulness-sentences", "-5"], "--faithfulness-sentences must be >= 0"),
    (["unitary", "--model", M, "--dims", "0"], "--dims must be >= 1"),
    (["attention", "--model", M, "--data", "test", "--samples", "-1"], "--samples must be >= 0"),
    (["attention", "--model", M, "--data", "test", "--min-distance", "0"], "--min-distance must be >= 1"),
    (["attention", "--model", M, "--data", "test", "--max-sentences", "-1"], "--max-sentences must be >= 1"),
    (["attention", "--model", M, "--data", "test", "--max-sentences", "0"], "--max-sentences must be >= 1"),
    (["attention", "--model", M, "--data", "test", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["complete", "--model", M, "--questions", "q", "--show", "-1"], "--show must be >= 0"),
    (["complete", "--model", M, "--questions", "q", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["negation", "--model", M, "--ratio", "0"], "--ratio must be a finite number > 0"),
    (["negation", "--model", M, "--ratio", "inf"], "--ratio must be a finite number > 0"),
    (["negation", "--model", M, "--min-count", "-1"], "--min-count must be >= 0"),
    (["negation", "--model", M, "--lexicon-threshold", "nan"], "--lexicon-threshold must be a finite number >= 0"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--dim", "0"], "--dim must be >= 1"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--window", "0"], "--window must be >= 1"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--threads", "0"], "--threads must be in [1, 4096]"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--std", "inf"], "--std must be a finite number > 0"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--seed", "-1"], "--seed must be in [0, 4294967295]"),
    (["bench", "--hidden", "0"], "--hidden must be >= 1"),
    (["bench", "--batch", "-4"], "--batch must be >= 1"),
    (["bench", "--length", "0"], "--length must be >= 1"),
    (["bench", "--steps", "0"], "--steps must be >= 1"),
    (["bench", "--all", "--threads", "0"], "--threads must be in [1, 4096]"),
    (["bench", "--all", "--time-limit", "nan"], "--time-limit must be a finite number > 0"),
    (["bench", "--out", "b.md"], "--out: an option of --all"),
    (["bench", "--quick", "--device", "cuda"], "--quick, --device: options of --all"),
    (["demo", "--epochs", "0"], "--epochs must be >= 1"),
    (["demo", "--seed", "-2"], "--seed must be in [0, 4294967295]"),
    (["repro", "t", "--out", "o", "--threads", "0"], "--threads must be in [1, 4096]"),
    (["repro", "t", "--out", "o", "--seeds", "0"], "--seeds must be >= 1"),
    # numbers past what any run takes: a clear error, not an overflow, a thread storm or a hang
    (["faithfulness", "--model", M, "--seed", str(2**63 - 1)], "--seed must be in [0, 4294967295]"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--seed", "9" * 23], "--seed must be in"),
    (["vectors", "--corpus", "subj", "--data-dir", ".", "--out", "v.txt", "--threads", "9" * 20], "--threads must be in"),
    (["eval", "--model", M, "--threads", "30000"], "--threads must be in [1, 4096]"),
    (["predict", "--model", M, "x.txt", "--threads", "9" * 20], "--threads must be in [1, 4096]"),
    (["bench", "--cell", "bogus"], "unknown cell 'bogus'"),
    (["bench", "--cell", "mm", "--hidden", "8", "--steps", "1"], "mm needs hidden_size = d*d"),
    (["bench", "--all", "--device", "bogus"], "--device bogus"),
]


@pytest.mark.parametrize("argv, needle", BAD_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_numeric_flag_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert_one_line(*run(capsys, *argv)[::2], needle)
    assert list(tmp_path.iterdir()) == []                   # nothing written


@pytest.mark.parametrize("flags, field", [
    (["--lr", "inf"], "train.lr"), (["--lr", "nan"], "train.lr"), (["--lr", "-1"], "train.lr"),
    (["--lr", "0"], "train.lr"), (["--dropout", "1.5"], "model.dropout"),
    (["--embedding-dropout", "-0.1"], "model.embedding_dropout"), (["--clip", "inf"], "train.clip"),
    (["--weight-decay", "-1"], "train.weight_decay"), (["--lr-decay", "1.5"], "train.lr_decay"),
    (["--hidden-size", "abc"], "model.hidden_size must be an integer"),
    (["--hidden-size", "0"], "model.hidden_size must be in [1, 1048576]"), (["--epochs", "0"], "train.epochs"),
    (["--batch-size", "0"], "train.batch_size"), (["--seed", "-1"], "train.seed"),
    (["--bidirectional", "maybe"], "model.bidirectional must be true or false"),
    (["--max-length", "0"], "data.max_length"), (["--time-limit", "inf"], "train.time_limit"),
    (["--forget-bias", "nan", "--cell", "lstm"], "model.forget_bias"),
    (["--adaptive-softmax", "10,x"], "model.adaptive_softmax"),
    (["--hidden-size", "9" * 23], "model.hidden_size must be in [1, 1048576]"),
    (["--layers", "99999999999"], "model.layers must be in [1, 1024]"),
    (["--threads", "30000"], "train.threads must be in [1, 4096]"),
    (["--device", "mps"], "train.device must be cpu or cuda"), (["--device", "meta"], "train.device must be cpu or cuda"),
    (["--cell", "mm", "--hidden-size", "8"], "model.cell mm: mm needs hidden_size = d*d"),
    (["--corpus", "crossserial", "--cell", "urn", "--train-size", "5", "--train-k", "100000"], "data.train_k must be in"),
    (["--tie-weights", "true"], "are for language models"), (["--adaptive-softmax", "10,20"], "are for language models"),
    (["--min-count", "1000000"], "leaves no word of the training data in the vocabulary"),
    # options of another corpus, cell or block are refused, not silently ignored
    (["--train-file", "t.tsv"], "data.train_file: label<TAB>text files are read with data.corpus 'tsv'"),
    (["--corpus", "sst2", "--test-file", "t.tsv"], "corpus 'sst2' reads its own (from data.data_dir)"),
    (["--memory-temporal", "true"], "are for a memory block (model.memory)"),
    (["--memory-bidirectional", "true"], "are for a memory block (model.memory)"),
    (["--heads", "2"], "model.heads is for the transformer"),
])
def test_bad_config_value_names_the_field(tmp_path, capsys, flags, field):
    out = tmp_path / "m"
    assert_one_line(*run(capsys, "train", "--out", out, *TINY, *flags)[::2], field)
    assert list(tmp_path.iterdir()) == []


def test_config_flags_still_parse_their_text(tmp_path, capsys):
    """Flags arrive as text and are converted by the field's type: numbers, true/false, none."""
    out = tmp_path / "m"
    code, _, err = run(capsys, "train", "--out", out, "--embedding-dim", "6", "--hidden-size", "6", "--epochs", "1",
                       "--lr", "0.1", "--clip", "none", "--bidirectional", "yes", "--max-vocab", "100", "--quiet")
    assert code == 0, err
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["model"]["hidden_size"] == 6 and saved["train"]["lr"] == 0.1
    assert saved["train"]["clip"] is None and saved["model"]["bidirectional"] is True


def test_png_that_is_a_folder_or_in_a_missing_folder(tmp_path, capsys):
    assert_one_line(*run(capsys, "explain", "--model", M, "good", "--png", tmp_path, "--force")[::2],
                    "is a folder")
    assert_one_line(*run(capsys, "explain", "--model", M, "good", "--png", tmp_path / "no" / "h.png")[::2],
                    "does not exist")


# --- a closed pipe: `rnnlens ... --json | head -1` -----------------------------------------

RNNLENS = shutil.which("rnnlens", path=str(Path(sys.executable).parent)) or shutil.which("rnnlens")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "model"
    assert main(["train", "--out", str(out), *TINY]) == 0
    return out


def head(argv, lines: int):
    """Run the console command with stdout into a pipe that is closed after reading `lines`
    lines (0: at once, before it writes anything), as `| head -n` does. -> (exit code, stderr)."""
    p = subprocess.Popen([RNNLENS, *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for _ in range(lines):
        p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode("utf-8", "replace")
    p.stderr.close()
    return p.wait(timeout=300), err


def test_closed_pipe_ends_quietly(model_dir):
    long_text = " ".join(["the plot was not dull the acting was good"] * 37)   # 333 tokens: a long JSON
    # (argv, lines read before closing, exit codes allowed): argparse's help swallows the
    # error itself; a pipe closed after a line may have taken all the output already
    cases = [(["train", "--help"], 0, (0, PIPE_CLOSED)),
             (["approx-error", "--model", model_dir, "--json"], 0, (PIPE_CLOSED,)),
             (["eval", "--model", model_dir, "--json"], 0, (PIPE_CLOSED,)),
             (["explain", "--model", model_dir, "--json", long_text], 0, (PIPE_CLOSED,)),
             (["explain", "--model", model_dir, "--json", long_text], 1, (0, PIPE_CLOSED))]
    assert RNNLENS, "the rnnlens console command is installed"
    for argv, lines, codes in cases:
        for attempt in range(3):
            code, err = head(argv, lines)
            print(argv[0], attempt, code, err)
            assert err == "" and code in codes


def test_a_text_is_explained_as_a_sentence_or_refused_and_a_document_needs_file(model_dir, tmp_path, capsys):
    """TEXT is a sentence (every n-gram of it) up to 400 tokens; a longer TEXT is refused with
    the way to explain it as a document (--file), never switched silently to the document view."""
    long_text = " ".join(["good movie"] * 201)                               # 402 tokens
    assert_one_line(*run(capsys, "explain", "--model", model_dir, long_text)[::2], "402 tokens", "--file")
    (tmp_path / "doc.txt").write_text(long_text)
    code, out, err = run(capsys, "explain", "--model", model_dir, "--file", tmp_path / "doc.txt")
    assert code == 0, err
    assert_one_line(*run(capsys, "explain", "--model", model_dir, "good", "--file", tmp_path / "doc.txt")[::2],
                    "not both")
    code, out, err = run(capsys, "explain", "--model", model_dir, "--json", " ".join(["good movie"] * 200))
    assert code == 0 and len(json.loads(out)["tokens"]) == 400


@pytest.mark.parametrize("argv", [
    ["eval", "--model", M, "--threads", "0"],
    ["faithfulness", "--model", M, "--sentences", "0"],
    ["unitary", "--model", M, "--dims", "0"],
    ["report", "--model", M, "--out", "r", "--samples", "-1"],
    ["demo", "--seed", "-1"],
    ["repro", "urn-dyck", "--seeds", "0"],
    ["train", "--out", "m", "--epochs", "x"],
])
def test_a_usage_error_of_any_command_starts_like_every_other_error(argv, capsys, tmp_path, monkeypatch):
    """argparse's own refusals (a number out of range, a choice not offered) read as every
    other error does, `rnnlens: error: ...` on one line, and name the command's help."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert_one_line(code, err, f"(see rnnlens {argv[0]} --help)")
    assert err.startswith("rnnlens: error: "), err
    assert list(tmp_path.iterdir()) == []


def _commands():
    import argparse

    from rnnlens.cli import build_parser

    parser = build_parser()
    return sorted(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


@pytest.mark.parametrize("command", _commands())
def test_an_unknown_flag_of_every_command_names_that_commands_help(command, capsys, tmp_path, monkeypatch):
    """A misspelt flag is refused on one line that points at the command's own help, not at
    the top-level one (`rnnlens explain --txet ...` -> see rnnlens explain --help)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, command, "--no-such-flag", "1")
    assert_one_line(code, err, f"(see rnnlens {command} --help)")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_flag_after_every_required_one_is_named(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "explain", "--model", M, "--textt", "good")
    assert_one_line(code, err, "unrecognized arguments: --textt (see rnnlens explain --help)")
