"""`rnnlens repro`: the paper tables as package data, the tolerance checks, the renderers,
and a smoke run of every table's pipeline on a tiny slice (one runnable row per table;
the real-data tables skip without ../shared/data)."""
import json
from pathlib import Path

import pytest

from tests.support import REPO, shared_data_dir
from rnnlens.cli import main
from rnnlens.repro import Row, Table, load_tables
from rnnlens.repro.render import lines_of, markdown, to_html
from rnnlens.repro.pipelines import BASELINES, no_upward_trend, run_table
from rnnlens.repro.run import ABOVE, Context, RowResult, within

TABLES = load_tables()
EXPECTED = {"ngrams-table3", "ngrams-table4", "ngrams-table5", "ngrams-figure2", "seqlevel-table1", "seqlevel-table2",
            "seqlevel-table3", "rational-table3", "rational-table5", "urn-dyck", "urn-crossserial", "urn-agreement",
            "urn-table11.2", "urn-table11.3", "rmn-table2", "rmn-msr"}


def test_every_expected_table_is_there_with_valid_rows():
    assert EXPECTED <= set(TABLES)
    for t in TABLES.values():
        labels = [r.label for r in t.rows]
        assert len(labels) == len(set(labels)), t.id
        for r in t.rows:
            for name in (r.config, r.extra.get("base_config"), r.extra.get("init_from")):
                if name:
                    assert (REPO / "configs" / name).is_file(), (t.id, r.label, name)
            assert r.paper is None or isinstance(r.paper, (int, float, dict)), (t.id, r.label)


def test_paper_numbers_spot_checked_against_the_papers():
    """A few numbers read by hand from ../shared/papers (Table 3 GRU SST-2, RM(+tM-g) PTB,
    the 3-TURN's '(' average effect)."""
    def paper(tid, label):
        return next(r.paper for r in TABLES[tid].rows if r.label == label)
    assert paper("ngrams-table3", "GRU (SST-2)") == 84.9
    assert paper("rmn-table2", "RM(+tM-g) (PTB)") == 123.5
    assert paper("urn-table11.2", "(") == 14.79


def _table(tol, higher=True, rows=None):
    return Table("t", "p", "s", "title", "train", "", {"key": "test_accuracy", "higher_is_better": higher}, tol,
                 rows or [])


def test_a_row_above_the_paper_renders_flagged(tmp_path):
    """The per-table markdown and HTML name a row far above the paper, not a traceback."""
    from rnnlens.repro.render import markdown, to_html

    row = Row("LSTM (SST, word2vec)", 85.1)
    table = _table({"abs": 1.5}, rows=[row])
    res = [RowResult(row, values=[87.0], budget="full")]
    ctx = Context(out=tmp_path, progress=False)
    assert "above the paper" in markdown(table, res, ctx)
    assert "above the paper" in to_html(table, res, ctx)


def test_tolerances():
    row = Row("GRU", 84.9)
    acc = _table({"abs": 1.5})
    assert within(acc, row, 84.9, 83.4) is True
    assert within(acc, row, 84.9, 83.3) is False
    assert within(acc, row, 84.9, 86.4) is True
    assert within(acc, row, 84.9, 86.5) == ABOVE                   # far above the paper: flagged
    assert within(_table({"abs": 2.0, "side": "below"}), row, 84.9, 99.0) is True       # only a shortfall
    ppl = _table({"rel": 0.1}, higher=False)
    assert within(ppl, row, 100.0, 110.0) is True
    assert within(ppl, row, 100.0, 110.5) is False
    assert within(ppl, row, 100.0, 90.0) is True
    assert within(ppl, row, 100.0, 89.0) == ABOVE                  # far better than the paper: flagged
    assert within(_table({"max": 0.1}), row, None, 0.1) is True
    assert within(_table({"max": 0.1, "rows": ["other"]}), row, None, 0.5) is None         # not this row's
    assert within(_table(None), row, 84.9, 10.0) is None
    own = Row("MVMA-G", 85.3, extra={"tolerance": {"min": 84.0}})
    assert within(_table({"abs": 0.1}), own, 85.3, 84.0) is True                           # the row's own wins
    rel = Row("MVMA-G (PTB)", None, extra={"tolerance": {"rel": 0.1, "relative_to": "GRU (PTB)"}})
    assert within(_table(None, higher=False), rel, None, 109.0, reference=100.0) is True
    assert within(_table(None, higher=False), rel, None, 111.0, reference=100.0) is False


def test_no_upward_trend():
    assert no_upward_trend({"0": 0.1, "1": 0.09, "2": 0.05})
    assert no_upward_trend({"0": 0.05, "1": 0.051, "2": 0.052})          # flat within 0.01
    assert not no_upward_trend({"0": 0.01, "1": 0.05, "2": 0.12})


def test_render_mean_std_difference_and_html_escaping(tmp_path):
    rows = [Row("GRU <b>", 84.9, dataset="SST-2"), Row("by attractors", {"0": 0.1, "1": 0.2})]
    t = _table({"abs": 2.0, "side": "below"}, rows=rows)
    results = [RowResult(rows[0], values=[83.0, 84.0], budget="2 epochs"),
               RowResult(rows[1], values=[{"0": 0.1, "1": 0.4}, {"0": 0.3, "1": 0.2}])]
    lines = lines_of(t, results)
    assert lines[0]["mean"] == 83.5 and abs(lines[0]["std"] - 0.5 ** 0.5) < 1e-12
    assert abs(lines[0]["diff"] - (83.5 - 84.9)) < 1e-12 and lines[0]["ok"] is True
    assert [ln["label"] for ln in lines[1:]] == ["by attractors / 0", "by attractors / 1"]
    assert abs(lines[1]["mean"] - 0.2) < 1e-12 and abs(lines[2]["mean"] - 0.3) < 1e-12
    ctx = Context(out=tmp_path)
    md = markdown(t, results, ctx)
    assert "| GRU <b> | SST-2 | 84.90 | 83.50 ± 0.71 (n=2) | -1.40 | yes |" in md
    short = markdown(t, [RowResult(rows[0], values=[82.0], budget="2 epochs"), results[1]], ctx)
    assert "| GRU <b> | SST-2 | 84.90 | 82.00 | -2.90 | no |" in short
    page = to_html(t, results, ctx)
    assert "GRU &lt;b&gt;" in page and "GRU <b>" not in page


def _first_runnable(t, data):
    ctx = Context(out=Path("."), data_dir=data)
    from rnnlens.repro.run import missing_data
    for r in t.rows:
        if r.extra.get("missing") or missing_data(ctx, r):
            continue
        if r.config or r.extra.get("base_config") or (t.kind not in ("train", "completion") and
                                                      (r.key in BASELINES or t.kind == "polarity-table")):
            return r
    return None


GENERATED = ["urn-dyck", "urn-crossserial", "urn-table11.2", "seqlevel-table1"]
REAL = sorted(EXPECTED - set(GENERATED) - {"rmn-msr", "urn-table11.3"})


def _smoke(tid, tmp_path, data):
    t = TABLES[tid]
    row = _first_runnable(t, data)
    assert row is not None, tid
    t = Table(**{**t.__dict__, "rows": [row]})
    ctx = Context(out=tmp_path, data_dir=data, tiny=True, progress=False, threads=1,
                  configs=REPO / "configs")
    res = run_table(ctx, t)
    assert res[0].status == "ok" and res[0].values, (tid, res[0])
    md = markdown(t, res, ctx)
    assert row.label in md
    return res[0]


@pytest.mark.parametrize("tid", GENERATED)
def test_repro_smoke_generated_data(tid, tmp_path):
    r = _smoke(tid, tmp_path, None)
    if tid == "urn-dyck":
        assert isinstance(r.values[0], dict) and all(0 <= v <= 1 for v in r.values[0].values())
    if tid == "urn-crossserial":        # the URN row: the paper's "under 10% on average" gets a verdict
        what, ours, ok = next(c for c in r.checks if c[0] == "string error over the whole test set")
        assert 0 <= float(ours) <= 1 and ok is (float(ours) <= 0.1)


@pytest.mark.parametrize("tid", REAL)
def test_repro_smoke_real_data(tid, tmp_path, shared_data):
    _smoke(tid, tmp_path, shared_data)


def test_missing_data_is_named_never_replaced(tmp_path):
    t = TABLES["ngrams-table3"]
    row = next(r for r in t.rows if r.label == "GRU (SST-2)")
    ctx = Context(out=tmp_path, data_dir=tmp_path / "nothing-here", tiny=True, progress=False)
    res = run_table(ctx, Table(**{**t.__dict__, "rows": [row]}))
    assert res[0].status == "missing data" and "sst" in res[0].note
    ag = next(r for r in t.rows if r.label == "GRU (AG-news)")
    res = run_table(ctx, Table(**{**t.__dict__, "rows": [ag]}))
    assert res[0].status == "missing data" and "train.csv" in res[0].note


def test_cli_writes_md_html_json_and_reuses_runs(tmp_path, capsys):
    out = tmp_path / "repro"
    args = ["repro", "urn-dyck", "--rows", "3-TURN (50", "--tiny", "--out", str(out), "--quiet", "--threads", "1"]
    assert main(args) == 0
    for ext in ("md", "html", "json"):
        assert (out / f"urn-dyck.{ext}").is_file()
    data = json.loads((out / "urn-dyck.json").read_text())
    assert data["rows"][0]["status"] == "ok" and data["tiny"] is True
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["dyck-turn3-tiny-seed0"]
    stamp = (out / "runs" / runs[0] / "metrics.jsonl").stat().st_mtime
    assert main(args) == 0                                              # reused, not retrained
    assert (out / "runs" / runs[0] / "metrics.jsonl").stat().st_mtime == stamp
    assert "highest error over attractor counts" in (out / "urn-dyck.md").read_text()
    # a run whose saved settings differ from the config's (an edited config) is trained again;
    # settings that do not change the result (threads, time limit, the data folder's path) do not count
    cfg_file = out / "runs" / runs[0] / "config.json"
    saved = json.loads(cfg_file.read_text())
    saved["config"]["train"]["threads"] = 7
    saved["config"]["data"]["data_dir"] = "/data/moved/elsewhere"
    cfg_file.write_text(json.dumps(saved))
    loud = [a for a in args if a != "--quiet"]
    capsys.readouterr()
    assert main(loud) == 0 and "reusing" in capsys.readouterr().err
    assert (out / "runs" / runs[0] / "metrics.jsonl").stat().st_mtime == stamp
    saved["config"]["train"]["lr"] = 0.5
    cfg_file.write_text(json.dumps(saved))
    assert main(loud) == 0
    assert "trained with other settings (train.lr (0.5 -> " in capsys.readouterr().err
    assert json.loads(cfg_file.read_text())["config"]["train"]["lr"] != 0.5     # retrained with the config's


def test_rows_keeps_the_rows_already_run_and_trains_nothing_else(tmp_path, capsys):
    out = tmp_path / "repro"
    base = ["repro", "urn-dyck", "--tiny", "--out", str(out), "--threads", "1"]
    assert main(base + ["--rows", "3-TURN (50", "--quiet"]) == 0
    assert main(base + ["--rows", "LSTM (50"]) == 0
    assert "3-TURN (50 units, 3-truncated): kept (not in --rows" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["dyck-lstm-tiny-seed0", "dyck-turn3-tiny-seed0"]
    rows = json.loads((out / "urn-dyck.json").read_text())["rows"]
    labels = [r["label"] for r in rows]
    assert labels[:2] == ["3-TURN (50 units, 3-truncated)", "LSTM (50 units)"]     # the table's order
    assert "URN (full, 50 units)" not in labels                   # never run: left out, not trained


def test_rows_trains_no_demo_for_the_rows_left_out(tmp_path):
    out = tmp_path / "repro"
    assert main(["repro", "seqlevel-table1", "--tiny", "--out", str(out), "--quiet", "--rows", "GRU:"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["demo-gru-tiny-seed0"]     # no LSTM demo
    labels = [r["label"] for r in json.loads((out / "seqlevel-table1.json").read_text())["rows"]]
    assert labels and all(label.startswith("GRU:") for label in labels)


def test_a_second_phase_row_trains_its_first_phase_and_follows_it(tmp_path, capsys):
    """urn-dyck's two-phase 3-TURN: dyck-turn3-matrix, then dyck-turn3-anneal from its weights
    (train.init_from); reused while the first phase's weights are those it started from."""
    import shutil

    out, configs = tmp_path / "repro", tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    args = ["repro", "urn-dyck", "--rows", "word-vector-dropout phase", "--tiny", "--out", str(out), "--threads", "1",
            "--configs", str(configs)]
    assert main(args) == 0
    runs = out / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["dyck-turn3-anneal-tiny-seed0", "dyck-turn3-matrix-tiny-seed0"]
    second = runs / "dyck-turn3-anneal-tiny-seed0"
    assert json.loads((second / "config.json").read_text())["config"]["train"]["init_from"] == str(
        runs / "dyck-turn3-matrix-tiny-seed0")
    stamp = (second / "metrics.jsonl").stat().st_mtime
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "training" not in err and f"reusing {second}" in err and (second / "metrics.jsonl").stat().st_mtime == stamp
    first = configs / "dyck-turn3-matrix.json"           # an edited first phase is retrained ...
    first.write_text(first.read_text().replace('"lr": 0.01', '"lr": 0.02'))
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "holds other weights than those it started from" in err        # ... so the second one is too
    assert (second / "metrics.jsonl").stat().st_mtime != stamp


@pytest.mark.parametrize("argv,msg", [
    (["repro", "no-such-table", "--out", "x"], "unknown table"),
    (["repro", "urn-dyck"], "--out"),
    (["repro"], "name a table"),
    (["repro", "urn-dyck", "--out", "x", "--budget", "huge"], "--budget"),
    (["repro", "urn-dyck", "--out", "x", "--rows", "zzz-no-row"], "no row label"),
])
def test_cli_bad_input_is_one_line_exit_2(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_list_names_every_table_and_its_data(capsys):
    d = shared_data_dir()
    assert main(["repro", "--list"] + (["--data-dir", str(d)] if d.is_dir() else [])) == 0
    out = capsys.readouterr().out
    for tid in EXPECTED:
        assert tid in out
    assert "missing everywhere: AG News train.csv" in out


def test_list_of_named_tables_lists_those_alone(capsys):
    assert main(["repro", "--list", "urn-dyck", "seqlevel-table1"]) == 0
    out = capsys.readouterr().out
    assert "urn-dyck  (" in out and "seqlevel-table1  (" in out and "ngrams-table3" not in out
    assert main(["repro", "--list", "no-such-table"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-table" in err[0]


def test_list_says_which_tables_need_a_gpu_for_their_budgets(capsys):
    assert main(["repro", "--list", "ngrams-table5", "urn-dyck"]) == 0
    lm, dyck = capsys.readouterr().out.split("urn-dyck  (")
    assert "a language-model table: its paper's budget needs a GPU" in lm and "GPU" not in dyck


def _drop_from_test_line(log: Path, key: str, change: dict | None = None):
    """Remove `key` from the run log's last test line (a record older than that metric)."""
    lines = log.read_text(encoding="utf-8").splitlines()
    i = max(j for j, line in enumerate(lines) if json.loads(line).get("split") == "test")
    rec = json.loads(lines[i])
    value = rec.pop(key)
    rec.update(change or {})
    lines[i] = json.dumps(rec)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return value


def test_a_reused_run_lacking_a_metric_is_evaluated_again_not_retrained(tmp_path):
    """A table reading a metric that a reused run's test record predates evaluates the run's
    weights again (the same numbers for what the record had, the new metric added, marked),
    once; a run whose weights no longer give its recorded numbers is refused."""
    from rnnlens.errors import RnnlensError
    from rnnlens.repro.run import train_or_reuse

    row = next(r for r in TABLES["urn-dyck"].rows if r.label.startswith("3-TURN (50"))
    ctx = Context(out=tmp_path, tiny=True, progress=False, threads=1, configs=REPO / "configs")
    run = train_or_reuse(ctx, row.config, 0)
    log = run.path / "metrics.jsonl"
    weights = (run.path / "model.safetensors").read_bytes()
    value = _drop_from_test_line(log, "test_closing_error")
    assert "test_closing_error" not in train_or_reuse(ctx, row.config, 0).test     # not needed: as it is
    again = train_or_reuse(ctx, row.config, 0, need="test_closing_error")
    assert again.test["test_closing_error"] == pytest.approx(value, abs=1e-12)
    assert again.test["test_loss"] == pytest.approx(run.test["test_loss"], rel=1e-6)
    assert again.test["reevaluated"]["rnnlens"] and again.path == run.path
    assert (run.path / "model.safetensors").read_bytes() == weights                # not retrained
    n = len(log.read_text().splitlines())
    train_or_reuse(ctx, row.config, 0, need="test_closing_error")                  # now recorded
    assert len(log.read_text().splitlines()) == n

    _drop_from_test_line(log, "test_closing_error", {"test_loss": run.test["test_loss"] + 0.5})
    with pytest.raises(RnnlensError, match="not the recorded"):
        train_or_reuse(ctx, row.config, 0, need="test_closing_error")


def test_a_killed_repro_run_continues_from_its_last_checkpoint(tmp_path, monkeypatch):
    """A repro killed mid-run keeps RUN.partial/ with its checkpoints; the same call again
    resumes there and ends with the weights and test record of a run never interrupted."""
    from rnnlens.repro.run import train_or_reuse
    from rnnlens.train import resume

    row = next(r for r in TABLES["urn-dyck"].rows if r.label.startswith("3-TURN (50"))
    every = {"train": {"checkpoint_every": 1}}
    whole = train_or_reuse(Context(out=tmp_path / "a", tiny=True, progress=False, threads=1,
                                   configs=REPO / "configs"), row.config, 0, overrides=every)
    real_save, calls = resume.Checkpoints.save, []

    def killed_after_first(self, state, tensors):
        path = real_save(self, state, tensors)
        calls.append(path)
        raise KeyboardInterrupt
    monkeypatch.setattr(resume.Checkpoints, "save", killed_after_first)
    logs = []
    ctx = Context(out=tmp_path / "b", tiny=True, progress=False, threads=1, configs=REPO / "configs")
    ctx.log = logs.append
    with pytest.raises(KeyboardInterrupt):
        train_or_reuse(ctx, row.config, 0, overrides=every)
    part = resume.partial_dir(tmp_path / "b" / "runs" / whole.path.name)
    assert part.is_dir() and not part.with_name(whole.path.name).exists() and len(calls) == 1
    monkeypatch.setattr(resume.Checkpoints, "save", real_save)
    again = train_or_reuse(ctx, row.config, 0, overrides=every)
    assert any("resuming from" in line for line in logs)
    assert not part.exists() and not (again.path / "checkpoints").exists()
    assert (again.path / "model.safetensors").read_bytes() == (whole.path / "model.safetensors").read_bytes()
    assert again.test["test_loss"] == pytest.approx(whole.test["test_loss"], rel=1e-6)
    assert again.test["test_by_attractors"] == whole.test["test_by_attractors"]


def test_the_demo_rows_carry_the_full_budget(tmp_path, monkeypatch):
    """Sequence-level Table 1 runs the demo, which has one setting: its rows are labelled full
    (so a passing check reads 'reproduced', not 'within (quick)') whatever --budget says."""
    import rnnlens.demo
    from rnnlens.repro.pipelines import KINDS

    adjectives = [f"a{i}" for i in range(22)]
    summary = {"table": {g: {f: {"mean": 1.0} for f in ("token", "negation", "double_negation")}
                         for g in ("positive", "negative")},
               "seconds": 1.0, "model": {"hidden_size": 32}, "best_epoch": 6, "adjectives": adjectives,
               "negation_flips": 22, "double_negation_restores": 22}
    monkeypatch.setattr(rnnlens.demo, "run_demo", lambda *a, **k: summary)
    table = TABLES["seqlevel-table1"]
    for budget in ("quick", "full"):
        ctx = Context(out=tmp_path / budget, budget=budget, progress=False)
        res = [KINDS[table.kind](ctx, table, row) for row in table.rows]
        assert {r.budget_name for r in res} == {"full"}
        assert any(r.checks for r in res)


def test_a_mean_equal_to_the_paper_differs_by_zero(tmp_path):
    """Float rounding in a mean over seeds does not print as a tiny difference."""
    row = Row("LSTM (subj, word2vec)", 92.6)
    res = [RowResult(row, values=[92.2, 92.6, 93.0], budget="full", budget_name="full")]
    md = markdown(_table({"abs": 1.5}, rows=[row]), res, Context(out=tmp_path, progress=False))
    assert "| 0.00 |" in md and "e-1" not in md


@pytest.mark.parametrize("budget", ["quick", "full"])
def test_every_config_resolves_under_the_tiny_slice(budget, tmp_path):
    """--tiny shrinks every model; each config in configs/ still validates so (a transformer's
    width stays a multiple of its heads), at each budget."""
    from rnnlens.repro.run import row_config

    ctx = Context(out=tmp_path, budget=budget, configs=REPO / "configs", tiny=True, progress=False)
    names = sorted(p.name for p in (REPO / "configs").glob("*.json"))
    assert any("transformer" in n for n in names)
    for name in names:
        cfg = row_config(ctx, name)
        assert cfg.train.epochs == 1 and cfg.model.hidden_size <= 16, name


def test_unitary_table_pairs_check_per_model(tmp_path):
    """urn-table11.2 analyses two models (the paper's 3-TURN and the two-phase ablation): each
    model's last pair row carries its own pairs check, the mean over that model's pairs only,
    and the ablation rows read the items they name (item_name), not their labels."""
    t = TABLES["urn-table11.2"]
    pairs = [r for r in t.rows if r.extra.get("item") == "pair"]
    models = {(r.config, r.extra.get("init_from")) for r in pairs}
    assert len(models) == 2
    ctx = Context(out=tmp_path, data_dir=None, tiny=True, progress=False, threads=1, configs=REPO / "configs")
    res = run_table(ctx, t)
    assert all(r.status == "ok" and r.values for r in res)
    res = [r for r in res if r.row.extra.get("item") == "pair"]
    checks = {}
    for model in models:
        mine = [r for r in res if (r.row.config, r.row.extra.get("init_from")) == model]
        carriers = [r for r in mine if r.checks]
        assert [r.row.label for r in carriers] == [mine[-1].row.label]
        (what, ours, ok), = carriers[0].checks
        mean = sum(r.values[0] for r in mine) / len(mine)
        assert float(ours) == pytest.approx(mean, abs=1e-3) and ok is (mean < 0.2)
        checks[carriers[0].check_prefix] = float(ours)
    assert set(checks) == {"matching pairs", "matching pairs, two-phase 3-TURN"}
    assert checks["matching pairs"] != checks["matching pairs, two-phase 3-TURN"]


def test_figure2_table9_rows_score_the_papers_list(tmp_path, shared_data):
    """The Figure 2 rows marked "adjectives": "paper-table9" score the paper's Table 9 list on
    the same model as their row (tiny slice), and say so in their note."""
    t = TABLES["ngrams-figure2"]
    rows = [r for r in t.rows if r.extra.get("adjectives") == "paper-table9"]
    assert rows and all(r.extra.get("ablation") for r in rows)
    plain = {r.label: r for r in t.rows}
    for r in rows:      # the same config as the row it is the ablation of
        assert r.config == plain[r.label.split(" (the paper's")[0]].config
    row = rows[0]
    ctx = Context(out=tmp_path, data_dir=shared_data, tiny=True, progress=False, threads=1, configs=REPO / "configs")
    res = run_table(ctx, Table(**{**t.__dict__, "rows": [row]}))
    assert res[0].status == "ok", res[0]
    assert "37 positive / 31 negative adjectives of the paper's Table 9" in res[0].note


def test_a_figure2_row_naming_an_unknown_adjective_list_is_refused(tmp_path, shared_data):
    from dataclasses import replace

    from rnnlens.errors import RnnlensError

    t = TABLES["ngrams-figure2"]
    row = next(r for r in t.rows if r.extra.get("adjectives") == "paper-table9")
    bad = replace(row, extra={**row.extra, "adjectives": "paper-table8"})
    ctx = Context(out=tmp_path, data_dir=shared_data, tiny=True, progress=False, threads=1, configs=REPO / "configs")
    with pytest.raises(RnnlensError, match="only list built in is 'paper-table9'"):
        run_table(ctx, Table(**{**t.__dict__, "rows": [bad]}))


def test_dyck_checks_read_the_rows_mean_curve(monkeypatch):
    """With several seeds, the highest error and the trend are those of the mean at each count
    (the values the row's lines show), not of the worst seed."""
    from rnnlens.repro import pipelines
    row = Row("URN", None, config="x.json", extra={"tolerance": {"no_upward_trend": True, "max": 0.1}})
    seeds = [{"0": 0.08, "1": 0.06, "2": 0.12}, {"0": 0.10, "1": 0.08, "2": 0.04}]
    monkeypatch.setattr(pipelines, "per_seed", lambda ctx, r, fn, **kw: RowResult(r, values=list(seeds)))
    res = pipelines.dyck_row(None, None, row)
    (what, shown, ok), (trend, flat_shown, flat) = res.checks
    assert what == "highest error over attractor counts" and shown == "0.090" and ok is True
    assert flat_shown == "none" and flat is True       # seed 0 alone rises; the mean falls
    assert not no_upward_trend(seeds[0])
