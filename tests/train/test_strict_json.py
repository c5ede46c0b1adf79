"""JSON that any reader parses: a diverged run's non-finite metrics are written null (JSON has
no NaN), and read back as NaN by rnnlens's own readers, so a diverged run still reads as
diverged."""
import json
import math

import numpy as np
import pytest

from rnnlens.cli import main
from rnnlens.outfiles import finite, json_text, metric_record
from rnnlens.train.trainer import Trainer

SHORT = ["--epochs", "2", "--hidden-size", "8", "--embedding-dim", "8", "--threads", "1", "--quiet"]


def strict(text: str):
    """json.loads that refuses NaN and Infinity, as jq or JavaScript do."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_finite_and_json_text():
    value = {"a": math.nan, "b": [1.0, math.inf, -math.inf, (2, np.float32("nan"))], "c": 3, "d": True,
             "e": np.float64(0.5), "f": None, "g": "NaN"}
    out = strict(json_text(value))
    assert out == {"a": None, "b": [1.0, None, None, [2, None]], "c": 3, "d": True, "e": 0.5, "f": None, "g": "NaN"}
    assert finite((math.nan, 1.5)) == [None, 1.5] and finite(math.inf) is None and finite(7) == 7
    with pytest.raises(ValueError):
        strict(json.dumps({"a": math.nan}))     # what the files held before


def test_metric_record_restores_only_the_metrics():
    rec = metric_record({"epoch": 3, "best_epoch": None, "dev_loss": None, "test_ppl": None, "train_loss": 1.5,
                         "stopped": None})
    assert math.isnan(rec["dev_loss"]) and math.isnan(rec["test_ppl"]) and rec["train_loss"] == 1.5
    assert rec["best_epoch"] is None and rec["stopped"] is None and rec["epoch"] == 3
    assert metric_record([1, None]) == [1, None]


@pytest.fixture
def nan_dev(monkeypatch):
    """Every evaluation (dev and test) gives a NaN loss; training stays finite."""
    evaluate = Trainer.evaluate

    def nan_loss(self, batches, **kw):
        return {**evaluate(self, batches, **kw), "loss": math.nan}
    monkeypatch.setattr(Trainer, "evaluate", nan_loss)


def test_a_diverged_run_writes_strict_json_and_reads_back_as_diverged(tmp_path, capsys, nan_dev):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), *SHORT]) == 0, capsys.readouterr().err
    lines = [strict(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs, test = [r for r in lines if "epoch" in r], lines[-1]
    assert len(epochs) == 2 and all(r["dev_loss"] is None for r in epochs)
    assert all(math.isfinite(r["train_loss"]) for r in epochs)
    assert test["split"] == "test" and test["test_loss"] is None

    from rnnlens.app.report import read_training_log
    from rnnlens.app.run import Run
    rows, test_row, notes = read_training_log(out / "metrics.jsonl")
    assert not notes and all(math.isnan(r["dev_loss"]) for r in rows) and math.isnan(test_row["test_loss"])
    assert all(math.isnan(r["dev_loss"]) for r in Run.load(out).metrics() if "epoch" in r)

    capsys.readouterr()
    assert main(["eval", "--model", str(out), "--split", "test", "--json", "--threads", "1"]) == 0
    printed = strict(capsys.readouterr().out)
    assert printed["loss"] is None and printed["accuracy"] >= 0


def test_table_records_keep_a_diverged_value_apart_from_a_missing_one():
    from rnnlens.repro.records import _is_value, values_in, values_out

    values = [math.nan, None, 81.5, {"1": math.inf, "2": None, "3": -math.inf}]
    out = strict(json_text(values_out(values)))
    assert out == ["nan", None, 81.5, {"1": "inf", "2": None, "3": "-inf"}] and all(_is_value(v) for v in out)
    back = values_in(out)
    assert math.isnan(back[0]) and back[1] is None and back[2] == 81.5
    assert back[3]["1"] == math.inf and back[3]["2"] is None and back[3]["3"] == -math.inf
    assert values_in(["nan text", "x"]) == ["nan text", "x"] and not _is_value("x")


def test_every_writer_goes_through_json_text():
    """The commands, the trainer's log and the run records write JSON only through
    outfiles.json_text; json.dumps is left to what rnnlens alone reads back (the resume state,
    messages between ranks, the config and vocabulary files, cache keys, HTML text)."""
    from tests.support import REPO

    internal = {"config.py", "report_sections.py", "negation.py", "checkpoint.py", "resume.py",
                "distributed.py", "vocab.py", "records.py", "outfiles.py"}
    found = []
    for path in sorted((REPO / "rnnlens").rglob("*.py")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "json.dumps(" in line and (path.parent.name == "cli" or path.name not in internal):
                found.append(f"{path.relative_to(REPO)}:{no}")
    assert not found, found
