"""`rnnlens repro` on bad input and on damaged records and run folders: one line on stderr and
exit code 2 (never a traceback), no output folder made for a command refused before its work,
and no record written over (tests/repro/test_repro.py has the first cases)."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from rnnlens.cli import main

ROW = "=3-TURN (50 units, 3-truncated)"      # urn-dyck's 3-TURN row: a tiny run takes a second
RUN = "dyck-turn3-tiny-seed0"


def _argv(tmp_path, *extra, table="urn-dyck", out="out", results="results"):
    return ["repro", table, "--rows", ROW, "--tiny", "--quiet", "--threads", "1", "--out", str(tmp_path / out),
            "--results", str(tmp_path / results), *extra]


def _refused(capsys, argv, msg: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rnnlens") and msg in err, err
    return err


@pytest.mark.parametrize("extra,msg", [
    (["--rows", ""], "names no label"),
    (["--rows", "="], "names no label"),
    (["--rows", "  "], "names no label"),
    (["--rows", "typo-no-row"], "no row label contains (or, with =, is) 'typo-no-row'"),   # with ROW's own --rows
    (["--seed", "4294967295", "--seeds", "2"], "--seed 4294967295 with --seeds 2 goes past the largest seed"),
    (["--device", "banana"], "--device banana"),
    pytest.param(["--device", "cuda"], "--device cuda: no CUDA device is available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
    (["--results", "{tmp}/FILE"], "is not a folder"),
    (["--results", "{tmp}/FILE/records"], "cannot create --results folder {tmp}/FILE/records"),
    (["--results", "{tmp}/out"], "is the --results folder"),
    (["--results", "{tmp}"], "is inside the --results folder"),
    (["--results", "{tmp}/out/runs/records"], "where repro trains its runs"),
    (["--configs", "{tmp}/EMPTY"], "config {tmp}/EMPTY/dyck-urn.json does not exist"),
    (["--configs", "{tmp}/EMPTY", "--out", "{tmp}/out/a/b", "--results", "{tmp}/records/r"], "does not exist"),
])
def test_bad_arguments_are_one_line_and_make_no_output_folder(extra, msg, tmp_path, capsys):
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "EMPTY").mkdir()
    extra = [a.format(tmp=tmp_path) for a in extra]
    argv = ["repro", "urn-dyck", "--tiny", "--quiet", "--threads", "1", "--out", str(tmp_path / "out"), *extra]
    if "--rows" not in extra:
        argv += ["--rows", ROW]
    _refused(capsys, argv, msg.format(tmp=tmp_path))
    assert not (tmp_path / "out").exists() and not (tmp_path / "records").exists()


@pytest.mark.parametrize("argv,msg", [
    (["repro", "all", "urn-dyck", "--out", "x"], "'all' runs every table: give it alone"),
    (["repro", "urn-dyck", "all", "--out", "x"], "'all' runs every table: give it alone"),
    (["repro", "--render", "urn-dyck"], "takes no TABLE and no --rows"),
    (["repro", "--render", "--rows", "LSTM"], "takes no TABLE and no --rows"),
])
def test_tables_and_rows_that_do_not_go_together_are_refused(argv, msg, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, argv + ["--results", str(tmp_path)], msg)
    assert not (tmp_path / "x").exists()


# --- table records -------------------------------------------------------------------------

def _table_record(label: str = ROW[1:]) -> dict:
    return {"table": "urn-dyck", "paper": "unitary-recurrent-networks", "source": "", "command": "rnnlens repro",
            "rows": [{"label": label, "status": "ok", "values": [{"0": 0.5, "1": 0.25}], "paper": None,
                      "budget": "tiny", "budget_name": "tiny", "data_used": "dyck (generated)", "note": "",
                      "checks": [["highest error", "0.5", None]], "check_prefix": None, "runs": []}]}


def _bad_rows(**change):
    rec = _table_record()
    rec["rows"][0].update(change)
    return json.dumps(rec)


@pytest.mark.parametrize("text,msg", [
    ('{"table": "urn-dyck", "rows": [', "not a readable table record"),
    ("[1, 2]", "not an object"),
    ('{"table": 5, "rows": []}', "no table id"),
    ('{"table": ["urn-dyck"], "rows": []}', "no table id"),
    ('{"table": "urn-dyck", "rows": "x"}', "no list of rows"),
    ('{"table": "urn-dyck", "rows": [1]}', "row 1 has no label"),
    ('{"table": "urn-dyck", "rows": [{"runs": []}]}', "row 1 has no label"),
    (_bad_rows(label=["x"]), "row 1 has no label"),
    (_bad_rows(runs="abc"), "runs are not a list"),
    (_bad_rows(values="abc"), "values are not a list of numbers"),
    (_bad_rows(values=[{"1": "x"}]), "values are not a list of numbers"),
    (_bad_rows(checks=[1]), "checks are not a list"),
    (_bad_rows(search={"best": 3, "trials": []}), "search is not"),
])
def test_a_malformed_table_record_is_one_line_for_repro_and_render_and_stays(text, msg, tmp_path, capsys):
    path = tmp_path / "results" / "tables" / "urn-dyck.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    err = _refused(capsys, _argv(tmp_path), msg)
    assert str(path) in err and not (tmp_path / "out").exists()
    _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results")], msg)
    _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "R.md")],
             msg)
    assert path.read_text() == text and not (tmp_path / "R.md").exists()


# --- --render --out --------------------------------------------------------------------------

def _records(tmp_path):
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "tables" / "urn-dyck.json").write_text(json.dumps(_table_record()))
    return results


@pytest.mark.parametrize("where,msg", [
    ("missing/R.md", "folder {tmp}/missing does not exist"),
    ("folder", "{tmp}/folder is a folder"),
    ("readonly/R.md", "cannot write in folder {tmp}/readonly"),
])
def test_render_out_that_cannot_be_written_is_one_line_before_any_figure(where, msg, tmp_path, capsys):
    results = _records(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "readonly").mkdir()
    os.chmod(tmp_path / "readonly", 0o555)
    if where.startswith("readonly") and os.access(tmp_path / "readonly", os.W_OK):
        pytest.skip("a read-only folder is writable here (root)")
    try:
        _refused(capsys, ["repro", "--render", "--results", str(results), "--out", str(tmp_path / where)],
                 msg.format(tmp=tmp_path))
    finally:
        os.chmod(tmp_path / "readonly", 0o755)
    assert not (tmp_path / "missing").exists() and not (results / "figures").exists()
    assert list((tmp_path / "folder").iterdir()) == [] and list((tmp_path / "readonly").iterdir()) == []


def test_render_writes_the_file_and_draws_the_figures(tmp_path, capsys):
    results = _records(tmp_path)
    assert main(["repro", "--render", "--results", str(results), "--out", str(tmp_path / "R.md")]) == 0
    assert "urn-dyck" in (tmp_path / "R.md").read_text() and (results / "figures" / "urn-dyck.png").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []       # no temporary left


def test_render_of_a_records_folder_without_tables_is_an_error_not_an_empty_file(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results")], "has no table records")
    _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "R.md")],
             "has no table records")
    assert not (tmp_path / "R.md").exists() and not (tmp_path / "results" / "figures").exists()


# --- damaged run records and run folders -----------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run of the 3-TURN row: its DIR/runs folder and its record."""
    base = tmp_path_factory.mktemp("trained")
    assert main(_argv(base)) == 0
    return base


def _copy(trained, tmp_path):
    shutil.copytree(trained / "out", tmp_path / "out")
    shutil.copytree(trained / "results", tmp_path / "results")
    return tmp_path / "results" / "runs" / RUN / "record.json"


@pytest.mark.parametrize("change", [{"seconds": "abc"}, {"seconds": None}, {"test": {}}])
def test_a_record_with_odd_fields_is_reused_or_trained_again_never_a_traceback(change, trained, tmp_path, capsys):
    path = _copy(trained, tmp_path)
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, **change}))
    assert main(_argv(tmp_path, out="fresh")) == 0          # a fresh DIR: the record stands in for the run
    ran = (tmp_path / "fresh" / "runs" / RUN).is_dir()
    assert ran == ("test" in change)                          # a record lacking the metric read: trained again
    if ran:
        assert json.loads(path.read_text())["test"]["test_by_attractors"]


@pytest.mark.parametrize("where", ["record", "run"])
def test_a_test_record_of_the_wrong_shape_is_one_line_and_left_as_it_is(where, trained, tmp_path, capsys):
    path = _copy(trained, tmp_path)
    out = "fresh" if where == "record" else "out"
    if where == "run":
        path = tmp_path / "out" / "runs" / RUN / "metrics.jsonl"
        lines = path.read_text().splitlines()
        test = json.loads(lines[-1])
        lines[-1] = json.dumps({**test, "test_by_attractors": 5})
        path.write_text("\n".join(lines) + "\n")
    else:
        rec = json.loads(path.read_text())
        path.write_text(json.dumps({**rec, "test": {**rec["test"], "test_by_attractors": "x"}}))
    before = path.read_text()
    err = _refused(capsys, _argv(tmp_path, out=out), "its test record does not hold what")
    assert str(path) in err and path.read_text() == before


@pytest.mark.parametrize("damage", ["not a dict line", "blank line", "repro.json seconds"])
def test_a_run_folder_with_odd_lines_is_reused_not_a_traceback(damage, trained, tmp_path, capsys):
    _copy(trained, tmp_path)
    run = tmp_path / "out" / "runs" / RUN
    weights = (run / "model.safetensors").read_bytes()
    if damage == "repro.json seconds":
        (run / "repro.json").write_text('{"seconds": "abc"}')
    else:
        with open(run / "metrics.jsonl", "a") as f:
            f.write("[1, 2]\n" if damage == "not a dict line" else "\n")
    argv = [a for a in _argv(tmp_path) if a != "--quiet"]
    assert main(argv) == 0
    assert f"reusing {run}" in capsys.readouterr().err
    assert (run / "model.safetensors").read_bytes() == weights


def test_a_demo_run_with_a_damaged_summary_is_trained_again(tmp_path, monkeypatch, capsys):
    """Sequence-level Table 1 reads DIR/runs/demo-CELL-seedK/summary.json: one that is cut short
    or of another shape is trained again (as a run folder without its test record is)."""
    import rnnlens.demo

    calls = []

    def fake_demo(path, force, cell, seed, epochs, progress):
        calls.append(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"config": {"train": {"epochs": epochs}}}))
        summary = {"table": {g: {f: {"mean": 0.5} for f in ("token", "negation", "double_negation")}
                             for g in ("positive", "negative")},
                   "negation_flips": 1, "double_negation_restores": 1, "adjectives": [], "model": {"hidden_size": 8},
                   "test": {}, "best_epoch": 1, "seconds": 1.0}
        (path / "summary.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(rnnlens.demo, "run_demo", fake_demo)
    run = tmp_path / "out" / "runs" / "demo-gru-tiny-seed0"     # a tiny run's name: never a full run's
    argv = ["repro", "seqlevel-table1", "--rows", "=GRU: positive tokens (10), tokens", "--tiny", "--quiet",
            "--threads", "1", "--out", str(tmp_path / "out")]
    for text in ('{"table": {"positive": {"tok', "[]", "{}", '{"table": {"positive": {"token": {"mean": "x"}}}}'):
        run.mkdir(parents=True, exist_ok=True)
        (run / "summary.json").write_text(text)
        (run / "config.json").write_text(json.dumps({"config": {"train": {"epochs": 1}}}))
        calls.clear()
        assert main(argv) == 0, capsys.readouterr().err
        assert calls == [run]
    calls.clear()
    assert main(argv) == 0 and calls == []                    # a readable summary: reused, not trained again
    # the full budget neither reuses the tiny run nor writes over it
    full = [a for a in argv if a != "--tiny"] + ["--results", str(tmp_path / "results")]
    assert main(full) == 0 and calls == [tmp_path / "out" / "runs" / "demo-gru-seed0"]
    (run.parent / "demo-gru-seed0" / "config.json").write_text(json.dumps({"config": {"train": {"epochs": 1}}}))
    calls.clear()
    assert main(full) == 0 and calls == [tmp_path / "out" / "runs" / "demo-gru-seed0"]   # a 1-epoch run there


@pytest.mark.parametrize("flag", [["--tiny"], ["--seeds", "3"], ["--seed", "2"], ["--time-limit", "60"],
                                  ["--budget", "full"]])
def test_render_refuses_the_options_of_a_training_repro(flag, tmp_path, capsys):
    """--render reads the records as they are: an option that only a training repro reads is an
    error, not silently ignored."""
    assert main(["repro", "--render", "--out", str(tmp_path / "R.md"), *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag[0] in err[0] and not (tmp_path / "R.md").exists()


@pytest.mark.parametrize("rows", [[], ["--rows", "=MM (relation)"]])
def test_a_baseline_row_without_its_data_is_missing_data_not_a_crash(rows, tmp_path, capsys):
    """ngrams-table4's entity-lookup baseline reads CoNLL-2003 itself: with no --data-dir (or
    an empty one) it is "missing data" like the trained rows, and a --rows run that leaves it
    out does not run it."""
    (tmp_path / "empty").mkdir()
    for data in ([], ["--data-dir", str(tmp_path / "empty")]):
        out = tmp_path / f"out{len(data)}"
        argv = ["repro", "ngrams-table4", *rows, "--tiny", "--quiet", "--threads", "1", "--out", str(out),
                "--results", str(tmp_path / f"rec{len(data)}"), *data]
        assert main(argv) == 0, capsys.readouterr().err
        table = json.loads((out / "ngrams-table4.json").read_text())
        lookup = [r for r in table["rows"] if r["label"].startswith("entity lookup baseline")]
        if rows:
            assert lookup == []
        else:
            assert [r["status"] for r in lookup] == ["missing data"]


@pytest.mark.parametrize("damage", ["truncated", "overrides", "config", "command"])
def test_a_damaged_run_record_is_one_line_never_skipped_or_trained_over(damage, trained, tmp_path, capsys):
    path = _copy(trained, tmp_path)
    rec = json.loads(path.read_text())
    text = {"truncated": path.read_text()[:40], "overrides": json.dumps({**rec, "overrides": [1]}),
            "config": json.dumps({**rec, "config": {**rec["config"], "train": "x"}}),
            "command": json.dumps({**rec, "command": 5})}[damage]
    path.write_text(text)
    err = _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results"),
                            "--out", str(tmp_path / "R.md")], "not a")
    assert str(path) in err and "run record" in err and not (tmp_path / "R.md").exists()
    _refused(capsys, _argv(tmp_path, out="fresh"), "run record")
    assert path.read_text() == text and not (tmp_path / "fresh" / "runs" / RUN).exists()


@pytest.mark.parametrize("damage", ["command", "table id"])
def test_a_damaged_table_record_is_one_line_never_a_vanished_table(damage, trained, tmp_path, capsys):
    _copy(trained, tmp_path)
    (path,) = (tmp_path / "results" / "tables").glob("*.json")
    rec = json.loads(path.read_text())
    path.write_text(json.dumps({**rec, **({"command": 5} if damage == "command" else {"table": "nosuch"})}))
    err = _refused(capsys, ["repro", "--render", "--results", str(tmp_path / "results"),
                            "--out", str(tmp_path / "R.md")], "not a table record")
    assert str(path) in err and not (tmp_path / "R.md").exists()
