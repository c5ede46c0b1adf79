"""Run and table records under results/, their reuse, and REPRODUCTION.md rendered from them."""
from __future__ import annotations

import json

import pytest

from rnnlens.cli import main
from rnnlens.repro import Row, Table, load_tables
from rnnlens.repro.records import default_results_dir, portable, read_run, read_tables
from rnnlens.repro.report import render, table_markdown
from tests.support import REPO

ROW = "3-TURN (50"          # urn-dyck's 3-TURN row: a tiny run takes a second


def _repro(tmp_path, out="out", *extra):
    args = ["repro", "urn-dyck", "--rows", ROW, "--tiny", "--out", str(tmp_path / out), "--quiet",
            "--threads", "1", "--results", str(tmp_path / "results"), *extra]
    assert main(args) == 0


def test_a_run_writes_its_record_and_the_tables_rows(tmp_path, capsys):
    _repro(tmp_path)
    results = tmp_path / "results"
    rec = read_run(results, "dyck-turn3-tiny-seed0")
    assert rec is not None
    for key in ("config", "command", "rnnlens", "commit", "torch", "device", "threads", "seed", "seconds", "test",
                "budget", "machine"):
        assert key in rec, key
    assert rec["config_file"] == "configs/dyck-turn3.json" and rec["seed"] == 0 and rec["budget"] == "tiny"
    assert (results / "runs" / "dyck-turn3-tiny-seed0" / "metrics.jsonl").is_file()
    text = "".join(p.read_text() for p in results.rglob("*") if p.is_file())
    assert str(tmp_path) not in text and "/tmp/" not in text          # no absolute paths of this machine
    table = read_tables(results)["urn-dyck"]
    labels = [r["label"] for r in table["rows"]]
    assert any(lab.startswith("3-TURN (50") for lab in labels)
    row = next(r for r in table["rows"] if r["label"].startswith("3-TURN (50"))
    assert row["runs"] == ["dyck-turn3-tiny-seed0"] and row["budget_name"] == "tiny"
    assert "--rows" in table["command"] and str(tmp_path) not in table["command"]


def test_a_record_stands_in_for_its_run(tmp_path, capsys):
    _repro(tmp_path)
    capsys.readouterr()
    # a new output folder with no runs: the row is read from its record, nothing is trained
    assert main(["repro", "urn-dyck", "--rows", ROW, "--tiny", "--out", str(tmp_path / "other"), "--threads", "1",
                 "--results", str(tmp_path / "results")]) == 0
    err = capsys.readouterr().err
    assert "reusing the record of dyck-turn3-tiny-seed0" in err and "training" not in err
    assert not (tmp_path / "other" / "runs" / "dyck-turn3-tiny-seed0").exists()


def test_reusing_a_run_keeps_the_record_of_the_command_that_made_it(tmp_path):
    """A later repro that reuses the run (same output folder, another --rows) leaves its record
    as it was: the command, commit and time are those of the training."""
    _repro(tmp_path)
    path = tmp_path / "results" / "runs" / "dyck-turn3-tiny-seed0" / "record.json"
    before = path.read_text()
    assert main(["repro", "urn-dyck", "--rows", "3-TURN (50 units", "--tiny", "--out", str(tmp_path / "out"),
                 "--quiet", "--threads", "1", "--results", str(tmp_path / "results")]) == 0
    assert path.read_text() == before and '"3-TURN (50 units"' not in before


def test_a_record_of_other_settings_is_not_reused(tmp_path, capsys):
    _repro(tmp_path)
    rec_path = tmp_path / "results" / "runs" / "dyck-turn3-tiny-seed0" / "record.json"
    rec = json.loads(rec_path.read_text())
    rec["config"]["train"]["lr"] = 123.0
    rec_path.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["repro", "urn-dyck", "--rows", ROW, "--tiny", "--out", str(tmp_path / "other"), "--threads", "1",
                 "--results", str(tmp_path / "results")]) == 0
    err = capsys.readouterr().err
    assert "other settings" in err and "training" in err
    assert read_run(tmp_path / "results", "dyck-turn3-tiny-seed0")["config"]["train"]["lr"] != 123.0


def test_a_rows_rerun_keeps_the_other_rows_of_the_record(tmp_path):
    _repro(tmp_path)
    assert main(["repro", "urn-dyck", "--rows", "majority", "--tiny", "--out", str(tmp_path / "fresh"), "--quiet",
                 "--results", str(tmp_path / "results")]) == 0
    labels = [r["label"] for r in read_tables(tmp_path / "results")["urn-dyck"]["rows"]]
    assert any(lab.startswith("3-TURN (50") for lab in labels) and "majority-class baseline" in labels


def test_rows_with_equals_picks_the_one_label(tmp_path, capsys):
    """--rows =LABEL runs that row alone, not the rows whose labels contain it; a text that is
    no label with = is an error (exit 2, one line)."""
    assert main(["repro", "urn-dyck", "--rows", "=3-TURN (50 units, 3-truncated)", "--tiny", "--out",
                 str(tmp_path / "o"), "--quiet", "--threads", "1", "--results", str(tmp_path / "results")]) == 0
    runs = {p.name for p in (tmp_path / "o" / "runs").iterdir()}
    assert runs == {"dyck-turn3-tiny-seed0"}                # not the -matrix or -anneal rows' runs
    capsys.readouterr()
    assert main(["repro", "urn-dyck", "--rows", "=3-TURN (50", "--tiny", "--out", str(tmp_path / "p"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no row label" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_tiny_writes_no_records_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["repro", "urn-dyck", "--rows", "majority", "--tiny", "--out", "o", "--quiet"]) == 0
    results = default_results_dir()
    if results is not None:
        assert not any(p.name.endswith("-tiny-seed0") for p in (results / "runs").glob("*")) \
            if (results / "runs").is_dir() else True


def _stop_by_time(folder, epochs=1, limit=5.0):
    """Make the run in `folder` look stopped by its time limit (the trainer's metrics line)."""
    with open(folder / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"stopped": "time_limit", "after_epoch": epochs, "seconds_spent": 4.0,
                            "time_limit": limit}) + "\n")


def test_a_time_limited_run_is_labelled_and_not_reused_as_a_full_one(tmp_path, capsys):
    """A run its time limit stopped: its row says so (budget "time-limited", the epochs it
    finished), a repro with --time-limit reuses it, one without trains it again."""
    _repro(tmp_path)
    name = "dyck-turn3-tiny-seed0"
    for folder in (tmp_path / "out" / "runs" / name, tmp_path / "results" / "runs" / name):
        _stop_by_time(folder)
    capsys.readouterr()

    def repro(out, *extra):
        assert main(["repro", "urn-dyck", "--rows", ROW, "--tiny", "--out", str(tmp_path / out), "--threads", "1",
                     "--results", str(tmp_path / "results"), *extra]) == 0
        return capsys.readouterr().err

    err = repro("out", "--time-limit", "5")
    assert f"reusing {tmp_path / 'out' / 'runs' / name}" in err and "training" not in err
    row = next(r for r in read_tables(tmp_path / "results")["urn-dyck"]["rows"] if r["label"].startswith(ROW))
    assert row["budget_name"] == "time-limited"
    assert row["budget"].startswith("stopped by a 5 s time limit after 1 of 1 epochs; ")
    assert "--time-limit 5" in read_tables(tmp_path / "results")["urn-dyck"]["command"]
    err = repro("other")                # no run in this folder: the record would stand in, but not this one
    assert "stopped by a time limit" in err and "training" in err
    row = next(r for r in read_tables(tmp_path / "results")["urn-dyck"]["rows"] if r["label"].startswith(ROW))
    assert row["budget_name"] == "tiny" and not row["budget"].startswith("stopped")
    _stop_by_time(tmp_path / "out" / "runs" / name)
    err = repro("out")                  # the run folder itself, stopped so: trained again too
    assert "stopped by a time limit" in err and "training" in err


def _record(rows):
    return {"table": "t", "command": "rnnlens repro t --budget full", "rows": rows}


def _row(label, values, budget_name="full", runs=()):
    return {"label": label, "status": "ok", "values": values, "budget": "15 epochs max", "budget_name": budget_name,
            "data_used": "sst2", "note": "", "checks": [], "runs": list(runs)}


def test_verdicts_quick_is_never_reproduced_and_far_above_is_flagged(tmp_path):
    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}, {"abs": 1.5},
              [Row("A", 85.0), Row("B", 85.0), Row("C", 85.0), Row("D", 85.0)])
    rec = _record([_row("A", [84.0]), _row("B", [84.0], "quick"), _row("C", [80.0]), _row("D", [90.0], runs=["r1"])])
    text, verdicts, named = table_markdown(t, rec, tmp_path)
    assert verdicts == ["reproduced", "within-quick", "missed", "above"] and named == 0
    assert "| A |" in text and "reproduced" in text and "within (quick)" in text and "above the paper" in text
    assert "full: 15 epochs max" in text and "quick: 15 epochs max" in text
    assert "`r1` (no record)" in text                  # a row naming a run without its record says so
    assert "Not run yet" not in text
    rec = _record([_row("A", [float("nan")]), _row("B", [84.0, float("nan")])])
    text, verdicts, _ = table_markdown(t, rec, tmp_path)
    assert verdicts == ["missed", "reproduced"] and "| A |  | 85.00 | diverged (nan) |" in text
    assert "| 84.00 (n=1; 1 of 2 diverged) |" in text
    rec = _record([_row("A", ["nan"]), _row("B", [84.0, "inf"])])     # as the strict-JSON records keep them
    text, verdicts, _ = table_markdown(t, rec, tmp_path)
    assert verdicts == ["missed", "reproduced"] and "| A |  | 85.00 | diverged (nan) |" in text
    assert "| 84.00 (n=1; 1 of 2 diverged) |" in text
    rec = _record([_row("A", [84.0], "time-limited"), _row("B", [80.0], "time-limited")])
    text, verdicts, _ = table_markdown(t, rec, tmp_path)
    assert verdicts == ["within-quick", "missed"] and "within (time-limited)" in text
    assert "Not run yet (no record): C; D." in text      # the table's rows without a record are named


def test_orderings_are_checked(tmp_path):
    t = Table("t", "recurrent-memory-networks", "Table 2", "title", "train", "",
              {"key": "test_ppl", "higher_is_better": False}, {"rel": 0.1, "order": [["RM", "<", "LSTM"]]},
              [Row("RM", 123.5), Row("LSTM", 126.1)])
    text, verdicts, _ = table_markdown(t, _record([_row("RM", [130.0]), _row("LSTM", [128.0])]), tmp_path)
    assert "ordering: RM < LSTM" in text and verdicts[-1] == "missed"
    text, verdicts, named = table_markdown(t, _record([_row("RM", [130.0]), _row("LSTM", [128.0])]), tmp_path,
                                           {"ordering: RM < LSTM": "one seed at a quick budget"})
    assert "**why:** one seed at a quick budget" in text and named == 1
    text, verdicts, _ = table_markdown(t, _record([_row("RM", [120.0]), _row("LSTM", [128.0])]), tmp_path)
    assert verdicts[-1] == "reproduced"


def test_causes_are_shown_only_where_a_line_is_outside_and_counted(tmp_path, monkeypatch):
    """A row's named cause goes into the note of its lines outside the tolerance (missed or
    above), not of a line within; the summary counts the lines outside that have one."""
    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}, {"abs": 1.5},
              [Row("A", 85.0), Row("C", 85.0), Row("D", 85.0)])
    rec = _record([_row("A", [84.0]), _row("C", [80.0]), _row("D", [90.0])])
    causes = {"A": "never shown", "C": "no GloVe vectors (see the note)"}
    text, verdicts, named = table_markdown(t, rec, tmp_path, causes)
    assert named == 1 and "never shown" not in text
    assert "**why:** no GloVe vectors (see the note)" in text
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.json").write_text(json.dumps(rec))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "causes.json").write_text(json.dumps({"t": causes}))
    import rnnlens.repro.report as report

    monkeypatch.setattr(report, "load_tables", lambda: {"t": t})
    out = render(tmp_path)
    assert "| t | 3 of 3 | 1 | 0 | 1 | 1 | 1 of 2 | 0 |" in out


def test_an_ablation_row_shows_where_it_lands_and_is_counted_apart(tmp_path, monkeypatch):
    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}, {"abs": 1.5},
              [Row("A", 85.0), Row("A (no vectors)", 85.0, extra={"ablation": "random embeddings"}),
               Row("B (no vectors)", 85.0, extra={"ablation": "random embeddings"})])
    rec = _record([_row("A", [80.0]), _row("A (no vectors)", [78.0]), _row("B (no vectors)", [85.5])])
    causes = {"A": "a cause", "A (no vectors)": "the vectors"}
    text, verdicts, named = table_markdown(t, rec, tmp_path, causes)
    assert verdicts == ["missed", "ablation", "ablation"] and named == 1    # only the paper's row needs one
    line = next(x for x in text.splitlines() if x.startswith("| A (no vectors) |"))
    assert "| ablation: worse |" in line and "**ablation:** random embeddings" in line and "the vectors" in line
    assert "| ablation: within |" in next(x for x in text.splitlines() if x.startswith("| B (no vectors) |"))
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.json").write_text(json.dumps(rec))
    import rnnlens.repro.report as report

    monkeypatch.setattr(report, "load_tables", lambda: {"t": t})
    assert "| t | 3 of 3 | 0 | 0 | 1 | 0 | 0 of 1 | 2 |" in render(tmp_path)


def test_the_summary_totals_the_cpu_tables_and_the_language_model_tables_apart(tmp_path, monkeypatch):
    """The summary closes with the share of lines reproduced over the tables run at the papers'
    budgets on a CPU, and apart over the language-model tables; ablations are not counted."""
    metric = {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}
    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "", metric, {"abs": 1.5},
              [Row("A", 85.0), Row("B", 85.0), Row("C", 85.0), Row("D", 85.0, extra={"ablation": "x"})])
    lm = Table("lm", "implicit-ngrams-induced-by-recurrence", "Table 5", "title", "train", "",
               {"key": "test_perplexity", "higher_is_better": False}, {"rel": 0.1}, [Row("E", 100.0), Row("F", 100.0)],
               language_model=True)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "t.json").write_text(json.dumps(
        _record([_row("A", [84.0]), _row("B", [80.0]), _row("C", [84.5]), _row("D", [85.0])])))
    lm_rec = _record([_row("E", [105.0], "quick"), _row("F", [150.0])]) | {"table": "lm"}
    (tmp_path / "tables" / "lm.json").write_text(json.dumps(lm_rec))
    import rnnlens.repro.report as report

    monkeypatch.setattr(report, "load_tables", lambda: {"t": t, "lm": lm})
    out = render(tmp_path)
    assert "- Tables run at the papers' budgets on a CPU (every table but the language-model ones): " \
           "2 of 3 lines reproduced (66.7%)." in out
    assert "- Language-model tables (most of their papers' budgets need a GPU): 0 of 2 lines reproduced (0.0%); " \
           "1 more within the tolerance at a shorter budget." in out


def test_the_language_model_tables_are_the_ones_whose_budgets_need_a_gpu():
    lm = {tid for tid, t in load_tables().items() if t.language_model}
    assert lm == {tid for tid, t in load_tables().items() if t.metric.get("name") == "perplexity"} | \
        {"urn-agreement", "rmn-msr"}


def test_a_row_whose_config_file_changed_since_its_run_says_so(tmp_path, monkeypatch):
    """A run recorded under a config file that has been edited since (a setting the paper's
    text called for, found later) still renders, as it was run, but its note names what
    changed and the summary lists the row; an unchanged file, a settings change --resume may
    make (threads) and the vectors' folder are not changes."""
    from rnnlens.config import load_config_file

    import rnnlens.repro.report as report

    configs = tmp_path / "configs"
    configs.mkdir()
    base = json.loads((REPO / "configs" / "sst2-gru.json").read_text())
    base["model"]["embeddings_file"] = "v.txt"
    (configs / "sst2-gru.json").write_text(json.dumps(base))
    ran = load_config_file(configs / "sst2-gru.json").to_dict()
    ran["train"].update(seed=0, threads=1)
    ran["model"]["embeddings_file"] = "repro-x/vectors/v.txt"     # where repro made the vectors
    record = {"config": ran, "config_file": "configs/sst2-gru.json", "budget": "full", "seed": 0, "test": {}}
    assert report.config_changes(record, configs) == []
    assert report.config_changes(record, None) == [] and report.config_changes({"config": ran}, configs) == []
    assert report.config_changes(dict(record, budget="nonesuch"), configs) == []    # cannot tell
    base["train"]["lr"] = ran["train"]["lr"] * 2
    (configs / "sst2-gru.json").write_text(json.dumps(base))
    flip = f"train.lr ({ran['train']['lr']} -> {ran['train']['lr'] * 2})"
    assert report.config_changes(record, configs) == [flip]

    results = tmp_path / "results"
    (results / "runs" / "r1").mkdir(parents=True)
    (results / "runs" / "r1" / "record.json").write_text(json.dumps(record))
    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}, {"abs": 1.5},
              [Row("A", 85.0), Row("B", 85.0)])
    (results / "tables").mkdir()
    (results / "tables" / "t.json").write_text(json.dumps(_record([_row("A", [84.0], runs=["r1"]), _row("B", [85.0])])))
    monkeypatch.setattr(report, "load_tables", lambda: {"t": t})
    out = render(results, configs=configs)
    assert f"**config changed since this run:** {flip}" in out
    assert "1 row ran under a config that has changed since" in out and "t: A" in out
    assert "config changed" not in render(results)           # no configs folder: nothing compared


def test_what_makes_another_run():
    """Threads, the data folder and the folder repro made the word vectors in do not make
    another run; a setting, or another vectors file, does."""
    from rnnlens.config import Config
    from rnnlens.repro.run import run_differences

    a = Config().to_dict()
    a["model"]["embeddings_file"] = "repro-a/vectors/imdb-w2v-300d.txt"
    b = json.loads(json.dumps(a))
    b["model"]["embeddings_file"] = "repro-b/vectors/imdb-w2v-300d.txt"
    b["train"]["threads"], b["data"]["data_dir"] = 7, "elsewhere/data"
    assert run_differences(a, b) == []
    b["model"]["embeddings_file"] = "repro-b/vectors/other.txt"
    b["model"]["spectral_norm"] = True
    assert run_differences(a, b) == ["model.embeddings_file ('imdb-w2v-300d.txt' -> 'other.txt')",
                                     "model.spectral_norm (False -> True)"]


def test_a_table_record_drops_earlier_rows_without_runs(tmp_path):
    """A --rows rerun keeps the earlier rows that have runs; an earlier 'no config' row is not
    kept (the rerun re-derives every such row that still stands)."""
    from rnnlens.repro.command import results_rows
    from rnnlens.repro.records import write_table

    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy"}, {"abs": 1.5}, [Row("A", 85.0), Row("B", 85.0), Row("C", 85.0)])
    gone = dict(_row("B", []), status="no config", runs=[])
    write_table(tmp_path, "t", _record([_row("A", [84.0], runs=["r1"]), gone]))
    assert [r["label"] for r in results_rows(tmp_path, t, {"rows": [_row("C", [85.0], runs=["r2"])]})] == ["A", "C"]
    still = dict(gone, note="the config is still missing")
    assert results_rows(tmp_path, t, {"rows": [still]})[1] == still


def test_a_rows_rerun_changes_only_the_rows_it_names(tmp_path):
    """A row the rerun does not name keeps its earlier record (a 3-seed row stays a 3-seed
    row when another row is rerun with one seed); a named row takes this run's result."""
    from rnnlens.repro.command import results_rows
    from rnnlens.repro.records import write_table

    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy"}, {"abs": 1.5}, [Row("A", 85.0), Row("B", 85.0), Row("C", 85.0)])
    three = _row("A", [84.0, 85.0, 86.0], runs=["a0", "a1", "a2"])
    write_table(tmp_path, "t", _record([three, _row("B", [80.0], runs=["b0"])]))
    new = {"rows": [_row("A", [84.0], runs=["a0"]), _row("B", [83.0], runs=["b0"]), _row("C", [85.0], runs=["c0"])]}
    rows = {r["label"]: r for r in results_rows(tmp_path, t, new, selected={"B"})}
    assert rows["A"] == three and rows["B"]["values"] == [83.0] and rows["C"]["runs"] == ["c0"]
    assert {r["label"]: r for r in results_rows(tmp_path, t, new)}["A"]["values"] == [84.0]   # every row named


def test_a_row_whose_data_is_not_found_keeps_its_recorded_runs(tmp_path):
    """Data missing here (no --data-dir, another machine) says nothing about a recorded
    result: that row keeps the earlier record's runs, named or not; a row with no record
    takes this run's 'missing data'."""
    from rnnlens.repro.command import results_rows
    from rnnlens.repro.records import write_table

    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy"}, {"abs": 1.5}, [Row("A", 85.0), Row("B", 85.0)])
    a = _row("A", [84.0], runs=["r1"])
    write_table(tmp_path, "t", _record([a]))
    missing = {"rows": [dict(_row(lab, []), status="missing data", runs=[]) for lab in ("A", "B")]}
    for selected in (None, {"A"}):
        rows = results_rows(tmp_path, t, missing, selected)
        assert rows[0] == a and rows[1]["status"] == "missing data"


def test_repro_without_its_data_leaves_the_table_record_as_it_was(tmp_path, capsys):
    """`rnnlens repro TABLE` with no --data-dir finds none of its data: the table's record
    (the committed one), rows and command, is left as it was, byte for byte."""
    import shutil

    from rnnlens.cli import main

    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    shutil.copy(REPO / "results" / "tables" / "ngrams-table3.json", results / "tables")
    before = (results / "tables" / "ngrams-table3.json").read_bytes()
    assert main(["repro", "ngrams-table3", "--out", str(tmp_path / "rp"), "--results", str(results)]) == 0
    assert "missing data" in capsys.readouterr().out
    assert (results / "tables" / "ngrams-table3.json").read_bytes() == before


def test_a_malformed_causes_file_is_one_clear_error(tmp_path):
    from rnnlens.errors import RnnlensError
    from rnnlens.repro.records import read_causes

    assert read_causes(tmp_path) == {}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "causes.json").write_text('{"t": ["a list"]}')
    with pytest.raises(RnnlensError, match="causes.json"):
        read_causes(tmp_path)


def test_every_committed_cause_names_a_row_of_its_table():
    """A cause keyed by a label the table does not have (a typo, a renamed row) would never
    show: every key of results/notes/causes.json is a row (or a stated ordering) of its table."""
    from rnnlens.repro.records import read_causes

    tables = load_tables()
    for tid, causes in read_causes(REPO / "results").items():
        assert tid in tables, tid
        t = tables[tid]
        orders = {f"ordering: {a} {op} {b}" for a, op, b in (t.tolerance or {}).get("order") or []}
        for label in causes:
            assert label in {r.label for r in t.rows} | orders, (tid, label)


def test_render_is_deterministic_and_reads_only_records(tmp_path):
    _repro(tmp_path)
    a = render(tmp_path / "results")
    b = render(tmp_path / "results")
    assert a == b and "urn-dyck" in a and "dyck-turn3-tiny-seed0" in a
    assert main(["repro", "--render", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "R.md")]) == 0
    assert (tmp_path / "R.md").read_text() == a


def test_the_commit_a_record_keeps_can_be_named(monkeypatch):
    from rnnlens.repro.records import commit

    monkeypatch.setenv("RNNLENS_COMMIT", "abc123def456")
    assert commit() == "abc123def456"
    monkeypatch.delenv("RNNLENS_COMMIT")
    assert commit() != "abc123def456"


def test_records_name_the_commit_the_process_started_at(monkeypatch):
    """A process keeps the commit it started at for every record it writes, however the
    checkout moves while it trains."""
    from rnnlens.repro import records

    records.process_commit.cache_clear()
    try:
        monkeypatch.setenv("RNNLENS_COMMIT", "aaaaaaaaaaaa")
        assert records.environment()["commit"] == "aaaaaaaaaaaa"
        monkeypatch.setenv("RNNLENS_COMMIT", "bbbbbbbbbbbb")
        assert records.commit() == "bbbbbbbbbbbb" and records.environment()["commit"] == "aaaaaaaaaaaa"
    finally:
        records.process_commit.cache_clear()     # later tests see their own commit


def test_portable_paths():
    assert portable("../shared/data") == "../shared/data"
    assert not portable(str(REPO / "configs" / "x.json")).startswith("/")


def test_the_committed_reproduction_is_the_render_of_the_records():
    """REPRODUCTION.md is exactly what `rnnlens repro --render` writes from results/."""
    results = REPO / "results"
    if not results.is_dir():
        pytest.skip("no results/ in this checkout")
    assert (REPO / "REPRODUCTION.md").read_text(encoding="utf-8") == render(results, configs=REPO / "configs"), \
        "REPRODUCTION.md differs from `rnnlens repro --render --out REPRODUCTION.md`: render it again"


def test_every_number_has_a_record():
    results = REPO / "results"
    if not results.is_dir():
        pytest.skip("no results/ in this checkout")
    tables = load_tables()
    for tid, rec in read_tables(results).items():
        assert tid in tables, tid
        for row in rec["rows"]:
            if row["status"] == "ok" and row["runs"]:
                for name in row["runs"]:
                    assert read_run(results, name) is not None, f"{tid} / {row['label']}: no record of {name}"


def test_figures_draw_the_gap_to_the_paper_and_the_curves(tmp_path, monkeypatch):
    """A table of single numbers gets a dot per line at ours - paper (relative for a
    perplexity tolerance), coloured by verdict; a table valued per attractor count gets its
    curves and bound. `--render --out` writes the PNGs and links them from the file."""
    import rnnlens.repro.report as report
    from rnnlens.repro.report import figure_data

    t = Table("t", "implicit-ngrams-induced-by-recurrence", "Table 3", "title", "train", "",
              {"key": "test_accuracy", "higher_is_better": True, "unit": "%"}, {"abs": 1.5},
              [Row("A", 85.0), Row("C", 85.0)])
    rec = _record([_row("A", [84.0, 86.0]), _row("C", [80.0])])
    data = figure_data(t, report.table_results(t, rec))
    assert data["kind"] == "gap" and data["band"] == 1.5 and not data["relative"] and data["unit"] == "points"
    assert [(r["label"], r["diff"], r["verdict"]) for r in data["rows"]] == [("A", 0.0, "reproduced"), ("C", -5.0, "missed")]
    assert data["rows"][0]["std"] > 0
    d = Table("d", "unitary-recurrent-networks", "Fig", "title", "dyck-by-attractors", "",
              {"key": "err", "name": "error"}, {"max": 0.1}, [Row("URN", None)])
    rec_d = {"table": "d", "rows": [_row("URN", [{"0": 0.2, "1": 0.1, "10": 0.0}])]}
    data = figure_data(d, report.table_results(d, rec_d))
    assert data == {"kind": "curves", "series": {"URN": {"0": 0.2, "1": 0.1, "10": 0.0}}, "bound": 0.1,
                    "xlabel": "attractors"}
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "tables" / "t.json").write_text(json.dumps(rec))
    (results / "tables" / "d.json").write_text(json.dumps(rec_d))
    monkeypatch.setattr(report, "load_tables", lambda: {"t": t, "d": d})
    assert main(["repro", "--render", "--results", str(results), "--out", str(tmp_path / "R.md")]) == 0
    text = (tmp_path / "R.md").read_text()
    for tid in ("t", "d"):
        assert f"](results/figures/{tid}.png)" in text
        assert (results / "figures" / f"{tid}.png").read_bytes()[:4] == b"\x89PNG"
    assert "figures/" not in report.render(results, figures=None)


def test_every_trained_rows_number_is_its_runs_record():
    """A row of a train table shows, per run, exactly what that run's record holds: a run
    trained again under the same name (an edited config) leaves no table showing the old
    number. (Rows computed by an analysis from the weights are checked for their records'
    existence above.)"""
    from rnnlens.repro.run import metric_value

    results = REPO / "results"
    if not results.is_dir():
        pytest.skip("no results/ in this checkout")
    tables = load_tables()
    for tid, rec in read_tables(results).items():
        table = tables[tid]
        if table.kind != "train":
            continue
        rows = {r.label: r for r in table.rows}
        for row in rec["rows"]:
            if row["status"] != "ok" or not row["runs"] or row["label"] not in rows:
                continue
            got = [metric_value(table, rows[row["label"]], read_run(results, n)["test"]) for n in row["runs"]]
            assert got == pytest.approx(row["values"], rel=1e-9, nan_ok=True), (tid, row["label"])


def test_a_run_replaced_under_its_name_warns_of_the_tables_still_citing_it(tmp_path, capsys):
    """When a run is trained again with other settings, its record is replaced; the other
    tables whose rows read that run are named in a warning, to be computed again."""
    _repro(tmp_path)
    results = tmp_path / "results"
    (results / "tables" / "other.json").write_text(json.dumps(
        {"table": "other", "rows": [{"label": "x", "status": "ok", "runs": ["dyck-turn3-tiny-seed0"]}]}))
    from rnnlens.repro.records import tables_citing

    assert tables_citing(results, "dyck-turn3-tiny-seed0") == ["other", "urn-dyck"]
    assert tables_citing(results, "dyck-turn3-tiny-seed0", but="urn-dyck") == ["other"]
    rec_path = results / "runs" / "dyck-turn3-tiny-seed0" / "record.json"
    rec = json.loads(rec_path.read_text())
    rec["config"]["train"]["lr"] = 123.0             # a record of other settings, and numbers
    rec["test"]["test_loss"] += 1.0
    rec_path.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["repro", "urn-dyck", "--rows", ROW, "--tiny", "--out", str(tmp_path / "again"), "--threads", "1",
                 "--results", str(results)]) == 0
    err = capsys.readouterr().err
    assert "warning: dyck-turn3-tiny-seed0 replaces a recorded run" in err and "other still show" in err


def test_two_repros_sharing_the_records_keep_each_others_rows(tmp_path):
    """The read-merge-write of a table record waits for the lock another repro holds on it, so
    rows written in between are kept, not written over."""
    import threading
    import time

    from rnnlens.repro.records import read_tables, tables_locked, write_table

    write_table(tmp_path, "t", _record([_row("A", [1.0], runs=["a"])]))
    done = []

    def second():
        with tables_locked(tmp_path):
            rows = read_tables(tmp_path)["t"]["rows"] + [_row("B", [2.0], runs=["b"])]
            write_table(tmp_path, "t", _record(rows))
        done.append(True)

    with tables_locked(tmp_path):
        worker = threading.Thread(target=second)
        worker.start()
        time.sleep(0.2)
        assert not done                                  # it waits while this one holds the lock
        rows = read_tables(tmp_path)["t"]["rows"] + [_row("C", [3.0], runs=["c"])]
        write_table(tmp_path, "t", _record(rows))
    worker.join(5)
    assert [r["label"] for r in read_tables(tmp_path)["t"]["rows"]] == ["A", "C", "B"]


def test_the_data_used_names_no_absolute_path_of_this_machine():
    from rnnlens.config import Config
    from rnnlens.repro.records import REPO
    from rnnlens.repro.run import data_used_text

    cfg = Config.from_dict({"data": {"corpus": "semeval", "data_dir": str(REPO.parent / "shared" / "data")}})
    assert data_used_text(cfg) == "semeval from ../shared/data"
    cfg = Config.from_dict({"data": {"corpus": "semeval", "data_dir": "../shared/data"}})
    assert data_used_text(cfg) == "semeval from ../shared/data"


def test_the_summary_counts_only_the_rows_the_table_still_has(tmp_path):
    _repro(tmp_path)
    path = tmp_path / "results" / "tables" / "urn-dyck.json"
    rec = json.loads(path.read_text())
    line = next(ln for ln in render(tmp_path / "results").splitlines() if ln.startswith("| urn-dyck |"))
    path.write_text(json.dumps({**rec, "rows": rec["rows"] + [{**rec["rows"][0], "label": "a row since renamed"}]}))
    again = next(ln for ln in render(tmp_path / "results").splitlines() if ln.startswith("| urn-dyck |"))
    assert again == line
