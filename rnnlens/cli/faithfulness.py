"""`rnnlens faithfulness`: how well token attributions (n-gram scores, captum's methods)
predict what removing the tokens does: AOPC, ERASER comprehensiveness and sufficiency,
infidelity and Spearman against leave-one-out."""
from __future__ import annotations

from ..argtypes import SEED, SIZE, new_file
from ..outfiles import json_text


def _json_target(text: str) -> str:
    """--json's value: "-" for standard output, otherwise a file to write."""
    return text if text == "-" else new_file(text)


def cmd_faithfulness(args) -> int:
    from ..analysis.faithfulness import format_table
    from ..app.faithfulness import run_on_checkpoint
    from ..outfiles import check_new_file

    if args.json is not None and args.json != "-":
        check_new_file(args.json, args.force, [args.model, args.data_dir])   # before the minutes of work

    res = run_on_checkpoint(args.model, data_dir=args.data_dir, split=args.split, max_k=args.max_k,
                            max_sentences=args.sentences, methods=tuple(args.methods) if args.methods else None,
                            metrics=tuple(args.metrics) if args.metrics is not None else None,
                            n_perturb_samples=args.perturb_samples, seed=args.seed, progress=not args.quiet)
    text = json_text(res.to_dict())
    if args.json == "-":
        print(text)
        return 0
    if args.json:
        from ..outfiles import replacing

        with replacing(args.json, suffix=".json") as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
    print(format_table(res))
    if args.json:
        print(f"wrote {args.json}")
    return 0


def add_parser(sub) -> None:
    f = sub.add_parser("faithfulness", help="do token attributions predict what removing the tokens does? "
                       "AOPC, ERASER comprehensiveness/sufficiency, infidelity of n-gram scores and captum's methods")
    f.add_argument("--model", required=True, help="checkpoint folder")
    f.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    f.add_argument("--split", default="test")
    f.add_argument("--sentences", type=SIZE, default=200, help="sentences to use (default 200)")
    f.add_argument("--max-k", type=SIZE, default=10, help="delete up to K tokens (default 10)")
    f.add_argument("--methods", nargs="+", metavar="METHOD",
                   help="attribution methods to compare, e.g. ngram ngram-shared ig occlusion grad-input random "
                        "(default: every method the model can run; the others are listed in a note; "
                        "an unknown name lists the valid ones)")
    f.add_argument("--metrics", nargs="*", metavar="METRIC",
                   help="metrics beside AOPC and Spearman: comprehensiveness, sufficiency, infidelity "
                        "(default: all three; the flag alone: none of them)")
    f.add_argument("--perturb-samples", type=SIZE, default=16,
                   help="infidelity's random perturbations per sentence (default 16)")
    f.add_argument("--seed", type=SEED, default=0)
    f.add_argument("--force", action="store_true", help="replace the --json FILE if it exists")
    f.add_argument("--json", nargs="?", const="-", type=_json_target, metavar="FILE",
                   help="the results as JSON: alone, on standard output instead of the table; "
                        "with FILE, written there beside the table")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_faithfulness)
