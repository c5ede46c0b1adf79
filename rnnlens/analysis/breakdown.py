"""Error breakdowns over training, read from a run's metrics.jsonl (the unitary-networks
paper, section 11.5: error by number of attractors, by depth, by m + n).

The heads of the dyck, crossserial and agreement tasks log, per epoch, breakdowns such as
`dev_by_attractors` = {str(count): {n, correct, accuracy, error}}; the final test record
holds `test_by_attractors`. The functions here take the records (or the path of the
metrics.jsonl, or of the checkpoint folder) and return plain dicts; `error_table` renders
one as text.

"The maximum over epochs": the paper's text says it reports "the maximum error rate for
any given number of attractors, over varying epochs ... the peak value from the previous
graph", and the caption of its Fig. 11.4 says that, as training progresses, it plots "the
maximum error rate across number of attractors". Both readings are here:
`max_error_over_epochs` (per attractor count, the worst epoch; skip the first epochs with
from_epoch, or it is the untrained model) and `peak_error_by_epoch` (per epoch, the worst
attractor count: Fig. 11.4c against epochs, Fig. 11.4d against training loss).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import RnnlensError


def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl (path to the file or to the checkpoint folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.jsonl"
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise RnnlensError(f"cannot read {p}: {e}") from None
    out = []
    for no, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RnnlensError(f"{p}:{no}: not JSON: {e.msg}") from None
            except RecursionError:
                raise RnnlensError(f"{p}:{no}: not JSON: nested too deeply") from None
    return out


def _records(records) -> list[dict]:
    return read_metrics(records) if isinstance(records, (str, Path)) else list(records)


def epoch_breakdowns(records, split: str = "dev", by: str = "by_attractors") -> list[tuple[int, dict]]:
    """[(epoch, breakdown)] for every epoch record that has `{split}_{by}`."""
    key = f"{split}_{by}"
    return [(r["epoch"], r[key]) for r in _records(records) if "epoch" in r and key in r]


def max_error_over_epochs(records, split: str = "dev", by: str = "by_attractors", from_epoch: int = 1,
                          min_n: int = 1) -> dict[str, dict]:
    """For each key (attractor count, depth, m + n): the largest error over the epochs
    >= from_epoch, and where it happened. Keys with fewer than min_n items in an epoch are
    skipped in that epoch. -> {key: {"error", "epoch", "n"}}, keys in numeric order."""
    out: dict[str, dict] = {}
    for epoch, breakdown in epoch_breakdowns(records, split, by):
        if epoch < from_epoch:
            continue
        for key, row in breakdown.items():
            if row["n"] >= min_n and (key not in out or row["error"] > out[key]["error"]):
                out[key] = {"error": row["error"], "epoch": epoch, "n": row["n"]}
    if not out:
        raise RnnlensError(f"no epoch records with {split}_{by} (from epoch {from_epoch})")
    return {k: out[k] for k in sorted(out, key=int)}


def peak_error_by_epoch(records, split: str = "dev", by: str = "by_attractors", min_n: int = 1) -> list[dict]:
    """For each epoch: the largest error over the keys with at least min_n items, which key
    it was, and the epoch's training loss (for error against training loss, Fig. 11.4d).
    -> [{"epoch", "error", "key", "train_loss"}]."""
    recs = _records(records)
    loss = {r["epoch"]: r.get("train_loss") for r in recs if "epoch" in r}
    out = []
    for epoch, breakdown in epoch_breakdowns(recs, split, by):
        rows = [(row["error"], key) for key, row in breakdown.items() if row["n"] >= min_n]
        if rows:
            err, key = max(rows, key=lambda r: (r[0], -int(r[1])))
            out.append({"epoch": epoch, "error": err, "key": key, "train_loss": loss.get(epoch)})
    return out


def error_table(records, split: str = "dev", by: str = "by_attractors", baseline: dict | None = None,
                from_epoch: int = 1) -> str:
    """A text table by key: items, error at the best epoch (the run's selected one) and at
    the last, the maximum over epochs (max_error_over_epochs) and, if given, a baseline's
    error (a breakdown dict such as dyck_majority_baseline(...)["by_attractors"]).
    split="test" reads the final test record instead (one column of errors)."""
    recs = _records(records)
    name = by.removeprefix("by_")
    if split == "test":
        final = [r for r in recs if r.get("split") == "test" and f"test_{by}" in r]
        if not final:
            raise RnnlensError(f"no test record with test_{by}")
        rows = final[-1][f"test_{by}"]
        header = [name, "n", "test error"] + (["baseline"] if baseline else [])
        lines = [[k, str(r["n"]), f"{r['error']:.4f}"] + ([_base(baseline, k)] if baseline else [])
                 for k, r in sorted(rows.items(), key=lambda kv: int(kv[0]))]
        return _render(header, lines)
    epochs = dict(epoch_breakdowns(recs, split, by))
    if not epochs:
        raise RnnlensError(f"no epoch records with {split}_{by}")
    best = next((r.get("best_epoch") for r in reversed(recs) if r.get("best_epoch")), None)
    best = best if best in epochs else max(epochs)
    last = max(epochs)
    worst = max_error_over_epochs(recs, split, by, from_epoch)
    header = [name, "n", f"error@best({best})", f"error@last({last})", f"max over epochs>={from_epoch}", "at epoch"]
    header += ["baseline"] if baseline else []
    keys = sorted(set(epochs[last]) | set(worst), key=int)
    lines = []
    for k in keys:
        row_best, row_last = epochs[best].get(k), epochs[last].get(k)
        lines.append([k, str((row_last or row_best or {}).get("n", "")),
                      f"{row_best['error']:.4f}" if row_best else "-",
                      f"{row_last['error']:.4f}" if row_last else "-",
                      f"{worst[k]['error']:.4f}" if k in worst else "-",
                      str(worst[k]["epoch"]) if k in worst else "-"] + ([_base(baseline, k)] if baseline else []))
    return _render(header, lines)


def _base(baseline: dict, key: str) -> str:
    row = baseline.get(key)
    return f"{row['error']:.4f}" if row else "-"


def _render(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(header)]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header, *lines])
