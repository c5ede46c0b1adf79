"""`rnnlens demo`: train a GRU on the built-in polarity corpus and write its report."""
from __future__ import annotations

from ..argtypes import SEED, SIZE


def cmd_demo(args) -> int:
    from ..demo import polarity_table_text, run_demo

    res = run_demo(args.out, force=args.force, cell=args.cell, seed=args.seed, epochs=args.epochs,
                   double_negation=not args.no_double_negation, progress=not args.quiet)
    print(polarity_table_text({**res["table"], "negation_flips": res["negation_flips"],
                               "double_negation_restores": res["double_negation_restores"],
                               "adjectives": len(res["adjectives"])}))
    acc = (res["test"] or {}).get("accuracy")
    print(f"test accuracy {acc:.3f}; wrote {args.out}/report.html in {res['seconds']:.1f}s")
    return 0


def add_parser(sub) -> None:
    d = sub.add_parser("demo", help="train a GRU on the built-in polarity corpus and write a report")
    d.add_argument("--out", default="demo-out", help="output folder (default: demo-out)")
    d.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    d.add_argument("--cell", default="gru", choices=["elman", "gru", "lstm"])
    d.add_argument("--seed", type=SEED, default=0)
    d.add_argument("--epochs", type=SIZE, default=None)
    d.add_argument("--no-double-negation", action="store_true",
                   help="leave 'not not X' out of training (the sequence-level paper's Figure 1)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_demo)
