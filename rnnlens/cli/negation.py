"""`rnnlens negation`: polarity adjectives, negated and intensified (implicit-ngrams 5.2)."""
from __future__ import annotations

from pathlib import Path

from ..argtypes import COUNT, NON_NEGATIVE, POSITIVE
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import json_text


def _negation_text(sets: list[dict], results: list[dict], forms: list[str]) -> str:
    """The terminal report of `rnnlens negation`: the adjective sets, then a table per model."""
    from ..analysis.negation import format_summary

    def some(words):
        return ", ".join(words[:6]) + (", ..." if len(words) > 6 else "")

    lines = [f"adjectives from {s['source']}: {len(s['adjectives'].positive)} positive "
             f"({some(s['adjectives'].positive)}), {len(s['adjectives'].negative)} negative "
             f"({some(s['adjectives'].negative)})" for s in sets]
    for r in results:
        what = "full-span n-gram score" if r["kind"] == "ngram" else "context score"
        lines += ["", f"{r['name']}: {r['cell']}, {r['task']} on {r['corpus']}; {what}; w = {r['readout']}"]
        if r["skipped"]:
            shown = ", ".join(r["skipped"][:8]) + (", ..." if len(r["skipped"]) > 8 else "")
            lines.append(f"{len(r['skipped'])} adjective(s) not in the vocabulary, skipped: {shown}")
        if r["skipped_forms"]:
            lines.append(f"form(s) left out, a modifier is not in the vocabulary: {', '.join(r['skipped_forms'])}")
        lines.append(format_summary(r["summary"], [f for f in forms if f not in r["skipped_forms"]]))
    return "\n".join(lines)


def cmd_negation(args) -> int:
    from ..analysis.negation import score_groups
    from ..app.negation import negation_studies
    from ..outfiles import check_not_an_input
    from ..train.checkpoint import output_dir

    if args.out is not None:           # the name as given: "" is an error there, not "no --out"
        check_not_an_input(args.out, [*args.model, args.adjectives, getattr(args, "data_dir", None)])
    out = Path(args.out) if args.out is not None else None
    if out is not None and out.exists() and not args.force:  # refuse before doing any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    res = negation_studies(args.model, data_dir=getattr(args, "data_dir", None), adjectives=args.adjectives,
                           forms=args.form, score=args.score, ratio=args.ratio, min_count=args.min_count,
                           lexicon_threshold=args.lexicon_threshold, progress=not args.quiet)
    if out is not None:
        from ..viz.plots import negation_boxes

        with output_dir(out, force=args.force) as tmp:
            (tmp / "adjectives.json").write_text(json_text(res.adjectives, indent=2), encoding="utf-8")
            (tmp / "negation.json").write_text(json_text(res.report, indent=2), encoding="utf-8")
            for r in res.results:
                what = "n-gram" if r["kind"] == "ngram" else "context"
                negation_boxes(score_groups(r["study"]), tmp / f"negation-{r['name']}.png",
                               f"{r['name']} ({r['cell']}): {what} polarity scores")
    if args.json:
        print(json_text(res.report, indent=2))
        return 0
    print(shown(_negation_text(res.sets, res.results, res.forms), keep="\n"))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def add_parser(sub) -> None:
    n = sub.add_parser("negation", help="scores of polarity adjectives, negated and intensified "
                       "(implicit-ngrams Section 5.2)")
    n.add_argument("--model", required=True, action="append", help="checkpoint folder (repeat for several)")
    n.add_argument("--data-dir", help="where the training data is now (default: where it was in training)")
    n.add_argument("--adjectives", help='JSON {"positive": [...], "negative": [...]}, or paper-table9 (the '
                   "implicit-ngrams paper's Table 9 adjectives): skip the extraction")
    n.add_argument("--form", action="append", help="phrase form with X for the adjective, repeatable "
                   "(default: 'X', 'not X', 'very X', 'not not X')")
    n.add_argument("--score", default="auto", choices=["auto", "ngram", "context"],
                   help="full-span n-gram score or context score (auto: context for va-w/va-ew)")
    n.add_argument("--ratio", type=POSITIVE, default=3.0, help="frequency ratio of the extraction (default 3)")
    n.add_argument("--min-count", type=COUNT, default=5, help="a token must occur more often than this (default 5)")
    n.add_argument("--lexicon-threshold", type=NON_NEGATIVE, default=0.2,
                   help="|textblob polarity| must exceed this (default 0.2)")
    n.add_argument("--out", help="write adjectives.json, negation.json and negation-<model>.png here")
    n.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    n.add_argument("--json", action="store_true", help="machine-readable output")
    n.add_argument("--quiet", action="store_true", help="no progress lines")
    n.set_defaults(func=cmd_negation)
