"""Run records: what every number in REPRODUCTION.md stands on, kept in the repository.

    results/runs/<run>/record.json     one trained model: its resolved config, the command,
                                       rnnlens and torch versions, commit, device, threads,
                                       seed, budget, wall time and its test record
    results/runs/<run>/metrics.jsonl   its training log, as `rnnlens train` wrote it
    results/tables/<table>.json        one table's rows as `rnnlens repro` computed them, with
                                       the runs each row read and the command that ran it

No weights: a record is a few KB. `rnnlens repro` writes them as it trains or reuses runs,
reuses a record instead of training again when the row needs only the test record and the
record's config is the row's, and `rnnlens repro --render` writes REPRODUCTION.md from these
files alone (rnnlens.repro.report). Paths are stored relative to the repository (a dataset
folder as it was given, relative), never the machine's absolute paths.
"""
from __future__ import annotations


import functools
import json
import os
import platform
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from ..outfiles import finite, json_text, metric_record

RUNS, TABLES = "runs", "tables"
CAUSES = "notes/causes.json"   # {table: {row label: why the row is outside its tolerance}}
REPO = Path(__file__).resolve().parents[2]


def default_results_dir() -> Path | None:
    """results/ of the checkout this package runs from (an editable install), if there."""
    p = REPO / "results"
    return p if (REPO / "configs").is_dir() else None


def portable(path) -> str:
    """A path as a record keeps it: relative to the repository (or the working folder) where
    it can be, else its last two parts; never an absolute path of this machine."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    # beside the repository (../shared/data) or under the working folder: relative to it
    for base, under in ((REPO, REPO.parent), (Path.cwd(), Path.cwd())):
        if p.is_relative_to(under):
            return Path(os.path.relpath(p, base)).as_posix()
    return Path(*p.parts[-2:]).as_posix()


def portable_command(argv: list[str]) -> str:
    """`rnnlens ARGS` with every absolute path in ARGS made portable."""
    return " ".join(["rnnlens"] + [portable(a) if a.startswith("/") else a for a in argv])


def commit() -> str | None:
    """The checkout's commit (with "+changes" when its tracked files differ), or None; the
    environment's RNNLENS_COMMIT where it is set (a copy of the tree whose .git does not
    match its files, as on a machine the tree was sent to)."""
    if os.environ.get("RNNLENS_COMMIT"):
        return os.environ["RNNLENS_COMMIT"]
    if not (REPO / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+changes" if dirty else "")) or None


@functools.cache
def process_commit() -> str | None:
    """`commit()` as it was at this function's first call in the process, kept for every later
    one: a process runs the code it loaded, whatever the checkout becomes while it trains, so
    `rnnlens repro` calls this when it starts and its records name the commit that ran (for a
    run resumed over several processes, the commit of the process that finished it)."""
    return commit()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {platform.machine()} ({cpu}), {platform.system()}"


def environment() -> dict:
    import torch

    from ..version import __version__

    return {"rnnlens": __version__, "commit": process_commit(), "torch": torch.__version__,
            "python": platform.python_version(), "machine": machine()}


def write_atomic(path: Path, text: str) -> None:
    """path holds text, all of it or (on any failure) its old content; mode as the umask says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)              # mkstemp's 0600 would outlive the rename
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def portable_config(cfg: dict) -> dict:
    """The resolved config with its paths made portable (the data folder, vectors files)."""
    out = json.loads(json.dumps(cfg))
    for section in out.values():
        if isinstance(section, dict):
            for k, v in section.items():
                if isinstance(v, str) and v.startswith("/"):
                    section[k] = portable(v)
    return out


def write_run(results: Path, run_dir: Path, *, config_file: str, cfg: dict, seed: int, budget: str, seconds: float,
              test: dict, command: str, threads, device: str, init_from: dict | None = None,
              overrides: dict | None = None) -> Path:
    """results/runs/<run>/ for the trained run folder run_dir (its metrics.jsonl is copied).
    overrides: what the run changed from its config file ({section: {key: value}})."""
    folder = results / RUNS / run_dir.name
    if device.startswith("cuda"):         # which GPU: the figures of a run depend on it
        import torch

        if torch.cuda.is_available():
            device = f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    rec = {"run": run_dir.name, "config_file": config_file, "seed": seed, "budget": budget,
           "seconds": round(float(seconds), 1), "threads": threads, "device": device, "command": command,
           "recorded": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", **environment(),
           "init_from": init_from, **({"overrides": overrides} if overrides else {}), "test": test,
           "config": portable_config(cfg)}
    old = read_run(results, run_dir.name)
    if old is not None and {k: v for k, v in old.items() if k not in _VOLATILE} == \
            {k: v for k, v in rec.items() if k not in _VOLATILE}:
        return folder                 # the same run recorded before: keep its first record
    folder.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        tmp = folder / ".metrics.jsonl.tmp"
        shutil.copyfile(metrics, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / "metrics.jsonl")
    write_atomic(folder / "record.json", json_text(rec, indent=1) + "\n")
    return folder


def mark_overrides(results: Path, name: str, overrides: dict | None) -> None:
    """Say in the record of the run `name` what it changed from its config file on purpose,
    where it does not say so yet (a record written before records kept it): the settings are
    in its config already; this tells a changed config file from a row's own overrides."""
    rec = read_run(results, name)
    if rec is None or rec.get("overrides") == overrides or not overrides:
        return
    head = {k: v for k, v in rec.items() if k not in ("overrides", "test", "config")}
    out = {**head, "overrides": overrides, "test": rec["test"], "config": rec.get("config")}
    write_atomic(results / RUNS / name / "record.json", json_text(out, indent=1) + "\n")


def tables_citing(results: Path, run: str, but: str | None = None) -> list[str]:
    """The tables under results/tables whose rows read the run `run` (but the table `but`):
    those to compute again when the run's record is replaced by another run of that name."""
    return sorted(tid for tid, rec in read_tables(results).items()
                  if tid != but and any(run in (r.get("runs") or []) for r in rec.get("rows") or []))


# what may differ between two records of the same run without it being another run
_VOLATILE = ("recorded", "command", "commit", "rnnlens", "python", "machine", "threads")


def read_run(results: Path | None, name: str) -> dict | None:
    """The record of run `name` under results/runs, or None where there is none. RnnlensError
    naming the file for one that is there but damaged (not JSON, or not a run record's shape):
    it is neither passed over as missing nor trained again over."""
    from ..errors import RnnlensError

    if results is None:
        return None
    path = results / RUNS / name / "record.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RnnlensError(f"{path}: not a readable run record ({e}); restore it, or remove its folder and run "
                           "the row again") from None
    problem = _run_problem(rec)
    if problem:
        raise RnnlensError(f"{path}: not a run record ({problem}); restore it, or remove its folder and run the "
                           "row again")
    return {**rec, "test": metric_record(rec["test"])}


def _run_problem(rec) -> str | None:
    """What makes `rec` not a run record as write_run writes one; None when it is one."""
    if not isinstance(rec, dict):
        return "not an object"
    if not isinstance(rec.get("test"), dict):
        return "no test metrics"
    config = rec.get("config", {})
    if not (isinstance(config, dict) and all(isinstance(v, dict) for k, v in config.items() if k != "version")):
        return "its config is not an object of sections"
    if not isinstance(rec.get("overrides") or {}, dict):
        return "its overrides are not an object"
    for key in ("command", "run", "config_file", "budget"):
        if not isinstance(rec.get(key, ""), (str, type(None))):
            return f"its {key} is not text"
    return None


def tables_locked(results: Path):
    """Holds an OS lock (flock, waiting for it) on the records' tables for a read-merge-write of
    a table record: two repros sharing the records folder (different --out) each keep the
    rows they wrote instead of one writing over the other's. Where flock is missing: unlocked."""
    from ..outfiles import waiting_lock

    return waiting_lock(results / TABLES / ".tables.lock")


def write_table(results: Path, table_id: str, record: dict) -> Path:
    path = results / TABLES / f"{table_id}.json"
    write_atomic(path, json_text(record, indent=1) + "\n")
    return path


def read_tables(results: Path) -> dict[str, dict]:
    """Every table record under results/tables, by table id. RnnlensError naming the file for
    one that is not JSON or not a table record (write_table's shape): a damaged record is
    neither skipped (the table would vanish from REPRODUCTION.md) nor written over."""
    from ..errors import RnnlensError

    out = {}
    folder = results / TABLES
    if not folder.is_dir():
        return out
    for p in sorted(folder.glob("*.json")):
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RnnlensError(f"{p}: not a readable table record ({e}); restore it, or remove it and run "
                               "the table again") from None
        problem = _table_problem(rec)
        if not problem and rec["table"] != p.stem:
            problem = f"it holds table {rec['table']!r}, where its name says {p.stem!r}"
        if problem:
            raise RnnlensError(f"{p}: not a table record ({problem}); restore it, or remove it and run the "
                               "table again")
        out[rec["table"]] = rec
    return out


NON_FINITE = ("nan", "inf", "-inf")     # a diverged run's value, kept as text in strict JSON


def values_out(v):
    """A row's value (or list of them) for a table record: a NaN or infinite float (a run
    that diverged) becomes the text "nan", "inf" or "-inf", so the record stays strict JSON
    and still tells a diverged run (rendered "diverged") from a missing value (null)."""
    return finite(v, instead=lambda x: str(float(x)))


def values_in(v):
    """values_out's inverse, for a table record read back."""
    if isinstance(v, list):
        return [values_in(x) for x in v]
    if isinstance(v, dict):
        return {k: values_in(x) for k, x in v.items()}
    return float(v) if isinstance(v, str) and v in NON_FINITE else v


def _is_value(v) -> bool:
    """A row's value: a number, None, one of NON_FINITE, or a dict of values (per attractor
    count, length, ...)."""
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_value(x) for k, x in v.items())
    return v is None or v in NON_FINITE or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _table_problem(rec) -> str | None:
    """What makes `rec` not a table record as write_table writes one; None when it is one."""
    if not isinstance(rec, dict):
        return "not an object"
    if not isinstance(rec.get("table"), str):
        return "no table id"
    if not isinstance(rec.get("rows"), list):
        return "no list of rows"
    if not isinstance(rec.get("command", ""), str):
        return "its command is not text"
    for i, row in enumerate(rec["rows"], 1):
        if not isinstance(row, dict) or not isinstance(row.get("label"), str):
            return f"row {i} has no label"
        if not all(isinstance(row.get(k, ""), str) for k in ("status", "budget", "budget_name", "data_used", "note")):
            return f"row {i} has a field that is not text"
        if not (isinstance(row.get("runs", []), list) and all(isinstance(r, str) for r in row.get("runs", []))):
            return f"row {i}'s runs are not a list of run names"
        if not (isinstance(row.get("values", []), list) and all(_is_value(v) for v in row.get("values", []))):
            return f"row {i}'s values are not a list of numbers"
        if not (isinstance(row.get("checks", []), list)
                and all(isinstance(c, list) and len(c) == 3 for c in row.get("checks", []))):
            return f"row {i}'s checks are not a list of [what, value, passed]"
        search = row.get("search")
        if search is not None:
            trials = search.get("trials") if isinstance(search, dict) else None
            if not (isinstance(trials, list) and all(isinstance(t, dict) and isinstance(t.get("dev"), (int, float))
                                                     for t in trials)
                    and search.get("best") in [t.get("trial") for t in trials]):
                return f"row {i}'s search is not a list of trials with their dev scores and the best one"
    return None


def read_causes(results: Path) -> dict[str, dict[str, str]]:
    """results/notes/causes.json: for each table, the cause of each row that lands outside its
    tolerance (missed, or above the paper), in a line that cites the evidence (a note's
    section, run records). {} when there is none; RnnlensError when it is not that shape."""
    from ..errors import RnnlensError

    path = results / CAUSES
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise RnnlensError(f"{path}: not JSON ({e})") from None
    if not (isinstance(data, dict) and all(isinstance(v, dict) and all(isinstance(c, str) for c in v.values())
                                           for v in data.values())):
        raise RnnlensError(f"{path}: expected {{table: {{row label: cause}}}} with text causes")
    return data
