"""`rnnlens train`: train a model from flags and/or a config file (resumable)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import RnnlensError
from ..metrics import scores_line
from .common import _add_config_flags, resume_command


def cmd_train(args) -> int:
    from ..outfiles import writing
    from ..train import distributed

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise RnnlensError(f"--out {args.out} and --resume {args.resume} name different folders; give one")
    if args.budget is not None and not args.config:
        raise RnnlensError(f"--budget {args.budget} names a budget of a --config file; give the --config that has it")
    out = args.resume or args.out
    if not out:
        raise RnnlensError("train needs --out FOLDER (or --resume FOLDER to continue an interrupted run)")
    dist = distributed.join()        # launched by torchrun: this process's rank; else OneProcess
    # OUT is locked from before --resume reads OUT.partial/ to the end of the run: a second
    # `train` on it (plain, --resume or --force) is refused while this one lives
    with distributed.main_writes(dist, lambda: writing(out, create_parent=True), None):
        return _train(args, out, dist)


# The paths a run reads: on --resume they may be given anew (the data moved, another working
# folder) and are not settings that change what is computed; the data itself is checked by
# content (train.run.data_contents), and the vectors and init weights only start a run.
PATHS = {"data": ("data_dir", "train_file", "dev_file", "test_file"), "model": ("embeddings_file",),
         "train": ("init_from",)}


def _paths_from(d: dict, started_in: str | None) -> None:
    """In the config dict `d` of a resumed run, each relative path that is not there from here
    but is from the folder the run started in, made absolute: resuming from another folder
    reads the data the run was started on (as `eval` and `predict` find a run's data)."""
    if not started_in:
        return
    for section, keys in PATHS.items():
        for key in keys:
            value = d[section].get(key)
            if isinstance(value, str) and value and not Path(value).is_absolute() and not Path(value).exists() \
                    and (Path(started_in) / value).exists():
                d[section][key] = str(Path(started_in) / value)


def _train(args, out, dist) -> int:
    from ..config import OWN_CORPUS_TASKS, Config, load_config_file, stated_task
    from ..outfiles import check_not_an_input
    from ..train import distributed
    from ..train.resume import (
        MAY_CHANGE,
        Checkpoints,
        config_differences,
        partial_dir,
        training_dir,
    )
    from ..train.run import train_run

    main = dist.is_main              # the process that writes
    saved = dist.find_resume(out) if args.resume else None   # the newest intact checkpoint
    if args.config:
        cfg = load_config_file(args.config, budget=args.budget)
    else:
        cfg = Config.from_dict(saved.state["config"]) if saved else Config()
    d = cfg.to_dict()
    for key, value in vars(args).items():
        if key.startswith("cfg:"):
            section, name = key[4:].split(".")
            d[section][name] = value
    given = getattr(args, "cfg:data.corpus", None)
    if given == "polarity" and d["data"]["task"] in OWN_CORPUS_TASKS:    # from_dict would replace it
        raise RnnlensError(f"--task {d['data']['task']} generates its own data; --corpus polarity would not be read "
                           f"(leave --corpus out, or give --corpus {d['data']['task']})")
    if saved:
        _paths_from(d, saved.state.get("started_in"))
    cfg = Config.from_dict(d)
    data, train = cfg.data, cfg.train
    m = cfg.model
    if m.layer_dropout and m.layers == 1 and m.memory is None and m.cell != "transformer" and main:
        print(f"note: model.layer_dropout {m.layer_dropout:g} acts between stacked layers and does nothing with "
              "model.layers 1", file=sys.stderr)
    if getattr(args, "cfg:data.bptt", None) is not None and main and (stated_task(data) != "lm" or data.sentence_level):
        what = ("a sentence-level language model reads whole sentences" if data.sentence_level else
                f"this run's data ({data.corpus}) is not a token stream")
        print(f"note: --bptt cuts the token stream of a language model into segments; {what}, so it is not read",
              file=sys.stderr)
    check_not_an_input(out, [args.config, data.data_dir, data.train_file, data.dev_file, data.test_file,
                             cfg.model.embeddings_file, train.init_from])
    if saved:
        before, now = Config.from_dict(saved.state["config"]).to_dict(), cfg.to_dict()
        diff = config_differences(before, now,
                                  {"train": MAY_CHANGE + PATHS["train"], "data": PATHS["data"], "model": PATHS["model"]})
        # a path may be given anew (the same input, found elsewhere), not added or taken away
        diff += [f"{section}.{key} ({before[section].get(key)!r} -> {now[section].get(key)!r})"
                 for section, keys in PATHS.items() for key in keys
                 if bool(before[section].get(key)) != bool(now[section].get(key))]
        if diff:
            raise RnnlensError(f"--resume {out}: the config differs from the interrupted run's in "
                               f"{'; '.join(diff)}; resume with the same settings, or start again with --force")
        if main:
            print(f"resuming {out} from {saved.where()}", flush=True)
    try:                             # only rank 0 creates and writes OUT.partial/
        with distributed.main_writes(dist, lambda: training_dir(out, force=args.force, resume=saved is not None),
                                     partial_dir(out)) as tmp:
            ckpts = Checkpoints(tmp, cfg.to_dict(), cfg.train.checkpoint_every, resume=saved,
                                hint=resume_command(out, args.force))
            res = train_run(cfg, tmp, progress=main and not args.quiet, checkpoints=ckpts, dist=dist)
    finally:
        dist.close()
    if not main:
        return 0
    if res.test:
        print("test " + scores_line(res.test))
    print(f"wrote {out}")
    return 0


def add_parser(sub) -> None:
    t = sub.add_parser("train", help="train a classifier from flags and/or a config file")
    t.add_argument("--config", help="JSON (or TOML) file with sections data, model, train")
    t.add_argument("--budget", help="a named budget of the config file (e.g. quick); default: full")
    t.add_argument("--out", help="checkpoint folder to create (trained in OUT.partial/, renamed when done)")
    t.add_argument("--resume", metavar="OUT", help="continue the interrupted run whose --out was OUT "
                   "from the newest intact checkpoint in OUT.partial/ (same config; flags that differ are refused)")
    t.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_config_flags(t)
    t.set_defaults(func=cmd_train)
