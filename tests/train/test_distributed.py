"""Data-parallel training: `torchrun --nproc-per-node 2 -m rnnlens train`
on 127.0.0.1 ends with the metrics and weights of one process with the same global batch,
and only rank 0 writes. Dropout is 0: each rank draws dropout masks for its own rows, so
with dropout the runs would differ by design (see rnnlens/train/distributed.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import KILLER, REPO, max_diff

dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

FILES = ["config.json", "metrics.jsonl", "model.safetensors", "vocab.json"]
TOL = 1e-5


def run(cwd: Path, *argv, nproc: int = 1, script: Path | None = None, env=None):
    """`rnnlens train ...` in one process, or under torchrun with nproc processes on 127.0.0.1
    (port 0: the rendezvous store takes a free port itself, no race with other programs)."""
    target = [str(script)] if script else ["-m", "rnnlens"]
    if nproc == 1:
        cmd = [sys.executable, *target, *argv]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", *target, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})})


def records(out: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock seconds."""
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(one: Path, two: Path) -> float:
    """Same records (numbers to TOL, the rest exactly) and weights; the largest difference."""
    from safetensors.torch import load_file

    a, b = records(one), records(two)
    assert len(a) == len(b), (a, b)        # a second writer would have doubled the lines
    worst = 0.0
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                worst = max(worst, abs(ra[k] - rb[k]))
                assert ra[k] == pytest.approx(rb[k], abs=TOL, rel=TOL), (k, ra, rb)
            else:
                assert ra[k] == rb[k], (k, ra, rb)
    print(f"metrics: max |diff| = {worst:.3e}")
    wa, wb = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert wa.keys() == wb.keys()
    d = max_diff(torch.cat([wa[k].flatten() for k in sorted(wa)]), torch.cat([wb[k].flatten() for k in sorted(wa)]))
    assert d < TOL
    return max(d, worst)


def only_output(root: Path, out: Path) -> None:
    """Nothing was written under root but the finished output folder (by any rank)."""
    assert sorted(p.name for p in out.iterdir()) == FILES
    stray = [p for p in root.rglob("*") if out not in (p, *p.parents)]
    assert stray == [], stray


def test_classifier_two_processes_equal_one(tmp_path):
    # 31 a batch: the two ranks get 16 and 15 rows; the last batch of a bucket is short
    flags = ["--epochs", "2", "--hidden-size", "8", "--embedding-dim", "8", "--batch-size", "31",
             "--clip", "1.0", "--threads", "1", "--quiet"]
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    r = run(one, "train", "--out", "run", *flags)
    assert r.returncode == 0, r.stderr
    r = run(two, "train", "--out", "run", *flags, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("wrote run") == 1                 # rank 0 reports, the other is quiet
    only_output(two, two / "run")
    assert_same_run(one / "run", two / "run")


def lm_data(root: Path) -> Path:
    """A tiny PTB-layout folder (the built-in polarity sentences as running text)."""
    from rnnlens.data.synthetic import PolarityCorpus

    splits = PolarityCorpus(seed=0).splits()
    (root / "ptb").mkdir(parents=True)
    for split, name, n in (("train", "train", 400), ("dev", "valid", 40), ("test", "test", 40)):
        text = "\n".join(" ".join(ex.tokens) for ex in splits[split][:n]) + "\n"
        (root / "ptb" / f"ptb.{name}.txt").write_text(text)
    return root


LM_FLAGS = ["--data", "ptb", "--epochs", "2", "--hidden-size", "12", "--embedding-dim", "12",
            "--batch-size", "8", "--bptt", "10", "--optimizer", "sgd", "--lr", "1", "--threads", "1",
            "--quiet", "--checkpoint-every", "10"]


@pytest.fixture(scope="module")
def lm_reference(tmp_path_factory):
    """One process: a BPTT language model (8 rows, each rank carries the state of its 4)."""
    root = tmp_path_factory.mktemp("lm")
    data = lm_data(root / "data")
    r = run(root, "train", "--out", "ref", "--data-dir", str(data), *LM_FLAGS)
    assert r.returncode == 0, r.stderr
    return root / "ref", data


def test_language_model_two_processes_equal_one(lm_reference, tmp_path):
    ref, data = lm_reference
    r = run(tmp_path, "train", "--out", "run", "--data-dir", str(data), *LM_FLAGS, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    only_output(tmp_path, tmp_path / "run")
    assert_same_run(ref, tmp_path / "run")


def test_killed_two_process_run_resumes_under_torchrun(lm_reference, tmp_path):
    """Both ranks SIGKILLed mid-epoch 2; rank 0 wrote the checkpoint of step 40 (the carried
    state and metric sums of both ranks in it); `--resume` under torchrun (rank 0 reads it and
    sends it to rank 1) ends as the uninterrupted run."""
    ref, data = lm_reference
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    work = tmp_path / "work"
    work.mkdir()
    r = run(work, "train", "--out", "run", "--data-dir", str(data), *LM_FLAGS, nproc=2, script=script,
            env={"KILL_AT": "45"})
    assert r.returncode != 0
    part = work / "run.partial"
    assert not (work / "run").exists()
    steps = sorted(int(p.name.split("-")[1]) for p in (part / "checkpoints").iterdir())
    assert steps[-1] == 40, steps                      # 32 steps an epoch: in epoch 2
    r = run(work, "train", "--resume", "run", "--data-dir", str(data), *LM_FLAGS, nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming run from step 40 (epoch 2, after batch 8)" in r.stdout
    assert_same_run(ref, work / "run")
