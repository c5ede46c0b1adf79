"""One writer per output: a second `rnnlens train --out SAME` (plain, --resume or --force)
stops with one line naming the live run; a killed run leaves no stale lock; a full disk
ends with one line and the last good checkpoint intact; damaged checkpoints are kept."""
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support import REPO, run_cli
from rnnlens.errors import RnnlensError
from rnnlens.train import resume
from rnnlens.train.checkpoint import output_dir
from rnnlens.train.resume import Checkpoints, partial_dir, read_checkpoint

FLAGS = ["--epochs", "2", "--hidden-size", "8", "--embedding-dim", "8", "--threads", "1", "--quiet",
         "--checkpoint-every", "2"]
FILES = ["config.json", "metrics.jsonl", "model.safetensors", "vocab.json"]

# `rnnlens` that stops at its PAUSE_AT-th training step, touches $READY and waits for $GO to
# exist: a live run for as long as a test needs, without timing.
PAUSER = """
import os, sys, time
from pathlib import Path
from rnnlens.models import RNNModel
from rnnlens.cli import main
at, calls, loss = int(os.environ["PAUSE_AT"]), [0], RNNModel.loss
def pausing_loss(self, out, batch):
    if self.training:
        calls[0] += 1
        if calls[0] == at:
            Path(os.environ["READY"]).touch()
            while not Path(os.environ["GO"]).exists():
                time.sleep(0.02)
    return loss(self, out, batch)
RNNModel.loss = pausing_loss
sys.exit(main(sys.argv[1:]))
"""


def start_paused(tmp_path, *argv, at=5):
    ready, go = tmp_path / "ready", tmp_path / "go"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PAUSE_AT": str(at), "READY": str(ready), "GO": str(go)}
    p = subprocess.Popen([sys.executable, "-c", PAUSER, *map(str, argv)], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return p, go


run = run_cli


def records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_second_writer_of_a_live_run_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    first, go = start_paused(tmp_path, "train", "--out", out, *FLAGS)
    try:
        ckpts = sorted((partial_dir(out) / "checkpoints").iterdir())
        assert ckpts, "the live run has a checkpoint that --resume could take"
        before = {p.name: p.read_bytes() for p in ckpts}
        live = f"{out} is being written by a live run (pid {first.pid} on {socket.gethostname()}, started "
        for argv in (["--out", out, *FLAGS], ["--resume", out], ["--out", out, "--force", *FLAGS]):
            code, _, err = run(capsys, "train", *argv)
            print(err)
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and live in lines[0], err
            assert "wait for it or choose another --out" in lines[0]
        assert {p.name: p.read_bytes() for p in sorted((partial_dir(out) / "checkpoints").iterdir())} == before
    finally:
        go.touch()
        _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    recs = records(out)
    assert [r.get("epoch") for r in recs] == [1, 2, None] and recs[-1]["split"] == "test"
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "ready", "run"]    # no lock file left


def test_a_killed_run_leaves_no_stale_lock(tmp_path, capsys):
    out = tmp_path / "run"
    first, _ = start_paused(tmp_path, "train", "--out", out, *FLAGS)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    code, stdout, err = run(capsys, "train", "--resume", out)
    assert code == 0, err
    assert "resuming" in stdout and sorted(p.name for p in out.iterdir()) == FILES


def test_output_folders_of_other_commands_are_locked_too(tmp_path):
    """report, negation, demo, repro runs, attention, unitary: all write through output_dir."""
    target = tmp_path / "report"
    script = ("import sys\nfrom rnnlens.train.checkpoint import output_dir\n"
              "with output_dir(sys.argv[1]):\n    print('in', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", script, str(target)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "in\n"
        with pytest.raises(RnnlensError, match=f"being written by a live run \\(pid {holder.pid} on"), \
                output_dir(target, force=True):
            pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert target.is_dir()
    with output_dir(target, force=True) as tmp:          # free again
        (tmp / "x").write_text("x")
    assert [p.name for p in target.iterdir()] == ["x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_full_disk_at_a_checkpoint_keeps_the_last_good_one(tmp_path, capsys, monkeypatch):
    """The second checkpoint write fails with ENOSPC half-way: one line, the first checkpoint
    intact and resumable, no temporary file left."""
    real_open, opened = open, []

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.f, name)

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if str(path).endswith(".safetensors.tmp"):
            opened.append(path)
            if len(opened) == 2:
                return Full(f)
        return f

    monkeypatch.setattr(resume, "open", fake_open, raising=False)
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--out", out, *FLAGS)
    print(err)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    assert "no space left on device while writing" in lines[0].lower()
    assert "the last good checkpoint (step 2" in lines[0] and "is intact" in lines[0]
    assert f"rnnlens train --resume {out}" in lines[0]
    files = sorted((partial_dir(out) / "checkpoints").iterdir())
    assert [p.name.split("-")[1] for p in files] == ["000000002"]         # no .tmp left over
    assert read_checkpoint(files[0]).step == 2
    monkeypatch.undo()
    code, stdout, err = run(capsys, "train", "--resume", out)
    assert code == 0, err
    assert "from step 2 " in stdout and sorted(p.name for p in out.iterdir()) == FILES


def test_full_disk_while_logging_metrics_is_one_line(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    real = Path.open

    def full_open(self, mode="r", *a, **k):
        if self.name == "metrics.jsonl" and "a" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", full_open)
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--out", out, *FLAGS)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "no space left on device while writing" in lines[0].lower() and "metrics.jsonl" in lines[0]
    assert "is intact" in lines[0]
    monkeypatch.undo()
    code, _, err = run(capsys, "train", "--resume", out)
    assert code == 0, err
    assert [r.get("epoch") for r in records(out)] == [1, 2, None]


def test_every_checkpoint_damaged_keeps_them_and_says_so_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    ck = Checkpoints(partial_dir(out), {"train": {}})
    import torch

    for step in (10, 20):
        ck.save({"step": step}, {"w": torch.zeros(3)})
    files = sorted((partial_dir(out) / "checkpoints").iterdir())
    for p in files:
        p.write_bytes(p.read_bytes()[:-1])
    damaged = {p.name: p.read_bytes() for p in files}
    code, _, err = run(capsys, "train", "--resume", out)
    print(err)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "no intact checkpoint" in lines[0]
    assert "kept" in lines[0] and "2 damaged" in lines[0]
    kept = {p.name: p.read_bytes() for p in (partial_dir(out) / "checkpoints").rglob("step-*")}
    assert kept == damaged


def test_full_disk_at_the_final_save_is_one_line_and_resumable(tmp_path, capsys, monkeypatch):
    """safetensors reports a full disk as its own error type, not an OSError."""
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*a, **k):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_model", full)
    out = tmp_path / "run"
    code, _, err = run(capsys, "train", "--out", out, *FLAGS[:-2])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"no space left on device while writing {partial_dir(out) / 'model.safetensors'}" in lines[0]
    assert "the last good checkpoint (step 258" in lines[0]
    monkeypatch.undo()
    code, stdout, err = run(capsys, "train", "--resume", out)
    assert code == 0, err
    assert "training done; evaluating" in stdout and sorted(p.name for p in out.iterdir()) == FILES
