"""`rnnlens faithfulness`: deletion curves of n-gram scores against captum's methods."""
from __future__ import annotations

import json

from ..argtypes import SEED, SIZE


def cmd_faithfulness(args) -> int:
    from ..analysis.faithfulness import format_table
    from ..app.faithfulness import run_on_checkpoint

    res = run_on_checkpoint(args.model, data_dir=args.data_dir, split=args.split, max_k=args.max_k,
                            max_sentences=args.sentences, methods=tuple(args.methods), seed=args.seed,
                            progress=not args.quiet)
    if args.json:
        print(json.dumps(res.to_dict()))
    else:
        print(format_table(res))
    return 0


def add_parser(sub) -> None:
    f = sub.add_parser("faithfulness", help="do n-gram scores predict what deleting tokens does? "
                       "AOPC against captum's Integrated Gradients and occlusion")
    f.add_argument("--model", required=True, help="checkpoint folder")
    f.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    f.add_argument("--split", default="test")
    f.add_argument("--sentences", type=SIZE, default=200, help="sentences to use (default 200)")
    f.add_argument("--max-k", type=SIZE, default=10, help="delete up to K tokens (default 10)")
    f.add_argument("--methods", nargs="+", default=["ngram", "ngram-shared", "ig", "occlusion", "random"],
                   choices=["ngram", "ngram-shared", "ig", "occlusion", "random"])
    f.add_argument("--seed", type=SEED, default=0)
    f.add_argument("--json", action="store_true")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_faithfulness)
