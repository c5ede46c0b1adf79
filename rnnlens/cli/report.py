"""`rnnlens report`: one self-contained HTML report of a trained model."""
from __future__ import annotations

from pathlib import Path

from ..argtypes import COUNT


def cmd_report(args) -> int:
    from ..app.report import build_report

    build_report(args.model, args.out, data_dir=args.data_dir, sentences=args.text, n_samples=args.samples,
                 faithfulness_sentences=args.faithfulness_sentences, negation=not args.no_negation,
                 progress=not args.quiet, force=args.force, view=args.view)
    print(f"wrote {Path(args.out) / 'report.html'}")
    return 0


def add_parser(sub) -> None:
    r = sub.add_parser("report", help="one self-contained HTML report of a trained model")
    r.add_argument("--model", required=True, help="checkpoint folder")
    r.add_argument("--out", required=True, help="output folder (report.html, report.json)")
    r.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    r.add_argument("--text", action="append", help="a sentence to explain (repeatable; default: test sentences)")
    r.add_argument("--samples", type=COUNT, default=4, help="test sentences to explain when no --text (default 4)")
    r.add_argument("--faithfulness-sentences", type=COUNT, default=100,
                   help="sentences for the faithfulness table (default 100)")
    r.add_argument("--view", choices=("first-order", "exact"), default="first-order",
                   help="the n-gram view of the sample sentences: first-order (default; linearised at the zero "
                   "state) or exact (linearised at the true states: no remainder, context-dependent n-grams)")
    r.add_argument("--no-negation", action="store_true", help="leave out the negation study")
    r.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.set_defaults(func=cmd_report)
