"""Output paths that would destroy something are refused before any work, in one line with
exit code 2: the current folder or one above it (`--out .`, `..`, an empty name), an output
folder that --force would replace inside a folder the command reads (a dataset's), an output
file that is a file the command reads or an existing file of its model folder, and names
the system cannot take (too long)."""
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.support import TINY, assert_clean_error, run_cli, untrained_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.manual_seed(0)
    return untrained_checkpoint(tmp_path_factory.mktemp("model") / "clf")


@pytest.fixture
def in_folder(tmp_path):
    """Run inside tmp_path/work/child (restored after)."""
    here = Path.cwd()
    child = tmp_path / "work" / "child"
    child.mkdir(parents=True)
    os.chdir(child)
    try:
        yield child
    finally:
        os.chdir(here)


@pytest.mark.parametrize("out", [".", "..", "", "./"])
@pytest.mark.parametrize("command", ["report", "unitary", "negation", "train", "demo", "explain"])
def test_the_current_folder_or_above_is_never_an_output(model, in_folder, capsys, out, command):
    lines = in_folder.parent.parent / "lines.txt"
    lines.write_text("good movie\n")
    argv = {"report": ["report", "--model", model, "--quiet"], "unitary": ["unitary", "--model", model],
            "negation": ["negation", "--model", model, "--quiet"], "train": ["train", *TINY],
            "demo": ["demo"], "explain": ["explain", "--model", model, "--lines", lines]}[command]
    before = sorted(os.listdir(in_folder.parent))
    code, _, err = run_cli(capsys, *argv, "--out", out, "--force")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(in_folder.parent)) == before and in_folder.is_dir()
    assert not os.listdir(in_folder)            # no temporary folder left behind


def test_resume_of_the_current_folder_is_refused(in_folder, capsys):
    code, _, err = run_cli(capsys, "train", "--resume", ".")
    assert_clean_error(code, err, "current folder")


def test_an_output_folder_inside_the_data_folder_is_not_replaced(tmp_path, capsys):
    data = tmp_path / "data" / "ptb"
    data.mkdir(parents=True)
    text = "\n".join(["the cat sat on the mat", "a dog ran in the park"] * 20)
    for split in ("train", "valid", "test"):
        (data / f"ptb.{split}.txt").write_text(text)
    code, _, err = run_cli(capsys, "train", "--data", "ptb", "--data-dir", tmp_path / "data", "--out", data,
                           "--force", "--bptt", "5", "--batch-size", "2", *TINY)
    assert_clean_error(code, err, "inside", "choose an --out outside it")
    assert sorted(p.name for p in data.iterdir()) == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]


def test_an_output_file_that_is_read_is_refused(model, tmp_path, capsys):
    texts = tmp_path / "in.txt"
    texts.write_text("good movie\nbad film\n")
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    saved = {p.name: p.read_bytes() for p in copy.iterdir()}
    cases = [["predict", "--model", copy, texts, "--out", texts],
             ["predict", "--model", copy, texts, "--out", copy / "config.json"],
             ["eval", "--model", copy, "--png", copy / "model.safetensors"],
             ["faithfulness", "--model", copy, "--json", copy / "vocab.json", "--sentences", "2"]]
    for argv in cases:
        code, _, err = run_cli(capsys, *argv, "--force")
        assert_clean_error(code, err, "which this command reads")
    assert texts.read_text() == "good movie\nbad film\n"
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == saved
    # a new file in the model's folder is not one it reads
    code, out, err = run_cli(capsys, "predict", "--model", copy, texts, "--out", copy / "new.jsonl")
    assert code == 0, err


@pytest.mark.parametrize("argv", [
    ["predict", "--model", "{m}", "{t}", "--out", "{long}"],
    ["predict", "--model", "{long}", "{t}"],
    ["eval", "--model", "{m}", "--png", "{long}.png"],
    ["eval", "--model", "{m}", "--test-file", "{long}"],
    ["report", "--model", "{m}", "--out", "{long}"],
    ["unitary", "--model", "{long}"],
    ["faithfulness", "--model", "{m}", "--json", "{long}"],
])
def test_names_too_long_for_the_system_are_one_line_errors(model, tmp_path, capsys, argv):
    texts = tmp_path / "in.txt"
    texts.write_text("good movie\n")
    long = str(tmp_path / ("x" * 300))
    code, _, err = run_cli(capsys, *(a.format(m=model, t=texts, long=long) for a in argv))
    assert_clean_error(code, err, "file name too long")


@pytest.mark.parametrize("argv, needle", [
    (["eval", "--model", "{m}", "--test-file", ""], "empty name"),
    (["negation", "--model", "{m}", "--out", "", "--quiet"], "empty name"),
    (["predict", "--model", "{m}", "{t}", "--out", ""], "--out"),
])
def test_an_empty_name_is_not_taken_as_no_name(model, tmp_path, capsys, argv, needle):
    texts = tmp_path / "in.txt"
    texts.write_text("good movie\n")
    code, _, err = run_cli(capsys, *(a.format(m=model, t=texts) for a in argv))
    assert_clean_error(code, err, needle)


def test_explain_png_of_a_bidirectional_model_draws_both_directions(tmp_path, capsys):
    """The forward heatmap in the named file, the backward one beside it (NAME-backward.png),
    as the report draws them; a one-direction model writes only the named file."""
    torch.manual_seed(0)
    bi = untrained_checkpoint(tmp_path / "bi", bidirectional=True)
    png = tmp_path / "heat.png"
    code, out, err = run_cli(capsys, "explain", "--model", bi, "good movie", "--png", png)
    assert code == 0, err
    back = tmp_path / "heat-backward.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and back.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {png}" in out and f"wrote {back}" in out
    # the backward file is checked like the named one: it exists now, so without --force ...
    png.unlink()
    code, _, err = run_cli(capsys, "explain", "--model", bi, "good movie", "--png", png)
    assert code == 2 and "Traceback" not in err
    assert "heat-backward.png exists; use --force" in err.strip().splitlines()[-1]   # after the <unk> warning
    assert not png.exists()
    one = untrained_checkpoint(tmp_path / "one")
    code, out, err = run_cli(capsys, "explain", "--model", one, "good movie", "--png", tmp_path / "one.png")
    assert code == 0 and not (tmp_path / "one-backward.png").exists(), err
