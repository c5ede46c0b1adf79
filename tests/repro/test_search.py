"""Random hyper-parameter search of a reproduction row (rnnlens.repro.search)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rnnlens.errors import RnnlensError
from rnnlens.repro import Row, Table, _table_from_dict, default_configs_dir, load_tables
from rnnlens.repro.pipelines import run_table
from rnnlens.repro.records import read_run, read_tables
from rnnlens.repro.render import row_record
from rnnlens.repro.report import config_changes, table_markdown
from rnnlens.repro.run import Context
from rnnlens.repro.search import check_search, draw, trial_name

SPACE = {"model.hidden_size": {"int": [4, 12]}, "train.lr": {"log": [1e-3, 1e-1]},
         "model.embedding_dropout": {"uniform": [0.0, 0.5]}}


def _table(trials=3, space=SPACE, rows=None):
    return Table("t-search", "unitary-recurrent-networks", "Fig", "a tuned table", "train", "",
                 {"key": "test_accuracy", "scale": 100, "name": "accuracy"}, {"abs": 1.5},
                 rows if rows is not None else [Row("3-TURN (tuned)", 90.0, config="dyck-turn3.json",
                                                    extra={"search": True})],
                 search={"trials": trials, "space": space})


def test_draws_are_deterministic_in_bounds_rounded_and_do_not_depend_on_the_order_written():
    a = [draw(SPACE, t, "x") for t in range(50)]
    assert a == [draw(dict(reversed(list(SPACE.items()))), t, "x") for t in range(50)]
    assert a != [draw(SPACE, t, "y") for t in range(50)]
    assert len({json.dumps(d, sort_keys=True) for d in a}) == 50
    for d in a:
        assert set(d) == {"model", "train"}
        h, lr, p = d["model"]["hidden_size"], d["train"]["lr"], d["model"]["embedding_dropout"]
        assert isinstance(h, int) and 4 <= h <= 12
        assert 1e-3 * 0.95 <= lr <= 0.1 * 1.05 and float(f"{lr:.2g}") == lr
        assert 0.0 <= p <= 0.5 and round(p, 2) == p
    lrs = sorted(d["train"]["lr"] for d in a)          # log-uniform: about half under the geometric middle
    assert 10 <= sum(x < 1e-2 for x in lrs) <= 40


@pytest.mark.parametrize("search, msg", [
    ({"trials": 2, "space": {"model.nope": {"int": [1, 2]}}}, "not a config setting"),
    ({"trials": 2, "space": {"model.hidden_size": {"normal": [1, 2]}}}, "give one of"),
    ({"trials": 2, "space": {"model.hidden_size": {"int": [3, 2]}}}, "lo <= hi"),
    ({"trials": 2, "space": {"train.lr": {"log": [0, 1]}}}, "lo > 0"),
    ({"trials": 0, "space": SPACE}, "trials"),
    ({"trials": 2, "space": {}}, "non-empty"),
])
def test_a_malformed_search_is_one_clear_error(search, msg):
    d = {"id": "x", "paper": "p", "rows": [{"label": "A", "paper": 1.0, "config": "c.json", "search": True}],
         "search": search}
    with pytest.raises(RnnlensError, match=msg):
        _table_from_dict(d, "x.json")


def test_a_search_row_needs_the_tables_search_and_a_config():
    with pytest.raises(RnnlensError, match="has no \"search\""):
        _table_from_dict({"id": "x", "paper": "p", "rows": [{"label": "A", "paper": 1.0, "config": "c.json",
                                                             "search": True}]}, "x.json")
    with pytest.raises(RnnlensError, match="names no config"):
        check_search(_table(rows=[Row("A", 1.0, extra={"search": True})]), "x.json")


def test_every_shipped_search_space_draws_settings_its_rows_configs_accept():
    """Each table's space, drawn at every trial, makes a valid config of each tuned row."""
    from rnnlens.config import Config, load_config_file

    configs = default_configs_dir()
    if configs is None:
        pytest.skip("no configs/ in this checkout")
    tuned = [(t, r) for t in load_tables().values() for r in t.rows if r.extra.get("search")]
    assert tuned, "no tuned rows shipped"
    for table, row in tuned:
        base = load_config_file(configs / row.config).to_dict()
        for k in range(table.search["trials"]):
            d = json.loads(json.dumps(base))
            for section, values in draw(table.search["space"], k, table.id).items():
                d[section].update(values)
            Config.from_dict(d)                # raises on a value out of its range


def test_a_tuned_row_trains_every_trial_picks_the_best_dev_and_runs_its_seeds(tmp_path):
    table = _table()
    results = tmp_path / "results"
    ctx = Context(out=tmp_path / "o", seeds=2, configs=default_configs_dir(), threads=1, progress=False,
                  tiny=True, results=results, command="test")
    (res,) = run_table(ctx, table)
    trials = res.search["trials"]
    assert [t["run"] for t in trials] == [f"{trial_name('dyck-turn3.json', k)}-tiny-seed0" for k in range(2)]
    best = max(trials, key=lambda t: (t["dev"], -t["trial"]))
    assert res.search["best"] == best["trial"]
    stem = trial_name("dyck-turn3.json", best["trial"])
    assert [Path(p).name for p in res.runs] == [f"{stem}-tiny-seed0", f"{stem}-tiny-seed1"]
    for t in trials:                              # the dev score is the trial's best epoch's
        rec = read_run(results, t["run"])
        assert rec["overrides"] == draw(table.search["space"], t["trial"], table.id) == t["overrides"]
        assert rec["config"]["model"]["hidden_size"] == t["overrides"]["model"]["hidden_size"]
        assert config_changes(rec, default_configs_dir()) == []       # the setting is not a change
        dev = [json.loads(x) for x in (results / "runs" / t["run"] / "metrics.jsonl").read_text().splitlines()]
        assert t["dev"] == next(x["dev_accuracy"] for x in dev if x.get("epoch") == rec["test"]["best_epoch"])
    seed1 = read_run(results, f"{stem}-tiny-seed1")
    assert seed1["config"]["train"]["seed"] == 1 and seed1["overrides"] == best["overrides"]
    assert f"trial {best['trial']} of 2" in res.note
    # again: every trial and seed is reused, nothing trained
    before = {p.name: p.stat().st_mtime_ns for p in (results / "runs").iterdir()}
    (again,) = run_table(ctx, table)
    assert again.values == res.values and again.search == res.search
    assert {p.name: p.stat().st_mtime_ns for p in (results / "runs").iterdir()} == before
    # a fresh output folder: the trials are read from their records alone
    (third,) = run_table(Context(**{**ctx.__dict__, "out": tmp_path / "other"}), table)
    assert third.values == res.values and not (tmp_path / "other" / "runs").exists()


def test_a_tuned_rows_record_names_its_trials_and_renders_them(tmp_path):
    table = _table(trials=2)
    results = tmp_path / "results"
    ctx = Context(out=tmp_path / "o", configs=default_configs_dir(), threads=1, progress=False, tiny=True,
                  results=results, command="test")
    (res,) = run_table(ctx, table)
    rec = {"table": table.id, "rows": [row_record(res)]}
    assert rec["rows"][0]["search"]["best"] in (0, 1)
    text, _, _ = table_markdown(table, json.loads(json.dumps(rec)), results, configs=default_configs_dir())
    first, last = (t["run"] for t in res.search["trials"])
    assert f"searched over 2 trials, `{first}` to `{last}`" in text and "without a record" not in text
    assert "config changed" not in text
    (results / "runs" / last / "record.json").unlink()
    text, _, _ = table_markdown(table, rec, results, configs=default_configs_dir())
    assert "(1 without a record)" in text


def test_every_committed_tuned_rows_trials_have_records():
    from tests.support import REPO

    results = REPO / "results"
    if not results.is_dir():
        pytest.skip("no results/ in this checkout")
    for tid, rec in read_tables(results).items():
        for row in rec["rows"]:
            for t in (row.get("search") or {}).get("trials") or []:
                assert read_run(results, t["run"]) is not None, f"{tid} / {row['label']}: no record of {t['run']}"


def test_every_shipped_tuned_rows_untuned_twin_is_an_ablation():
    """A tuned row stands for the paper's row; the row that trains the same config at the
    shared setting must then be an ablation, or the paper's number is counted twice."""
    for table in load_tables().values():
        for row in table.rows:
            if not row.extra.get("search"):
                continue
            for other in table.rows:
                if other is not row and other.config == row.config and other.dataset == row.dataset:
                    assert other.extra.get("ablation"), (f"{table.id}: {other.label!r} trains the config of "
                                                         f"the tuned {row.label!r} but is not an ablation")


def test_a_row_with_overrides_is_not_a_changed_config_and_an_older_record_learns_its_overrides(tmp_path):
    """A run made with a row's overrides records them, so the render does not take the
    overrides for an edited config file; a record written before records kept them gains
    them the next time the row reads it."""
    table = Table("t-over", "unitary-recurrent-networks", "Fig", "t", "train", "",
                  {"key": "test_accuracy", "scale": 100}, {"abs": 1.5},
                  [Row("3-TURN wider", 90.0, extra={"base_config": "dyck-turn3.json",
                                                    "overrides": {"train": {"lr": 0.02}}})])
    results = tmp_path / "results"
    ctx = Context(out=tmp_path / "o", configs=default_configs_dir(), threads=1, progress=False, tiny=True,
                  results=results, command="test")
    (res,) = run_table(ctx, table)
    name = Path(next(iter(res.runs))).name
    path = results / "runs" / name / "record.json"
    rec = json.loads(path.read_text())
    assert rec["overrides"] == {"train": {"lr": 0.02}} and config_changes(rec, default_configs_dir()) == []
    del rec["overrides"]                                   # as an older record was written
    path.write_text(json.dumps(rec))
    from rnnlens.config import load_config_file

    full = load_config_file(default_configs_dir() / "dyck-turn3.json").to_dict()
    full["train"]["lr"] = 0.02
    made = {"config_file": "configs/dyck-turn3.json", "budget": "full", "seed": 0, "config": full}
    assert [c.split(" ")[0] for c in config_changes(made, default_configs_dir())] == ["train.lr"]
    assert config_changes({**made, "overrides": {"train": {"lr": 0.02}}}, default_configs_dir()) == []
    run_table(Context(**{**ctx.__dict__, "out": tmp_path / "fresh"}), table)      # read from the record
    again = json.loads(path.read_text())
    assert again["overrides"] == {"train": {"lr": 0.02}} and again["test"] == rec["test"]
    assert config_changes(again, default_configs_dir()) == []


def test_a_search_rows_own_overrides_stay_under_every_trial_and_init_from_is_refused(tmp_path):
    row = Row("3-TURN (tuned, smaller steps)", 90.0, config="dyck-turn3.json",
              extra={"search": True, "overrides": {"train": {"clip": 0.5}, "model": {"hidden_size": 99}}})
    table = _table(trials=2, rows=[row])
    results = tmp_path / "results"
    ctx = Context(out=tmp_path / "o", configs=default_configs_dir(), threads=1, progress=False, tiny=True,
                  results=results, command="test")
    (res,) = run_table(ctx, table)
    for t in res.search["trials"]:
        rec = read_run(results, t["run"])
        assert rec["config"]["train"]["clip"] == 0.5                        # the row's own
        assert rec["config"]["model"]["hidden_size"] == t["overrides"]["model"]["hidden_size"] != 99   # the draw's
    with pytest.raises(RnnlensError, match="init_from"):
        check_search(_table(rows=[Row("A", 1.0, config="dyck-turn3.json",
                                      extra={"search": True, "init_from": "dyck-urn.json"})]), "x.json")


def test_the_render_draws_and_links_the_search_of_the_tuned_rows(tmp_path, monkeypatch):
    from rnnlens.repro import report
    from rnnlens.repro.report import search_data

    table = _table(trials=2)
    results = tmp_path / "results"
    ctx = Context(out=tmp_path / "o", configs=default_configs_dir(), threads=1, progress=False, tiny=True,
                  results=results, command="test")
    (res,) = run_table(ctx, table)
    rec = {"table": table.id, "paper": table.paper, "source": table.source, "rows": [row_record(res)]}
    (results / "tables").mkdir(parents=True, exist_ok=True)
    (results / "tables" / f"{table.id}.json").write_text(json.dumps(rec))
    data = search_data(table, report.table_results(table, rec))
    assert data == [{"label": table.rows[0].label, "trials": [t["dev"] * 100 for t in res.search["trials"]],
                     "best": res.search["best"], "test": res.values[0], "paper": 90.0}]
    monkeypatch.setattr(report, "load_tables", lambda: {table.id: table})
    written = report.write_figures(results, results / "figures")
    assert results / "figures" / f"{table.id}-search.png" in written
    assert (results / "figures" / f"{table.id}-search.png").read_bytes()[:4] == b"\x89PNG"
    text = report.render(results, figures="results/figures")
    assert f"](results/figures/{table.id}-search.png)" in text
