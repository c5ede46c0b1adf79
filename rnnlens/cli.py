"""The `rnnlens` command line. Bad input ends with one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

from .argtypes import COUNT, NON_NEGATIVE, POSITIVE, SEED, SIZE, new_file
from .cli_families import cmd_attention, cmd_complete, cmd_faithfulness, cmd_unitary, cmd_wfsa
from .errors import RnnlensError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit code 2)."""

    def error(self, message: str):
        # "argument --top: must be >= 1, got 0" -> "--top must be >= 1, got 0"
        if message.startswith("argument ") and ": must be " in message:
            flag, _, rest = message[len("argument "):].partition(": ")
            message = f"{flag} {rest}"
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _config_type(where: str, typ):
    """The argparse type of a config flag: its text parsed as the field's type (the range is
    Config.validate's to check, naming the field)."""
    from .config import parse_flag

    def parse(text: str):
        try:
            return parse_flag(text, typ, where)
        except RnnlensError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    from .config import TASKS, flat_fields

    g = p.add_argument_group("config overrides (each also settable in --config)")
    from .cells import CELLS
    from .data.datasets import DATASETS

    choices = {"corpus": ["polarity", "tsv", *DATASETS], "cell": [*CELLS, "transformer"],
               "task": list(TASKS)}
    for name, (section, typ) in flat_fields().items():
        flags = [f"--{name.replace('_', '-')}"] + (["--data"] if name == "corpus" else [])
        extra = f": one of {', '.join(choices[name])}" if name in choices else ""
        # SUPPRESS: a flag not given is absent, so that a given "none" (None) is told from it
        g.add_argument(*flags, dest=f"cfg:{section}.{name}", metavar="V", help=f"{section}.{name}{extra}",
                       type=_config_type(f"{section}.{name}", typ), default=argparse.SUPPRESS)


def cmd_demo(args) -> int:
    from .demo import polarity_table_text, run_demo

    res = run_demo(args.out, force=args.force, cell=args.cell, seed=args.seed, epochs=args.epochs,
                   double_negation=not args.no_double_negation, progress=not args.quiet)
    print(polarity_table_text({**res["table"], "negation_flips": res["negation_flips"],
                               "double_negation_restores": res["double_negation_restores"],
                               "adjectives": len(res["adjectives"])}))
    acc = (res["test"] or {}).get("accuracy")
    print(f"test accuracy {acc:.3f}; wrote {args.out}/report.html in {res['seconds']:.1f}s")
    return 0


def _scores_line(scores: dict) -> str:
    """The numbers of a metrics dict as k=v; breakdowns (dicts) are left to --json / metrics.jsonl."""
    return " ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, (int, float)))


def cmd_train(args) -> int:
    from .outfiles import writing
    from .train import distributed

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise RnnlensError(f"--out {args.out} and --resume {args.resume} name different folders; give one")
    out = args.resume or args.out
    if not out:
        raise RnnlensError("train needs --out FOLDER (or --resume FOLDER to continue an interrupted run)")
    dist = distributed.join()        # launched by torchrun: this process's rank; else None
    # OUT is locked from before --resume reads OUT.partial/ to the end of the run: a second
    # `train` on it (plain, --resume or --force) is refused while this one lives
    with distributed.main_writes(dist, lambda: writing(out, create_parent=True), None):
        return _train(args, out, dist)


def _train(args, out, dist) -> int:
    import shlex

    from .train import distributed
    from .config import Config, load_config_file
    from .train.resume import Checkpoints, config_differences, partial_dir, training_dir
    from .train.run import train_run

    main = dist is None or dist.is_main    # the process that writes
    saved = distributed.find_resume(dist, out) if args.resume else None   # the newest intact checkpoint
    if args.config:
        cfg = load_config_file(args.config, budget=args.budget)
    else:
        cfg = Config.from_dict(saved.state["config"]) if saved else Config()
    d = cfg.to_dict()
    for key, value in vars(args).items():
        if key.startswith("cfg:"):
            section, name = key[4:].split(".")
            d[section][name] = value
    cfg = Config.from_dict(d)
    if saved:
        diff = config_differences(Config.from_dict(saved.state["config"]).to_dict(), cfg.to_dict())
        if diff:
            raise RnnlensError(f"--resume {out}: the config differs from the interrupted run's in "
                               f"{'; '.join(diff)}; resume with the same settings, or start again with --force")
        if main:
            print(f"resuming {out} from {saved.where()}", flush=True)
    try:                             # only rank 0 creates and writes OUT.partial/
        with distributed.main_writes(dist, lambda: training_dir(out, force=args.force, resume=saved is not None),
                                     partial_dir(out)) as tmp:
            ckpts = Checkpoints(tmp, cfg.to_dict(), cfg.train.checkpoint_every, resume=saved,
                                hint=f"rnnlens train --resume {shlex.quote(str(out))}")
            res = train_run(cfg, tmp, progress=main and not args.quiet, checkpoints=ckpts, dist=dist)
    finally:
        if dist is not None:
            distributed.shutdown()
    if not main:
        return 0
    if res.test:
        print("test " + _scores_line(res.test))
    print(f"wrote {out}")
    return 0


def cmd_vectors(args) -> int:
    from .data.word2vec import check_writable
    from .outfiles import writing

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    check_writable(args.out, force=args.force)  # before the training, not after
    with writing(args.out):                     # one writer of the file at a time
        return _vectors(args, say)


def _vectors(args, say) -> int:
    from .data.word2vec import corpus_sentences, train_word2vec, write_vectors

    sentences, notes = corpus_sentences(args.corpus, args.data_dir, seed=args.seed)
    for note in notes:
        say(note)
    vectors = train_word2vec(sentences, dim=args.dim, epochs=args.epochs, min_count=args.min_count,
                             window=args.window, seed=args.seed, threads=args.threads, progress=say)
    del sentences
    write_vectors(vectors, args.out, force=args.force, normalize=args.normalize, std=args.std)
    print(f"wrote {len(vectors.words):,} vectors of {vectors.dim} dims to {args.out}")
    return 0


def _load_run(args, device: str = "cpu"):
    """The model folder of --model, with --data-dir (if the command has it) as where its data
    lives now."""
    from .app.run import Run

    return Run.load(args.model, device=device, data_dir=getattr(args, "data_dir", None))


def cmd_eval(args) -> int:
    from .train.run import check_device
    from .train.trainer import Trainer

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
    from .analysis.approx import approx_error, format_report
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


def cmd_bench(args) -> int:
    from .bench import run_bench, run_suite

    if args.all:
        print(run_suite(quick=args.quick, device=args.device, out=args.out, threads=args.threads,
                        time_limit=args.time_limit))
        return 0
    run_bench(cell=args.cell, hidden=args.hidden, batch=args.batch, length=args.length, steps=args.steps)
    return 0


def cmd_explain(args) -> int:
    png = Path(args.png) if args.png else None
    # before any work: the parser's `new_file` refused a folder or a missing parent folder
    if png is not None and png.exists() and not args.force:
        raise RnnlensError(f"{png} exists; use --force to replace it")
    if (args.text is None) == (args.file is None):
        raise RnnlensError("give the text to explain, or --file with a document (not both)")
    text = args.text
    if args.file is not None:
        try:
            text = Path(args.file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as e:
            raise RnnlensError(f"cannot read {args.file}: {e}") from None
    run = _load_run(args)
    model, vocab = run.model, run.vocab
    tokens = run.tokenizer(text)
    if not tokens:
        raise RnnlensError("the text is empty: nothing to explain")
    labels = run.labels
    if args.file is not None or len(tokens) > STREAM_TOKENS:
        return _explain_document(args, model, vocab, tokens, labels)
    from .analysis.sentence import explain_text

    ex = explain_text(model, vocab, tokens, target=args.target)
    if ex.unknown:
        which = "all tokens are" if len(ex.unknown) == len(tokens) else "some tokens are"
        print(f"warning: {which} unknown to the model and read as <unk>: {' '.join(sorted(set(ex.unknown)))}",
              file=sys.stderr)
    top = args.top or None
    if png is not None:
        _explain_png(ex, png)
    if args.json:
        print(json.dumps(ex.to_dict(top), indent=2))
        return 0
    print(_explain_text(ex, top))
    if png is not None:
        print(f"wrote {png}")
    return 0


def _explain_png(ex, png: Path) -> None:
    """The heatmap of a sentence: the standalone n-gram scores where the model has them,
    else the contributions (per position: those of the n-grams ending at each token)."""
    import numpy as np

    from .outfiles import replacing
    from .viz.plots import ngram_heatmap

    T = len(ex.tokens)
    if ex.polarity is not None:
        grid, title = ex.polarity, f"n-gram scores toward '{ex.positions[0].target}'"
    elif ex.sentence_level:
        grid, title = ex.positions[0].ngrams[0], f"n-gram contributions toward '{ex.positions[0].target}'"
    else:
        grid = np.stack([p.ngrams[0, t] for t, p in enumerate(ex.positions)]) if T else np.zeros((0, 0))
        title = "n-gram contributions to each token's output"
    with replacing(png, suffix=".png") as tmp:
        ngram_heatmap(ex.tokens, grid, tmp, title)


def _explain_text(ex, top: int | None) -> str:
    """The terminal form of a TextExplanation: the prediction, then each explained output as
    output = offset + n-grams + remainder with its largest n-grams."""
    kind = "exact" if ex.exact else "first-order"
    layer = "" if ex.layers == 1 and ex.directions == 1 else " of the first layer"
    lines = []
    if ex.probabilities:
        probs = ", ".join(f"{lab} {p:.3f}" for lab, p in ex.probabilities.items())
        lines.append(f"prediction: {ex.prediction} ({probs})")
    else:
        lines.append(f"prediction: {ex.prediction}")
    lines.append(f"explained: {ex.explained} = offset + n-grams + remainder ({kind} view{layer})")
    both = ex.directions > 1
    shown = [p.top(ex.tokens, top if top is not None or p.position is None else 3) for p in ex.positions]
    width = max(10, min(60, max((len(r["text"]) for rows in shown for r in rows), default=10)))
    for p, rows in zip(ex.positions, shown):
        head = "" if p.position is None else f"[{p.position}] {ex.tokens[p.position]} -> {p.target}: "
        lines.append(f"{head}{p.output:+.3f} = offset {p.offset:+.3f} + n-grams {p.ngram_total:+.3f} "
                     f"+ remainder {p.remainder:+.3f}")
        if not rows:
            continue
        indent = "" if p.position is None else "    "
        if p.position is None:
            lines.append(f"{'direction  ' if both else ''}{'start':>5} {'end':>4}  {'n-gram':<{width}} {'contribution':>12}")
        for r in rows:
            text = r["text"] if len(r["text"]) <= width else r["text"][: width - 1] + "…"
            d = f"{r['direction']:<9}  " if both else ""
            lines.append(f"{indent}{d}{r['start']:>5} {r['end']:>4}  {text:<{width}} {r['score']:>+12.3f}")
    return "\n".join(lines)


def _read_adjectives(path):
    from .analysis.negation import Adjectives

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
    from .analysis.negation import format_summary

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
    from .analysis.negation import (FORMS, extract_adjectives, form_tokens, load_lexicon, negation_study,
                                    score_groups, sentiment_sides, summarize_study)
    from .analysis.ngrams import require_real
    from .data.batching import Example, collate
    from .app.run import Run
    from .train.checkpoint import output_dir

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
        from .viz.plots import negation_boxes

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


def cmd_report(args) -> int:
    from .app.report import build_report

    build_report(args.model, args.out, data_dir=args.data_dir, sentences=args.text, n_samples=args.samples,
                 faithfulness_sentences=args.faithfulness_sentences, negation=not args.no_negation,
                 progress=not args.quiet, force=args.force)
    print(f"wrote {Path(args.out) / 'report.html'}")
    return 0


STREAM_TOKENS = 400       # longer texts are explained by the streamed top-k
DOCUMENT_CHUNK = 2048     # tokens of a document in one linear view (memory per chunk, not per document)


def _explain_document(args, model, vocab, tokens, labels) -> int:
    """Streamed top-k n-grams of a long document in memory that does not grow with it: the
    linear view is built for DOCUMENT_CHUNK tokens at a time and TopNgrams carries the
    n-grams of at most --max-n tokens and the running top-k from one chunk to the next."""
    import torch
    from tqdm import tqdm

    from .analysis.ngrams import TopNgrams
    from .analysis.sentence import readout_row
    from .data.batching import Example, collate

    if model.cfg.layers != 1 or getattr(model.encoder, "directions", 1) != 1 or model.cfg.cell == "transformer":
        raise RnnlensError("documents are explained for one-layer, one-direction recurrent models; "
                           "use rnnlens.analysis.attribution.NGramAttribution for others")
    if model.cfg.memory is not None:
        raise RnnlensError("a memory network's head reads the memory block's output, not the recurrent state "
                           "the n-grams decompose, so a document's standalone n-gram scores do not apply; "
                           "explain its sentences instead (the gradient reads the block)")
    if args.png:
        raise RnnlensError("--png draws the heatmap of a sentence; a document gets the top-k list only")
    w, name = readout_row(model, vocab, args.target)
    stream = TopNgrams(w, k=args.top or 20, max_n=args.max_n)
    L = DOCUMENT_CHUNK
    with torch.no_grad(), tqdm(total=len(tokens), unit="tok", desc="explain", file=sys.stderr,
                               disable=len(tokens) <= L) as bar:
        for a in range(0, len(tokens), L):
            # one token of overlap: every chunk after the first starts at a token already read,
            # so a view that treats a call's first token apart (MVM: the only n-gram start)
            # or whose step reads x_{t-1} sees the document as one call does
            lo = max(0, a - 1)
            stream.add(model.linear_view(collate([Example(tokens[lo: a + L])], vocab)), offset=lo)
            bar.update(min(L, len(tokens) - a))
    top = stream.result()
    rows = [{"start": i, "end": t, "text": " ".join(tokens[i: t + 1]), "score": sc} for sc, i, t in top]
    if args.json:
        print(json.dumps({"tokens": len(tokens), "target": name, "max_n": args.max_n, "ngrams": rows}, indent=2))
        return 0
    print(f"{len(tokens)} tokens; the {len(rows)} n-grams of at most {args.max_n} tokens with the largest "
          f"|score| toward '{name}' (w^T v(i:t), each n-gram on its own)")
    width = max(10, min(60, max((len(r["text"]) for r in rows), default=10)))
    print(f"{'start':>6} {'end':>6}  {'n-gram':<{width}} {'score':>8}")
    for r in rows:
        text = r["text"] if len(r["text"]) <= width else r["text"][: width - 1] + "…"
        print(f"{r['start']:>6} {r['end']:>6}  {text:<{width}} {r['score']:>+8.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .version import __version__

    p = _Parser(prog="rnnlens", description="Train recurrent networks and read what they compute as n-grams.")
    p.add_argument("--version", action="version", version=f"rnnlens {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

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

    wv = sub.add_parser("vectors", help="train word2vec vectors on a corpus's text (gensim) and write a "
                        "GloVe-format file for --embeddings-file")
    wv.add_argument("--corpus", required=True, help="a dataset name (imdb, ptb, wikitext2, sst2, subj, ...); "
                    "every split's text is used, tokenised as for training, no labels")
    wv.add_argument("--data-dir", required=True, help="the folder holding the dataset (e.g. ../shared/data)")
    wv.add_argument("--out", required=True, help="the vectors file to write (.txt, or .txt.gz)")
    wv.add_argument("--dim", type=SIZE, default=300, help="vector size (default 300)")
    wv.add_argument("--epochs", type=SIZE, default=5, help="passes over the corpus (default 5)")
    wv.add_argument("--min-count", type=COUNT, default=5, help="ignore words rarer than this (default 5)")
    wv.add_argument("--window", type=SIZE, default=5, help="context words on each side (default 5)")
    wv.add_argument("--seed", type=SEED, default=0)
    wv.add_argument("--threads", type=SIZE, default=1,
                    help="worker threads (default 1: the only setting that is reproducible bit for bit)")
    wv.add_argument("--normalize", action="store_true", help="write unit-length vectors")
    wv.add_argument("--std", type=POSITIVE, help="then scale all vectors by one factor to this coordinate "
                    "standard deviation (1: the scale of the N(0,1) init that words missing from the file keep)")
    wv.add_argument("--force", action="store_true", help="replace the file if it exists")
    wv.add_argument("--quiet", action="store_true", help="no progress lines")
    wv.set_defaults(func=cmd_vectors)

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

    b = sub.add_parser("bench", help="training tokens/s of every head at a fixed small setting")
    b.add_argument("--cell", default="gru")
    b.add_argument("--hidden", type=SIZE, default=128)
    b.add_argument("--batch", type=SIZE, default=32)
    b.add_argument("--length", type=SIZE, default=35)
    b.add_argument("--steps", type=SIZE, default=10)
    b.add_argument("--all", action="store_true",
                   help="the whole suite of benchmarks/ (every cell and analysis against its reference, "
                        "ratios against the targets): writes benchmarks/RESULTS.md")
    b.add_argument("--quick", action="store_true", help="--all at smoke sizes (under a minute; RESULTS-quick.md)")
    b.add_argument("--device", default="cpu", help="--all: cpu or cuda")
    b.add_argument("--threads", type=SIZE, default=None, help="--all: torch threads (default 2; --quick: 1)")
    b.add_argument("--out", help="--all: the markdown file to write")
    b.add_argument("--time-limit", type=POSITIVE, default=None, metavar="SECONDS",
                   help="--all: start no measurement after this many seconds (the report marks the rest not run)")
    b.set_defaults(func=cmd_bench)

    e = sub.add_parser("explain", help="the n-grams of a text and their scores")
    e.add_argument("--model", required=True, help="checkpoint folder")
    e.add_argument("text", nargs="?", help="the text (or --file)")
    e.add_argument("--file", help="a document to explain: its top-k n-grams, streamed in bounded memory")
    e.add_argument("--max-n", type=SIZE, default=8, help="documents: longest n-gram considered (default 8)")
    e.add_argument("--target", help="label to explain (default: the prediction)")
    e.add_argument("--top", type=SIZE, default=None, metavar="K", help="show only the K (>= 1) n-grams with "
                   "the largest |score| (default: all of a sentence's; documents: 20)")
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.add_argument("--png", type=new_file, help="also write the n-gram heatmap to this PNG file")
    e.add_argument("--force", action="store_true", help="replace the PNG file if it exists")
    e.set_defaults(func=cmd_explain)

    w = sub.add_parser("wfsa", help="the weighted automaton behind one dimension of a rational model")
    w.add_argument("--model", required=True, help="checkpoint folder of a model with rrnn-* cells")
    w.add_argument("--dim", type=COUNT, required=True, help="hidden dimension of the first layer (from 0)")
    w.add_argument("--text", required=True, help="the text to score")
    w.add_argument("--dot", help="write the automaton as a Graphviz DOT file")
    w.add_argument("--top", type=SIZE, default=5, help="real semiring: how many n-grams to list")
    w.add_argument("--force", action="store_true", help="replace the DOT file if it exists")
    w.set_defaults(func=cmd_wfsa)

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

    r = sub.add_parser("report", help="one self-contained HTML report of a trained model")
    r.add_argument("--model", required=True, help="checkpoint folder")
    r.add_argument("--out", required=True, help="output folder (report.html, report.json)")
    r.add_argument("--data-dir", help="where the dataset is now (default: where it was in training)")
    r.add_argument("--text", action="append", help="a sentence to explain (repeatable; default: test sentences)")
    r.add_argument("--samples", type=COUNT, default=4, help="test sentences to explain when no --text (default 4)")
    r.add_argument("--faithfulness-sentences", type=COUNT, default=100,
                   help="sentences for the faithfulness table (default 100)")
    r.add_argument("--no-negation", action="store_true", help="leave out the negation study")
    r.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.set_defaults(func=cmd_report)

    u = sub.add_parser("unitary", help="a URN's words and phrases: average effects, signatures, planes, "
                       "projections, Frobenius distances (unitary-networks Tables 11.1-11.5)")
    u.add_argument("--model", required=True, help="checkpoint folder of a URN model (cell urn)")
    u.add_argument("--words", nargs="+", action="extend", metavar="ITEM",
                   help="words or phrases, one per argument; a phrase's words are separated by spaces "
                   "('the keys'). Formal languages (dyck, crossserial): a piece that is not a symbol is "
                   "split into characters, so '()' is ( then ); start an item that begins with - with a space "
                   "(' -+'). Default: Dyck's 10 brackets, a b c d, or the 20 most frequent tokens")
    u.add_argument("--pairs", action="store_true", help="Dyck: add the matching pairs Q(close) Q(open)")
    u.add_argument("--dims", type=SIZE, default=2, help="size of the prediction subspace (default 2)")
    u.add_argument("--out", help="write unitary.json, signatures.png, frobenius.png (and pairs.png) here")
    u.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    u.add_argument("--json", action="store_true", help="machine-readable output")
    u.set_defaults(func=cmd_unitary)

    at = sub.add_parser("attention", help="what the memory block of an RM/RMR language model attends to "
                        "(recurrent-memory Figures 3, 4, 6 and Table 3)")
    at.add_argument("--model", required=True, help="checkpoint folder of a language model with a memory block")
    at.add_argument("--data", required=True, help="a text file (one sentence a line, tokens separated by "
                    "spaces) or a split of the model's corpus: train, dev, test")
    at.add_argument("--data-dir", help="where the model's corpus is now (default: where it was in training)")
    at.add_argument("--parses", help="CoNLL-U parses of the --data sentences, one per sentence in order "
                    "(the attention per dependency relation, Figure 6)")
    at.add_argument("--train", help="training sentences for the co-occurrence counts (one a line; "
                    "default: the model's training split)")
    at.add_argument("--samples", type=COUNT, default=100, help="positions sampled for the attention maps (default 100)")
    at.add_argument("--min-distance", type=SIZE, default=7, help="long-distance pairs: the attended word at "
                    "least this far from the word to predict (default 7: more than six positions)")
    at.add_argument("--predicted", default="gold", choices=["gold", "argmax"],
                    help="the word to predict in the pairs: the next word of the text (gold) or the model's argmax")
    at.add_argument("--strip-subtypes", action="store_true", help="merge relation subtypes (nmod:poss -> nmod)")
    at.add_argument("--max-sentences", type=COUNT, default=0, help="use only the first N sentences (default: all)")
    at.add_argument("--batch-size", type=SIZE, default=64)
    at.add_argument("--seed", type=SEED, default=0, help="seed of the sampled positions")
    at.add_argument("--out", help="write attention.json and the PNGs here")
    at.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    at.add_argument("--json", action="store_true", help="machine-readable output")
    at.set_defaults(func=cmd_attention)

    cp = sub.add_parser("complete", help="MSR sentence completion with a language model: the candidate whose "
                        "filled sentence has the highest log-probability (recurrent-memory Section 6)")
    cp.add_argument("--model", required=True, help="checkpoint folder of a language model")
    cp.add_argument("--questions", required=True, help="testing_data.csv or Holmes.machine_format.questions.txt")
    cp.add_argument("--answers", help="test_answer.csv or Holmes.machine_format.answers.txt: prints accuracy")
    cp.add_argument("--show", type=COUNT, default=0, help="also list the first N questions' choices")
    cp.add_argument("--batch-size", type=SIZE, default=64)
    cp.add_argument("--json", action="store_true", help="machine-readable output, every question's choice")
    cp.set_defaults(func=cmd_complete)
    from .repro.command import add_parser as add_repro_parser
    add_repro_parser(sub)
    return p


def _tolerant_output() -> None:
    """Text the terminal cannot encode (a byte of argv that was not UTF-8, a word outside a
    Latin-1 locale) is printed as a backslash escape, not a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError, AttributeError):
                pass


# The exit code when stdout's reader went away (`rnnlens ... | head -1`): 128 + SIGPIPE, what
# a shell reports for `cat`, `grep` and the rest in that case, so `set -o pipefail` sees the
# same as for them.
PIPE_CLOSED = 141


def _pipe_closed() -> int:
    """End quietly after a BrokenPipeError on stdout: what is still buffered goes to
    /dev/null, so the flush at exit finds nothing to complain about (Python's recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):      # a stdout without a file descriptor (captured)
        pass
    return PIPE_CLOSED


def main(argv: list[str] | None = None) -> int:
    _tolerant_output()
    try:
        args = build_parser().parse_args(argv)
        try:
            code = args.func(args)
        except RnnlensError as e:
            one_line = " ".join(part.strip() for part in str(e).split("\n") if part.strip())
            print(f"rnnlens: error: {one_line}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("rnnlens: interrupted", file=sys.stderr)
            return 130
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            what = (e.strerror or str(e)).strip()
            where = f" while writing {e.filename}" if e.filename else ""
            print(f"rnnlens: error: {what[:1].lower() + what[1:]}{where}", file=sys.stderr)
            return 2
        sys.stdout.flush()             # a closed pipe shows here, not in the flush at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()


if __name__ == "__main__":
    sys.exit(main())
