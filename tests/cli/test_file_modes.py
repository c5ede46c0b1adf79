"""What rnnlens writes is readable by the group and others (the umask decides, as for any
program): a model folder is not left 0700 by its temporary folder, nor a file 0600 by its
temporary file; and an interrupted `train` says how to resume."""
from __future__ import annotations

import os
import stat

import pytest

from rnnlens.cli import main

TINY = ["--epochs", "1", "--hidden-size", "4", "--embedding-dim", "4", "--quiet"]


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_model_folder_and_its_files_follow_the_umask(tmp_path, umask_022):
    out = tmp_path / "m"
    assert main(["train", "--out", str(out), *TINY]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    for f in out.iterdir():
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) == 0o644, f.name
    rep = tmp_path / "rep"
    assert main(["report", "--model", str(out), "--out", str(rep), "--quiet", "--samples", "0",
                 "--faithfulness-sentences", "0", "--no-negation"]) == 0
    assert stat.S_IMODE(rep.stat().st_mode) == 0o755
    assert stat.S_IMODE((rep / "report.html").stat().st_mode) == 0o644


def test_repro_tables_follow_the_umask(tmp_path, umask_022):
    out = tmp_path / "r"
    assert main(["repro", "urn-dyck", "--rows", "majority", "--tiny", "--out", str(out), "--quiet"]) == 0
    assert stat.S_IMODE((out / "urn-dyck.md").stat().st_mode) == 0o644


def test_an_interrupted_train_says_how_to_resume(tmp_path, capsys, monkeypatch):
    import rnnlens.cli.train as T

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(T, "_train", interrupt)
    out = tmp_path / "m"
    assert main(["train", "--out", str(out), *TINY]) == 130
    assert capsys.readouterr().err.strip() == "rnnlens: interrupted"       # before any checkpoint: no hint
    _a_checkpoint(out)
    assert main(["train", "--out", str(out), *TINY]) == 130
    err = capsys.readouterr().err.strip()
    assert err == f"rnnlens: interrupted; continue from the last checkpoint with: rnnlens train --resume {out}"


def _a_checkpoint(out):
    from rnnlens.train.resume import partial_dir

    (partial_dir(out) / "checkpoints").mkdir(parents=True)
    (partial_dir(out) / "checkpoints" / "step-000000001-0123456789abcdef.safetensors").write_bytes(b"x")


def test_sigterm_stops_train_as_an_interrupt_does(tmp_path, capsys, monkeypatch):
    """`kill` (SIGTERM) mid-training: the resume hint, exit code 143, and the process's own
    SIGTERM handler put back afterwards."""
    import os
    import signal

    import rnnlens.cli.train as T

    def terminated(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the command")
    monkeypatch.setattr(T, "_train", terminated)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "m"
    _a_checkpoint(out)
    assert main(["train", "--out", str(out), *TINY]) == 143
    err = capsys.readouterr().err.strip()
    assert err == f"rnnlens: stopped (SIGTERM); continue from the last checkpoint with: rnnlens train --resume {out}"
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_resume_hint_is_a_command_that_runs_as_printed(tmp_path, capsys, monkeypatch):
    """An OUT with a space is quoted for the shell; a run that was replacing an existing OUT
    (--force) is continued with --force, or its resume would refuse the OUT still there."""
    import rnnlens.cli.train as T

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(T, "_train", interrupt)
    out = tmp_path / "my run"
    _a_checkpoint(out)
    assert main(["train", "--out", str(out), *TINY]) == 130
    assert capsys.readouterr().err.strip().endswith(f"rnnlens train --resume '{out}'")
    out.mkdir()                                   # the finished run the interrupted one replaces
    assert main(["train", "--out", str(out), "--force", *TINY]) == 130
    assert capsys.readouterr().err.strip().endswith(f"rnnlens train --resume '{out}' --force")


def test_an_interrupted_repro_says_the_same_command_continues(tmp_path, capsys, monkeypatch):
    import rnnlens.repro.command as C

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(C, "_run", interrupt)
    argv = ["repro", "urn-dyck", "--tiny", "--out", str(tmp_path / "r"), "--results", str(tmp_path / "rec")]
    assert main(argv) == 130
    assert capsys.readouterr().err.strip() == ("rnnlens: interrupted; the same repro command continues each "
                                               "unfinished run from its last checkpoint")
