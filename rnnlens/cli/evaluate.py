"""`rnnlens eval` and `rnnlens approx-error`: a trained model on a split of its data."""
from __future__ import annotations

from pathlib import Path

from ..argtypes import new_file
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import check_new_file, json_text
from ..metrics import scores_line
from .common import _load_run


REPORTED_TASKS = ("classify", "relation")     # per-class report and confusion matrix


def cmd_eval(args) -> int:
    from ..train.run import batches, check_device
    from ..train.trainer import Trainer

    png = Path(args.png) if args.png is not None else None
    if png is not None:                                          # refuse before any work
        check_new_file(png, args.force, [args.model, getattr(args, "test_file", None)])
    if args.test_file is not None and not str(args.test_file).strip():
        raise RnnlensError("--test-file is an empty name; give the labelled file to evaluate on")
    if args.test_file and args.split is not None:
        raise RnnlensError("give --split (a split of the model's dataset) or --test-file, not both")
    args.split = "test" if args.split is None else args.split
    check_device(args.device, "--device")
    run = _load_run(args, device=args.device)
    run.config.train.device = args.device
    if png is not None and run.task not in REPORTED_TASKS:
        raise RnnlensError(f"--png draws a classifier's confusion matrix; this model's task is {run.task!r}")
    if args.test_file:
        from ..app.predict import file_examples

        what = str(args.test_file)
        data = batches(run.data_config(), run.task, file_examples(run, args.test_file), run.vocab, train=False)
    else:
        what, data = args.split, run.batches(args.split)
    confusion = None
    if run.task in REPORTED_TASKS:             # counted during the evaluation's own pass
        from ..app.predict import Confusion

        confusion = Confusion(run)
    details: dict = {}
    scores = Trainer(run.model, run.config.train, progress=False).evaluate(
        data, each=None if confusion is None else confusion.add, details=details)
    report = None if confusion is None else confusion.report()
    per_type = details.get("per_type")
    if png is not None:
        from ..outfiles import replacing
        from ..viz.plots import confusion_matrix

        with replacing(png, suffix=".png") as tmp:
            confusion_matrix(report["labels"], report["confusion"], tmp, f"{run.path.name} on {Path(what).name}")
    if args.json:
        print(json_text({"split" if not args.test_file else "file": what, **scores,
                          **({"report": report} if report else {}),
                          **({"per_type": per_type} if per_type else {})}))
    else:
        print(f"{what} " + scores_line(scores))
        if per_type:
            from ..app.predict import per_type_text

            print()
            print(shown(per_type_text(per_type), keep="\n"))
        if report is not None:
            from ..app.predict import report_text

            print()
            print(shown(report_text(report), keep="\n"))
        if png is not None:
            print(f"wrote {png}")
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
        print(json_text({"split": args.split, **res}))
    else:
        print(format_report(res, args.split))
    return 0


def add_parser(sub) -> None:
    v = sub.add_parser("eval", help="evaluate a trained model on a split of its dataset, or on a labelled "
                       "file (classifiers and relation classifiers: per-class precision, recall, F1 and the "
                       "confusion matrix too)")
    v.add_argument("--model", required=True, help="checkpoint folder")
    v.add_argument("--split", default=None, help="train, dev or test (default test)")
    v.add_argument("--test-file", metavar="FILE", help="a labelled file in the training format instead of a "
                   "split: label<TAB>text lines (classifiers), CoNLL-2003 columns (taggers), plain text (LMs)")
    v.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    v.add_argument("--device", default="cpu")
    v.add_argument("--png", type=new_file, help="classifiers: also draw the confusion matrix to this PNG file")
    v.add_argument("--force", action="store_true", help="replace the PNG file if it exists")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_eval)

    a = sub.add_parser("approx-error", help="how well the linear view predicts the model's states "
                       "(implicit-ngrams eq. 15)")
    a.add_argument("--model", required=True, help="checkpoint folder (single layer, one direction)")
    a.add_argument("--split", default="test")
    a.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=cmd_approx_error)
