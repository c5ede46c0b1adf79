"""The benchmark suite (`python -m benchmarks`, `rnnlens bench --all`) end to end in --quick
mode: every measurement runs (in child processes) and the report has the targets table.
About 20 s on 2 busy cores: tiny sizes, one thread, the timings in one child process."""
import sys

import pytest
from tests.support import REPO

HEADER = "| measurement | value | target | result | product bound |"


@pytest.fixture
def suite():
    sys.path.insert(0, str(REPO))           # benchmarks/ ships with the repository, not the package
    try:
        from benchmarks import suite
        yield suite
    finally:
        sys.path.remove(str(REPO))


def test_quick_suite_writes_the_results_file(suite, tmp_path):
    out = tmp_path / "RESULTS.md"
    text = suite.run_suite(out, quick=True, threads=1, log=lambda msg: None)
    assert out.read_text(encoding="utf-8") == text
    assert text.startswith("# rnnlens benchmark suite (quick")
    for line in ("- machine:", "CPU", "torch ", "torch threads 1", "device cpu", "1-minute load average:"):
        assert line in text
    assert HEADER in text
    table = text[text.index(HEADER):].split("\n\n")[0].splitlines()[2:]
    measured = "\n".join(table)
    for name in ("mvma-g tokens/s", "rrnn-f tokens/s / torch.nn.LSTM, length 64", "gru (rnnlens cell)",
                 "URN (50 units)", "RM(+tM-g)", "gru peak memory", "gru (checkpoint 32) peak memory", "n-gram scores"):
        assert name in measured, name
    import re
    assert all(re.search(r"\| (met|NOT met|NOT met \(beyond the bound\)) \| ([0-9.e+-]+x)? \|$", row) for row in table), table
    assert re.search(r"\| rrnn-c tokens/s / torch.nn.LSTM, length 8 \| [^|]+ \| [^|]+ \| [^|]+ \| [0-9.e+-]+x \|", text)
    assert "failed" not in text
    for section in ("## Training speed", "## URN", "## RM(+tM-g)", "## Peak memory", "## N-gram",
                    "## Explaining long documents", "## Elementwise scan"):
        assert section in text


def test_targets_table_marks_met_and_not_met(suite):
    res = {"settings": suite.settings(False),
           "speed": [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0}, {"cell": "mvma-g", "tokens_per_s": 120.0},
                     {"cell": "mvma-l", "tokens_per_s": 50.0}],
           "memory": [{"cell": "torch.nn.LSTM", "peak_mb": 100.0}, {"cell": "gru", "peak_mb": 149.0},
                      {"cell": "isan", "skipped": "not run", "estimate_mb": 10000.0}]}
    rows = {r[0]: r[1:4] for r in suite.targets(res)}
    assert rows["mvma-g tokens/s / torch.nn.LSTM, length 35"] == ("1.20x", ">= 1x", "met")
    assert rows["mvma-l tokens/s / torch.nn.LSTM, length 35"] == ("0.50x", ">= 1x", "NOT met")
    assert rows["gru-approx tokens/s / torch.nn.LSTM, length 35"] == ("-", ">= 1x", "not measured")
    assert rows["gru peak memory / torch.nn.LSTM, length 4096"] == ("1.49x", "<= 1.5x", "met")
    assert rows["isan peak memory / torch.nn.LSTM, length 4096"][2] == "NOT met (not run)"


def test_cuda_targets_are_the_gpu_goals_at_the_gpu_sizes(suite):
    """On a GPU: MVMA >= 0.8x and RRNN >= 3x cuDNN's LSTM at length 35; at batch 64 x 1024 x
    1024 RRNN >= 5x, MVMA >= 0.8x, and the classic cells >= 0.95x torch's module of their kind."""
    st = suite.settings(False, cuda=True)
    assert (st["long_batch"], st["long"], st["long_size"]) == (64, 1024, 1024) and st["repeats"] >= 10
    speed = [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0}, {"cell": "mvma-g", "tokens_per_s": 85.0},
             {"cell": "rrnn-b", "tokens_per_s": 250.0}, {"cell": "gru-approx", "tokens_per_s": 60.0}]
    long = [{"cell": "torch.nn.LSTM", "tokens_per_s": 10.0}, {"cell": "torch.nn.GRU", "tokens_per_s": 20.0},
            {"cell": "gru", "tokens_per_s": 19.5}, {"cell": "rrnn-b", "tokens_per_s": 51.0},
            {"cell": "lstm", "tokens_per_s": 9.0, "pair": "torch.nn.LSTM", "pair_tokens_per_s": 9.0}]
    rows = {r[0]: r[1:4] for r in suite.targets({"settings": st, "device": "cuda", "speed": speed, "long": long})}
    at = "batch 64 x length 1024 x hidden 1024"
    assert rows["mvma-g tokens/s / torch.nn.LSTM, length 35"] == ("0.85x", ">= 0.8x", "met")
    assert rows["rrnn-b tokens/s / torch.nn.LSTM, length 35"] == ("2.50x", ">= 3x", "NOT met")
    assert rows["gru-approx tokens/s / torch.nn.LSTM, length 35"] == ("0.60x", ">= 0.5x", "met")
    assert rows[f"rrnn-b tokens/s / torch.nn.LSTM, {at}"] == ("5.10x", ">= 5x", "met")
    assert rows[f"gru (rnnlens cell) tokens/s / torch.nn.GRU, {at}"] == ("0.97x", ">= 0.95x", "met")
    assert rows[f"mvma-l tokens/s / torch.nn.LSTM, {at}"][2] == "not measured"
    # timed in turns with its reference: the ratio of those rounds, not of the reference's own row
    assert rows[f"lstm (rnnlens cell) tokens/s / torch.nn.LSTM, {at}"] == ("1.00x", ">= 0.95x", "met")


def test_memory_rows_run_together_keep_their_order_and_names(suite):
    calls = []

    def run(jobs, label):
        calls.append([j["params"]["name"] for j in jobs])
        return [{"error": "boom"} if j["params"]["name"] == "gru" else          # as cells.worker names them
                {"cell": j["params"]["name"] + (" (checkpoint 64)" if "chunk" in j["params"] else ""), "peak_mb": 1.0}
                for j in jobs]

    s = suite.settings(False)
    rows = suite._memory(["gru", "mvma-l"], s, [], 1e9, False, run, together=True)
    assert len(calls) == 1 and calls[0] == ["torch.nn.LSTM", "gru", "mvma-l", "gru", "mvma-l"]
    assert [r["cell"] for r in rows] == ["torch.nn.LSTM", "gru", "mvma-l", "gru (checkpoint 64)",
                                         "mvma-l (checkpoint 64)"]
    assert "error" in rows[1] and "error" in rows[3]


def test_targets_name_their_product_bound_and_a_goal_beyond_it(suite):
    """A target the cell's unavoidable products alone could not meet says so; the bound is
    the one measured at the target's own length."""
    res = {"settings": suite.settings(False),
           "speed": [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0}, {"cell": "mvma-l", "tokens_per_s": 80.0},
                     {"cell": "rrnn-c", "tokens_per_s": 150.0}, {"cell": "isan", "tokens_per_s": 2.0}],
           "long": [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0}, {"cell": "rrnn-c", "tokens_per_s": 150.0}],
           "bounds": [{"length": 35, "bound": {"mvma-l": 0.96, "rrnn-c": 2.4, "isan": 0.02}},
                      {"length": 1024, "bound": {"rrnn-c": 2.9}}]}
    rows = {r[0]: r[1:] for r in suite.targets(res)}
    assert rows["mvma-l tokens/s / torch.nn.LSTM, length 35"] == ("0.80x", ">= 1x", "NOT met (beyond the bound)", "0.96x")
    assert rows["rrnn-c tokens/s / torch.nn.LSTM, length 35"] == ("1.50x", ">= 2x", "NOT met", "2.4x")
    assert rows["rrnn-c tokens/s / torch.nn.LSTM, length 1024"][2:] == ("NOT met (beyond the bound)", "2.9x")
    assert rows["isan tokens/s / torch.nn.LSTM, length 35"][2:] == ("NOT met (beyond the bound)", "0.02x")
    assert rows["mvma-g tokens/s / torch.nn.LSTM, length 35"][3] == ""


def test_time_limit_writes_what_was_measured_and_names_the_rest(suite, tmp_path, monkeypatch):
    """--time-limit: no measurement starts once it is spent; the report is written anyway,
    marked INCOMPLETE, naming every measurement that did not run (here: all of them)."""
    monkeypatch.setattr(suite, "run_jobs", lambda *a, **k: pytest.fail("a measurement started"))
    out = tmp_path / "R.md"
    text = suite.run_suite(out, quick=True, threads=1, log=lambda msg: None, time_limit=1e-9)
    assert out.read_text(encoding="utf-8") == text
    assert "- INCOMPLETE: the time limit was spent;" in text and "memory, length" in text
    assert "not run (--time-limit 1e-09 s spent)" in text and HEADER in text


def test_time_limit_must_be_positive(suite, capsys):
    with pytest.raises(SystemExit) as e:
        suite.main(["--quick", "--time-limit", "0"])
    assert e.value.code == 2 and "--time-limit must be a positive" in capsys.readouterr().err


def test_end_to_end_benchmark_writes_its_report(shared_data, tmp_path):
    """benchmarks/train_e2e.py runs both trainers on the same SST-2 batches and reports the ratio."""
    from benchmarks.train_e2e import main

    out = tmp_path / "e2e.md"
    assert main(["--data-dir", str(shared_data), "--examples", "64", "--repeats", "1", "--threads", "1",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "| rnnlens |" in text and "| plain |" in text and "rnnlens / plain time per epoch" in text


def test_each_cell_is_compared_with_the_reference_timed_next_to_it(suite):
    """The speed tables time torch.nn.LSTM again after every few cells; a cell's ratio is
    against the mean of the reference runs just before and after it, not against the first
    one alone (the machine's speed drifts over a suite)."""
    names = [f"c{i}" for i in range(6)]
    order = suite.with_references(names, every=4)
    again = "torch.nn.LSTM (again)"
    assert order == ["c0", "c1", "c2", "c3", again, "c4", "c5", again]
    tps = {"torch.nn.LSTM": 100.0, "c0": 50.0, "c3": 50.0, "c4": 240.0, "c5": 60.0}
    rows = [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0}]
    refs = iter([140.0, 120.0])
    for n in order:
        rows.append({"cell": n, "tokens_per_s": next(refs) if n == again else tps.get(n, 10.0)})
    rows = suite.local_references(rows)
    by = {r["cell"]: r for r in rows if r["cell"] != again}
    assert by["c0"]["ref_tokens_per_s"] == pytest.approx(120.0)       # (100 + 140) / 2
    assert by["c4"]["ref_tokens_per_s"] == pytest.approx(130.0)       # (140 + 120) / 2
    res = {"settings": suite.settings(False), "speed": rows}
    got = {r[0]: r[1] for r in suite.targets(res)}
    assert got["c4 tokens/s / torch.nn.LSTM, length 35"] == "1.85x"   # 240 / 130, not 240 / 100


def test_the_urn_target_reads_the_reference_timed_in_turns_with_it(suite):
    """The URN's ratio is against the torch.nn.LSTM its own job timed beside it (ref_size),
    not the cell table's run minutes away; without one, the table's is the fallback."""
    urn = {"urn": {"tokens_per_s": 90.0}, "lstm_same_width": {"tokens_per_s": 500.0}}
    res = {"settings": suite.settings(False), "speed": [{"cell": "torch.nn.LSTM", "tokens_per_s": 200.0}],
           "urn": {**urn, "torch.nn.LSTM": {"tokens_per_s": 100.0}}}
    label = "URN (50 units) tokens/s / torch.nn.LSTM (hidden 256)"
    assert {r[0]: r[1] for r in suite.targets(res)}[label] == "0.90x"
    res["urn"] = urn
    assert {r[0]: r[1] for r in suite.targets(res)}[label] == "0.45x"


def test_urn_speed_times_the_reference_of_the_table_setting(suite):
    from benchmarks import urn              # importable while the suite fixture holds the path

    out = urn.speed(batch_size=2, length=4, hidden=6, repeats=2, warmup=0, ref_size=8)
    assert out["ref_size"] == 8 and out["torch.nn.LSTM"]["tokens_per_s"] > 0 and out["urn"]["tokens_per_s"] > 0
    assert "torch.nn.LSTM" not in urn.speed(batch_size=2, length=4, hidden=6, repeats=1, warmup=0)


def _bench_main(module: str, argv: list[str]) -> None:
    """benchmarks.<module>.main(argv), imported from the checkout."""
    import importlib
    import sys as _sys
    _sys.path.insert(0, str(REPO))
    try:
        importlib.import_module(f"benchmarks.{module}").main(argv)
    finally:
        _sys.path.remove(str(REPO))


def test_profile_cell_reports_calls_and_launches(capsys):
    _bench_main("profile_cell", ["--cells", "gru", "rrnn-b", "--batch", "2", "--length", "3", "--size", "4",
                                 "--repeats", "1", "--warmup", "0", "--top", "3", "--threads", "1"])
    out = capsys.readouterr().out
    for name in ("gru", "rrnn-b"):
        assert f"## {name}: " in out and " ms a step (median of 1), " in out and " operator calls, " in out


def test_lm_head_benchmark_times_both_paths_and_restores_the_head(capsys):
    from rnnlens.heads.lm import LMHead
    before = (LMHead.forward, LMHead.nll_sum)
    _bench_main("lm_head", ["--hidden", "8", "--vocab", "50", "--rounds", "1", "--threads", "1"])
    assert (LMHead.forward, LMHead.nll_sum) == before
    out = capsys.readouterr().out
    assert "lstm LM, hidden 8, vocabulary 50" in out and "plain / rnnlens" in out


def test_a_cell_timed_in_turns_with_the_reference_reads_those_rounds(suite):
    """A targeted cell timed in turns with torch.nn.LSTM in its own process (cells.paired):
    its ratio, in the targets and in the speed table, is over those rounds, whatever the
    reference runs around it in the suite measured (one slow run there no longer skews it)."""
    again = "torch.nn.LSTM (again)"
    rows = [{"cell": "torch.nn.LSTM", "tokens_per_s": 100.0},
            {"cell": "c4", "tokens_per_s": 90.0, "pair": "torch.nn.LSTM", "pair_tokens_per_s": 100.0},
            {"cell": again, "tokens_per_s": 40.0}]
    rows = suite.local_references(rows)
    assert rows[1]["ref_tokens_per_s"] == pytest.approx(100.0)           # the pair's, not (100 + 40) / 2
    res = {"settings": suite.settings(False), "speed": rows}
    got = {r[0]: r[1] for r in suite.targets(res)}
    assert got["c4 tokens/s / torch.nn.LSTM, length 35"] == "0.90x"


def test_a_cell_that_extrapolates_past_the_budget_is_probed_at_a_length_that_fits(suite):
    """A length-35 peak whose linear extrapolation passes the budget even at PROBE steps is
    probed shorter (PROBE/2, PROBE/4), and run at full length when the line through the two
    points fits; with no probe length that fits, it is reported as not run."""
    s = suite.settings(False)
    assert suite._probe_length(10.0, 35, 1e9) == suite.PROBE
    assert suite._probe_length(648.9, 35, 9.1) == suite.PROBE // 2       # 9.5 GB at PROBE steps
    assert suite._probe_length(648.9, 35, 0.5) is None
    speed = [{"cell": "linear-rnn", "peak_mb": 648.9, "tokens_per_s": 1e9}]
    calls = []

    def run(jobs, label):
        calls.append((label, jobs[0]["params"]["length"]))
        return [{"cell": "linear-rnn", "peak_mb": 700.0}]        # chunked: nearly flat past 64 steps

    rows = suite._memory(["linear-rnn"], s, speed, 9.1, False, run)
    probes = [length for label, length in calls if "probe" in label]
    assert probes == [suite.PROBE // 2]
    assert rows[-1]["cell"] == "linear-rnn" and "skipped" not in rows[-1]
    rows = suite._memory(["linear-rnn"], s, speed, 0.5, False, lambda jobs, label: [{"peak_mb": 1.0}])
    assert "skipped" in rows[-1] and "estimate_mb" in rows[-1]


def test_gated_loops_benchmark_writes_its_rows_and_leaves_the_switch_unset(tmp_path, monkeypatch):
    import os as _os
    monkeypatch.delenv("RNNLENS_CPP_GATED", raising=False)
    _bench_main("gated", ["--batch", "2", "--length", "3", "--size", "4", "--rounds", "1", "--threads", "1",
                          "--out", str(tmp_path / "g.md")])
    text = (tmp_path / "g.md").read_text()
    assert "RNNLENS_CPP_GATED" not in _os.environ
    for row in ("| gru | 0 |", "| gru | 0.3 |", "| lstm | 0.3 |"):
        assert row in text
    assert "(torch's GRU kernel)" in text and "(the Python loop)" in text


def test_rational_parts_benchmark_writes_a_row_per_rrnn(tmp_path):
    from rnnlens.ops import rational_fused
    import torch
    if not rational_fused.available(torch.zeros(1, 1, 1), "real", False):
        pytest.skip("the rational cells' C++ pass is unavailable here")
    _bench_main("rational_parts", ["--batch", "2", "--length", "3", "--size", "4", "--rounds", "1",
                                   "--threads", "1", "--out", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    for name in ("rrnn-b", "rrnn-c", "rrnn-f"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 8 and all(float(c) > 0 for c in cells[1:5])
        assert cells[5].endswith("x") and cells[7].endswith("%")
