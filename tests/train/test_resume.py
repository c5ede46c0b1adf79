"""Resumable training: a run killed with SIGKILL mid-epoch and
resumed ends with the metrics of an uninterrupted run; a damaged checkpoint is detected by
its checksum and the one before it used; a NaN loss stops naming the step (or is skipped)."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from tests.support import KILLER, REPO, max_diff
from rnnlens.cli import main
from rnnlens.data.batching import BatchIterator, BPTTIterator, Example, SentenceIterator
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import Config
from rnnlens.train.resume import Checkpoints, partial_dir, read_checkpoint
from rnnlens.train.trainer import Trainer, seed_everything

# 129 steps an epoch; dropout so the resumed run must restore the RNG as well
FLAGS = ["--epochs", "3", "--hidden-size", "16", "--embedding-dim", "16", "--threads", "1", "--quiet",
         "--checkpoint-every", "50", "--dropout", "0.3", "--embedding-dropout", "0.1"]
KILL_AT = 170           # the 170th training step: epoch 2, 20 steps after the checkpoint of step 150
FILES = ["config.json", "metrics.jsonl", "model.safetensors", "vocab.json"]


def rnnlens(*argv, env=None, script=None):
    cmd = [sys.executable, "-c", script, *argv] if script else [sys.executable, "-m", "rnnlens", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def records(out):
    """metrics.jsonl without the wall-clock seconds."""
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    r = rnnlens("train", "--out", str(out), *FLAGS)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """OUT.partial/ of a run killed at step KILL_AT (copy it before use)."""
    out = tmp_path_factory.mktemp("killed") / "run"
    r = rnnlens("train", "--out", str(out), *FLAGS, env={"KILL_AT": str(KILL_AT)}, script=KILLER)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert not out.exists()                      # the output folder is only ever complete
    ckpts = sorted(p.name for p in (partial_dir(out) / "checkpoints").iterdir())
    assert [n.split("-")[1] for n in ckpts] == ["000000129", "000000150"], ckpts   # the newest two
    return partial_dir(out)


def copy_of(killed, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(killed, partial_dir(out))
    return out


def test_killed_run_resumes_to_the_uninterrupted_metrics(killed, reference, tmp_path):
    out = copy_of(killed, tmp_path)
    r = rnnlens("train", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    assert f"resuming {out} from step 150 (epoch 2, after batch 21)" in r.stdout
    got, want = records(out), records(reference)
    print(got[-1], want[-1], sep="\n")
    assert got == want                           # every epoch line once, the test record equal
    assert got[-1]["split"] == "test" and [g.get("epoch") for g in got] == [1, 2, 3, None]
    assert sorted(p.name for p in out.iterdir()) == FILES and not partial_dir(out).exists()


def test_sigterm_stops_like_an_interrupt_and_resumes_to_the_uninterrupted_metrics(reference, tmp_path):
    """`kill PID` (SIGTERM), as a scheduler stops a job: one line saying how to continue, exit
    code 143, OUT.partial/ kept, and the resumed run ends where the uninterrupted one does."""
    out = tmp_path / "run"
    r = rnnlens("train", "--out", str(out), *FLAGS, env={"KILL_AT": str(KILL_AT), "KILL_SIGNAL": "SIGTERM"},
                script=KILLER)
    assert r.returncode == 143, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines()[-1] == (f"rnnlens: stopped (SIGTERM); continue from the last checkpoint "
                                                 f"with: rnnlens train --resume {out}")
    assert not out.exists() and partial_dir(out).is_dir()
    r = rnnlens("train", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    assert "from step 150 (epoch 2, after batch 21)" in r.stdout
    assert records(out) == records(reference)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_checkpoint_is_detected_and_the_previous_one_used(killed, reference, tmp_path, damage):
    out = copy_of(killed, tmp_path)
    newest = sorted((partial_dir(out) / "checkpoints").iterdir())[-1]
    data = bytearray(newest.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    else:
        data = data[: len(data) // 3]
    newest.write_bytes(bytes(data))
    r = rnnlens("train", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "damaged (checksum mismatch)" in warnings[0] and newest.name in warnings[0]
    assert "from step 129 (after epoch 1)" in r.stdout
    assert records(out) == records(reference)


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_resume_errors_are_one_line(killed, reference, tmp_path, capsys):
    cases = [
        (["--resume", str(tmp_path / "nowhere")], "nothing to resume: neither"),
        (["--resume", str(reference)], "is a finished run"),
    ]
    out = copy_of(killed, tmp_path)
    cases += [
        (["--resume", str(out), "--hidden-size", "32"], "model.hidden_size (16 -> 32)"),
        (["--resume", str(out), "--out", str(tmp_path / "other")], "name different folders"),
        (["--out", str(out), *FLAGS], "holds an interrupted run: continue it with --resume"),
    ]
    empty = tmp_path / "empty"
    partial_dir(empty).mkdir()
    cases.append((["--resume", str(empty)], "holds no checkpoint"))
    (tmp_path / "no-run").mkdir()
    cases.append((["--resume", str(tmp_path / "no-run")], "no-run is not a run's folder (no config.json)"))
    for argv, message in cases:
        code, _, err = run_main(capsys, "train", *argv)
        print(err)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err
    assert len(list((partial_dir(out) / "checkpoints").iterdir())) == 2    # nothing was touched


def nan_at(monkeypatch, steps):
    """Make the training loss NaN at these training steps (counted in this process)."""
    calls, loss = [0], RNNModel.loss

    def nan_loss(self, out, batch):
        value = loss(self, out, batch)
        if self.training:
            calls[0] += 1
            if calls[0] in steps:
                return value * float("nan")
        return value
    monkeypatch.setattr(RNNModel, "loss", nan_loss)


SHORT = ["--epochs", "2", "--hidden-size", "8", "--embedding-dim", "8", "--threads", "1", "--quiet"]


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    nan_at(monkeypatch, {70})
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT, "--checkpoint-every", "25")
    print(err)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "loss became nan at step 70 (epoch 1)" in err and "last good checkpoint (step 50)" in err
    assert f"rnnlens train --resume {out} --on-nan skip" in err
    assert not out.exists() and read_checkpoint(sorted((partial_dir(out) / "checkpoints").iterdir())[-1]).step == 50
    # the checkpoint resumes (and on_nan may change on --resume)
    code, stdout, err = run_main(capsys, "train", "--resume", str(out), "--on-nan", "skip")
    assert code == 0, err
    assert "from step 50 (epoch 1, after batch 50)" in stdout and sorted(p.name for p in out.iterdir()) == FILES


def test_nan_loss_without_a_checkpoint_leaves_nothing(tmp_path, capsys, monkeypatch):
    nan_at(monkeypatch, {3})
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT)
    assert code == 2 and "step 3 (epoch 1)" in err and "--on-nan skip" in err
    assert not out.exists() and not partial_dir(out).exists()


def test_skip_policy_skips_the_batch_and_halves_lr(tmp_path, capsys, monkeypatch):
    nan_at(monkeypatch, {30, 31})
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT, "--on-nan", "skip")
    assert code == 0, err
    warnings = err.strip().splitlines()
    print(warnings)
    assert len(warnings) == 2 and "loss became nan at step 30 (epoch 1); batch skipped, lr halved to 0.025" in warnings[0]
    recs = records(out)
    assert [(r["step"], r["lr"]) for r in recs if "skipped" in r] == [(30, 0.025), (31, 0.0125)]
    assert [r["lr"] for r in recs if "epoch" in r and "skipped" not in r] == [0.0125, 0.0125]
    assert recs[-1]["test_accuracy"] > 0.5


def test_skip_policy_gives_up_after_many_in_a_row(tmp_path, capsys, monkeypatch):
    nan_at(monkeypatch, set(range(5, 40)))
    code, _, err = run_main(capsys, "train", "--out", str(tmp_path / "run"), *SHORT, "--on-nan", "skip")
    assert code == 2 and "step 15 (epoch 1), the 11th batch in a row" in err.strip().splitlines()[-1]


def test_checkpoint_files_keep_two_and_check_their_hash(tmp_path, capsys):
    ck = Checkpoints(tmp_path, {"train": {}})
    for step in (10, 20, 20, 30):                  # the same step again supersedes the older file
        ck.save({"step": step, "x": [step, 0.1]}, {"w": torch.full((3,), float(step))})
    files = sorted((tmp_path / "checkpoints").iterdir())
    assert [read_checkpoint(p).step for p in files] == [20, 30]
    assert Checkpoints.latest(tmp_path).tensors["w"].tolist() == [30.0] * 3
    files[1].write_bytes(files[1].read_bytes()[:-1])
    saved = Checkpoints.latest(tmp_path)
    assert saved.step == 20 and saved.state["x"] == [20, 0.1] and not files[1].exists()
    assert (tmp_path / "checkpoints" / "damaged" / files[1].name).is_file()     # set aside, not deleted
    assert "damaged" in capsys.readouterr().err
    files[0].write_bytes(b"\0" + files[0].read_bytes()[1:])
    with pytest.raises(RnnlensError, match="no intact checkpoint.*kept there for inspection"):
        Checkpoints.latest(tmp_path)
    assert files[0].is_file()                          # every one damaged: all kept
    assert Checkpoints.latest(tmp_path / "nothing") is None


def test_iterators_skip_to_the_same_order():
    vocab = Vocab.build([["a", "b", "c", "<eos>"]])
    exs = [Example(["a"] * (1 + i % 5) + ["<eos>"], label=i % 2) for i in range(40)]
    for make in (lambda: BatchIterator(exs, vocab, 4, seed=3), lambda: SentenceIterator(exs, vocab, 3, seed=3),
                 lambda: BPTTIterator(list(range(1, 200)), 4, 7)):
        full, resumed = make(), make()
        list(full)
        whole = [b.tokens for b in full]             # the second epoch's order
        resumed.epoch, resumed.start = getattr(full, "epoch", 1) - 1, 3
        tail = [b.tokens for b in resumed]
        assert len(tail) == len(whole) - 3 and all(torch.equal(a, b) for a, b in zip(tail, whole[3:]))
        assert len([b for b in resumed]) == len(whole)   # `start` is for one pass only


class Kill(Exception):
    pass


def test_language_model_resumes_with_its_carried_state(tmp_path, monkeypatch):
    """BPTT carries the hidden state across batches: a mid-epoch resume restores it too."""
    stream = [1 + (i * 7 + i // 3) % 11 for i in range(1200)]
    cfg = Config.from_dict({"model": {"cell": "lstm", "embedding_dim": 8, "hidden_size": 8, "dropout": 0.2},
                            "train": {"epochs": 2, "optimizer": "adam", "lr": 0.01}})

    def fit(folder, resume=None):
        seed_everything(0)
        model = RNNModel(cfg.model, 13, "lm")
        ck = Checkpoints(folder, cfg.to_dict(), every=4, resume=resume)
        trainer = Trainer(model, cfg.train, metrics_path=folder / "m.jsonl", progress=False, checkpoints=ck)
        trainer.fit(BPTTIterator(stream, 4, 10), BPTTIterator(stream[:300], 4, 10))
        return model, trainer

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ref, ref_trainer = fit(tmp_path / "a")
    loss, calls = RNNModel.loss, [0]

    def dying_loss(self, out, batch):
        calls[0] += self.training
        if calls[0] == 42:
            raise Kill
        return loss(self, out, batch)
    monkeypatch.setattr(RNNModel, "loss", dying_loss)
    with pytest.raises(Kill):
        fit(tmp_path / "b")
    monkeypatch.setattr(RNNModel, "loss", loss)
    saved = Checkpoints.latest(tmp_path / "b")
    assert saved.state["batches_done"] == 10 and saved.state["carry"] == 1   # epoch 2; one layer's state
    model, trainer = fit(tmp_path / "b", saved)
    strip = lambda hist: [{k: v for k, v in r.items() if k != "seconds"} for r in hist]  # noqa: E731
    assert strip(trainer.history) == strip(ref_trainer.history)
    for (name, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items()):
        assert max_diff(a, b) == 0, name
    assert len((tmp_path / "b" / "m.jsonl").read_text().splitlines()) == 2


def test_resume_refuses_changed_training_data(tmp_path, capsys, monkeypatch):
    rows = [f"{'pos' if i % 2 else 'neg'}\t{'good' if i % 2 else 'bad'} film number {i}" for i in range(40)]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(rows) + "\n")
    nan_at(monkeypatch, {3})
    out = tmp_path / "run"
    argv = ["--corpus", "tsv", "--train-file", str(train), "--batch-size", "8", "--checkpoint-every", "1"]
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT, *argv)
    assert code == 2 and "last good checkpoint (step 2)" in err
    for changed in (rows + ["pos\ta new line"],      # another size
                    rows[:4] + ["pos" + rows[4][3:]] + rows[5:],  # one label flipped: same words and size
                    rows[1:] + rows[:1]):                # the same lines in another order
        train.write_text("\n".join(changed) + "\n")
        code, _, err = run_main(capsys, "train", "--resume", str(out))
        assert code == 2 and "the training data differ" in err and len(err.strip().splitlines()) == 1
        assert partial_dir(out).is_dir()
    train.write_text("\n".join(rows) + "\n")             # as it was: the run goes on
    monkeypatch.undo()
    code, _, err = run_main(capsys, "train", "--resume", str(out))
    assert code == 0, err


def test_a_run_resumes_from_another_folder_and_with_its_data_moved(tmp_path, capsys, monkeypatch):
    """A relative data path is read from the folder the run started in, and on --resume the
    data may be given anew (moved, or named another way): paths are not settings; the data's
    content is what is checked."""
    rows = [f"{'pos' if i % 2 else 'neg'}\t{'good' if i % 2 else 'bad'} film number {i}" for i in range(40)]
    start = tmp_path / "start"
    (start / "data").mkdir(parents=True)
    (start / "data" / "train.tsv").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(start)
    nan_at(monkeypatch, {3})
    out = tmp_path / "run"
    argv = ["--corpus", "tsv", "--train-file", "data/train.tsv", "--batch-size", "8", "--checkpoint-every", "1"]
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT, *argv)
    assert code == 2 and "last good checkpoint (step 2)" in err
    monkeypatch.undo()                                   # no NaN from here on, and back where the tests run
    monkeypatch.chdir(tmp_path)
    moved = tmp_path / "elsewhere.tsv"
    shutil.copy(start / "data" / "train.tsv", moved)
    (tmp_path / "v.txt").write_text("good " + " ".join(["0.1"] * 8) + "\n")
    for added in (["--embeddings-file", str(tmp_path / "v.txt")], ["--dev-file", str(moved)]):
        # a path the run did not have is another run, not its input found elsewhere
        code, _, err = run_main(capsys, "train", "--resume", str(out), "--train-file", str(moved), *added)
        assert code == 2 and "the config differs" in err and added[0][2:].replace("-", "_") in err, err
    code, _, err = run_main(capsys, "train", "--resume", str(out), "--train-file", str(moved))
    assert code == 0, err
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["data"]["train_file"] == str(moved)
    shutil.rmtree(out)
    monkeypatch.chdir(start)
    nan_at(monkeypatch, {3})
    code, _, err = run_main(capsys, "train", "--out", str(out), *SHORT, *argv)
    assert code == 2
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)                          # the data where the run started, found from here
    code, _, err = run_main(capsys, "train", "--resume", str(out))
    assert code == 0, err


def test_a_setting_saved_before_it_existed_reads_as_its_default():
    """A run saved before a setting was added (its config.json lacks the key) matches a config
    that has the default there, and differs from one that does not."""
    import copy

    from rnnlens.config import Config
    from rnnlens.train.resume import config_differences
    new = Config().to_dict()
    saved = copy.deepcopy(new)
    del saved["train"]["precision"]
    assert config_differences(saved, new) == []
    new["train"]["precision"] = "bf16"
    assert config_differences(saved, new) == ["train.precision ('float32' -> 'bf16')"]
