"""`rnnlens unitary`: a URN's words and phrases (unitary-networks Tables 11.1-11.5)."""
from __future__ import annotations

from pathlib import Path

from ..argtypes import SIZE
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import json_text


def cmd_unitary(args) -> int:
    """A URN's words and phrases as the unitary-networks paper reads them (Tables 11.1-11.5):
    average effects, signatures, plane similarities, projections onto the prediction layer,
    Frobenius distances; with --pairs the Dyck matching pairs Q(close) Q(open)."""
    from ..analysis.unitary_tables import (
        check_urn,
        default_items,
        dyck_pairs,
        format_tables,
        item_tokens,
        urn_tables,
    )
    from ..app.run import Run
    from ..outfiles import check_not_an_input
    from ..train.checkpoint import output_dir

    out = Path(args.out) if args.out else None
    if out is not None:
        check_not_an_input(out, [args.model])
    if out is not None and out.exists() and not args.force:  # refuse before doing any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    run = Run.load(args.model)
    model, cfg, vocab, task = run.model, run.config, run.vocab, run.task
    check_urn(model, cfg.model.cell)
    if args.pairs and task != "dyck":
        raise RnnlensError(f"--pairs needs a Dyck model (task dyck); this one has task {task!r}")
    tokenizer = run.tokenizer
    names = list(dict.fromkeys(w.strip() for w in (args.words or default_items(vocab, task))))
    items = [(name, item_tokens(name, vocab, task, tokenizer)) for name in names]
    pairs = dyck_pairs(vocab) if args.pairs else None
    if args.pairs and not pairs:
        raise RnnlensError("no matching bracket pair has both symbols in the model's vocabulary")
    res = urn_tables(model, vocab, items, pairs, dims=args.dims)
    res = {"model": str(args.model), **res}
    if out is not None:
        from ..viz.plots import distance_heatmap, signature_dials

        with output_dir(out, force=args.force) as tmp:
            (tmp / "unitary.json").write_text(json_text(res, indent=2), encoding="utf-8")
            rows = res["items"]
            signature_dials([r["name"] for r in rows], [r["angles_degrees"] for r in rows], tmp / "signatures.png",
                            "signatures: rotation angles (0 degrees up, 90 right, 180 down)", [r["average_effect"] for r in rows])
            distance_heatmap([r["name"] for r in rows], res["frobenius"]["values"], tmp / "frobenius.png",
                             "Frobenius distances between word matrices")
            if pairs:
                signature_dials([r["name"] for r in res["pairs"]], [r["angles_degrees"] for r in res["pairs"]],
                                tmp / "pairs.png", "matching pairs Q(close) Q(open) (0 degrees up, 180 down)",
                                [r["average_effect"] for r in res["pairs"]])
    if args.json:
        print(json_text(res, indent=2))
        return 0
    print(shown(format_tables(res, str(args.model)), keep="\n"))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def add_parser(sub) -> None:
    u = sub.add_parser("unitary", help="a URN's words and phrases: average effects, signatures, planes, "
                       "projections, Frobenius distances (unitary-networks Tables 11.1-11.5)")
    u.add_argument("--model", required=True, help="checkpoint folder of a URN model (cell urn)")
    u.add_argument("--words", nargs="+", action="extend", metavar="ITEM",
                   help="words or phrases, one per argument; a phrase's words are separated by spaces "
                   "('the keys'). Formal languages (dyck, crossserial): a piece that is not a symbol is "
                   "split into characters, so '()' is ( then ); start an item that begins with - with a space "
                   "(' -+'). Default: Dyck's 10 brackets, a b c d, or the 20 most frequent tokens")
    u.add_argument("--pairs", action="store_true", help="Dyck: add the matching pairs Q(close) Q(open)")
    u.add_argument("--dims", type=SIZE, default=2, help="size of the prediction subspace (default 2; at most the rank of the prediction layer's "
                   "weight, which the output says where it caps the number asked)")
    u.add_argument("--out", help="write unitary.json, signatures.png, frobenius.png (and pairs.png) here")
    u.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    u.add_argument("--json", action="store_true", help="machine-readable output")
    u.set_defaults(func=cmd_unitary)
