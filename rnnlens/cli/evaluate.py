"""`rnnlens eval` and `rnnlens approx-error`: a trained model on a split of its data."""
from __future__ import annotations

import json

from ..errors import RnnlensError
from .common import _load_run, _scores_line


def cmd_eval(args) -> int:
    from ..train.run import check_device
    from ..train.trainer import Trainer

    check_device(args.device)
    run = _load_run(args, device=args.device)
    run.config.train.device = args.device
    scores = Trainer(run.model, run.config.train, progress=False).evaluate(run.batches(args.split))
    if args.json:
        print(json.dumps({"split": args.split, **scores}))
    else:
        print(f"{args.split} " + _scores_line(scores))
    return 0


def cmd_approx_error(args) -> int:
    from ..analysis.approx import approx_error, format_report
    run = _load_run(args)
    cfg = run.config
    if cfg.model.cell == "transformer" or cfg.model.layers != 1 or cfg.model.bidirectional:
        raise RnnlensError("approx-error explains single-layer, one-direction recurrent models "
                           f"(this one: cell {cfg.model.cell}, layers {cfg.model.layers}, "
                           f"bidirectional {cfg.model.bidirectional})")
    res = approx_error(run.model, run.batches(args.split))
    if args.json:
        print(json.dumps({"split": args.split, **res}))
    else:
        print(format_report(res, args.split))
    return 0


def add_parser(sub) -> None:
    v = sub.add_parser("eval", help="evaluate a trained model on a split of its dataset")
    v.add_argument("--model", required=True, help="checkpoint folder")
    v.add_argument("--split", default="test")
    v.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    v.add_argument("--device", default="cpu")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_eval)

    a = sub.add_parser("approx-error", help="how well the linear view predicts the model's states "
                       "(implicit-ngrams eq. 15)")
    a.add_argument("--model", required=True, help="checkpoint folder (single layer, one direction)")
    a.add_argument("--split", default="test")
    a.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=cmd_approx_error)
