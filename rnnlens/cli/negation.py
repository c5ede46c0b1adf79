"""`rnnlens negation`: polarity adjectives, negated and intensified (implicit-ngrams 5.2)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..argtypes import COUNT, NON_NEGATIVE, POSITIVE
from ..errors import RnnlensError


def _read_adjectives(path):
    from ..analysis.negation import Adjectives

    try:
        d = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise RnnlensError(f"adjectives file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RnnlensError(f"cannot read adjectives file {path}: {e}") from None
    adj = Adjectives.from_dict(d, where=str(path))
    if not adj.positive and not adj.negative:
        raise RnnlensError(f"{path}: both adjective lists are empty")
    return adj


def _training_split(run):
    """(key, examples): the full training split of the data a run was trained on; key
    identifies the corpus, so that adjectives are extracted once per corpus."""
    import dataclasses

    key = json.dumps(dataclasses.asdict(run.data_config().data), sort_keys=True)
    return key, run.split("train")


def _model_names(paths: list[str]) -> list[str]:
    import re

    names, seen = [], {}
    for p in paths:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(p).resolve().name) or "model"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


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
    from ..analysis.negation import (
        FORMS,
        extract_adjectives,
        form_tokens,
        load_lexicon,
        negation_study,
        score_groups,
        sentiment_sides,
        summarize_study,
    )
    from ..analysis.ngrams import require_real
    from ..app.run import Run
    from ..data.batching import Example, collate
    from ..train.checkpoint import output_dir

    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:  # refuse before doing any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    forms = list(dict.fromkeys(args.form or FORMS))
    for f in forms:
        form_tokens(f, "X")
    given = _read_adjectives(args.adjectives) if args.adjectives else None
    kind = None if args.score == "auto" else args.score
    lexicon = None
    sets: dict[str, dict] = {}          # one adjective set per distinct training corpus
    results = []
    names = _model_names(args.model)
    loaded = []                         # every model is checked before any work or output
    for path in args.model:
        run = Run.load(path, data_dir=getattr(args, "data_dir", None))
        model, cfg, vocab, meta, task = run.model, run.config, run.vocab, run.meta, run.task
        if cfg.model.cell == "transformer":
            raise RnnlensError(f"{path}: a transformer has no n-gram decomposition; the negation study "
                               "scores recurrent models")
        if cfg.model.layers != 1 or cfg.model.bidirectional:
            raise RnnlensError(f"{path}: the negation study explains single-layer, one-direction models "
                               f"(this one: layers {cfg.model.layers}, bidirectional {cfg.model.bidirectional})")
        sides = sentiment_sides(task, run.labels, cfg.data.corpus)
        sides.readout(model.readout_weight.shape[0])   # an MLP head or odd rows fail now, not after the work
        require_real(model.linear_view(collate([Example(["x"])], vocab)), "n-gram scores")   # max-plus: now
        loaded.append((run, model, cfg, vocab, meta, task, sides))
    for k, (path, name, (run, model, cfg, vocab, meta, task, sides)) in enumerate(zip(args.model, names, loaded), 1):
        print(f"negation: model {k}/{len(names)}: {path}", file=sys.stderr)
        if given is not None:
            key = "given"
            if key not in sets:
                sets[key] = {"source": str(args.adjectives), "adjectives": given, "models": []}
        else:
            key, examples = _training_split(run)
            if key not in sets:
                lexicon = lexicon if lexicon is not None else load_lexicon()
                print(f"negation: extracting adjectives from the {cfg.data.corpus} training split "
                      f"({len(examples):,} instances)", file=sys.stderr)
                adj = extract_adjectives(examples, sides.is_positive, sides.is_negative, lexicon, ratio=args.ratio,
                                         min_count=args.min_count, lexicon_threshold=args.lexicon_threshold)
                if not adj.positive and not adj.negative:
                    raise RnnlensError(
                        f"no polarity adjectives found in the {cfg.data.corpus} training split "
                        f"({adj.candidates['positive']} positive / {adj.candidates['negative']} negative tokens "
                        "passed the frequency ratio, none is an adjective of that polarity in textblob's lexicon); "
                        "pass --adjectives FILE")
                sets[key] = {"source": f"{cfg.data.corpus} train split", "adjectives": adj, "models": []}
        entry = sets[key]
        entry["models"].append(name)
        adj = entry["adjectives"]
        study = negation_study(model, vocab, adj.positive, adj.negative, forms=forms, kind=kind, sides=sides)
        if not study.rows:
            raise RnnlensError(f"{path}: none of the adjectives is in the model's vocabulary"
                               + (f" (or no form is: {', '.join(study.skipped_forms)})" if study.skipped_forms
                                  else ""))
        results.append({"name": name, "path": str(path), "cell": cfg.model.cell, "task": task,
                        "corpus": cfg.data.corpus, "adjectives_from": entry["source"],
                        "summary": summarize_study(study), **study.to_dict(), "study": study})
    set_list = list(sets.values())
    if len(set_list) == 1:
        adjectives_json = {"source": set_list[0]["source"], "models": set_list[0]["models"],
                           **set_list[0]["adjectives"].to_dict()}
    else:
        adjectives_json = {"sets": [{"source": s["source"], "models": s["models"], **s["adjectives"].to_dict()}
                                    for s in set_list]}
    report = {"forms": forms, "models": [{k: v for k, v in r.items() if k != "study"} for r in results]}
    if out is not None:
        from ..viz.plots import negation_boxes

        with output_dir(out, force=args.force) as tmp:
            (tmp / "adjectives.json").write_text(json.dumps(adjectives_json, indent=2), encoding="utf-8")
            (tmp / "negation.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
            for r in results:
                what = "n-gram" if r["kind"] == "ngram" else "context"
                negation_boxes(score_groups(r["study"]), tmp / f"negation-{r['name']}.png",
                               f"{r['name']} ({r['cell']}): {what} polarity scores")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(_negation_text(set_list, results, forms))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def add_parser(sub) -> None:
    n = sub.add_parser("negation", help="scores of polarity adjectives, negated and intensified "
                       "(implicit-ngrams Section 5.2)")
    n.add_argument("--model", required=True, action="append", help="checkpoint folder (repeat for several)")
    n.add_argument("--data-dir", help="where the training data is now (default: where it was in training)")
    n.add_argument("--adjectives", help='JSON {"positive": [...], "negative": [...]}: skip the extraction')
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
    n.set_defaults(func=cmd_negation)
