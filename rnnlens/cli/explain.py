"""`rnnlens explain`: the n-grams of a text (or a document, streamed) and their scores."""
from __future__ import annotations

import sys
from pathlib import Path

from ..argtypes import SIZE, new_file
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import check_new_file, check_not_an_input, json_text
from .common import _load_run, stdin_text, warn_unknown

DOCUMENT_CHUNK = 2048     # tokens of a document in one linear view (memory per chunk, not per document)


def cmd_explain(args) -> int:
    if args.text_flag is not None:
        if args.text is not None:
            raise RnnlensError("give the text once: as the argument or as --text, not both")
        args.text = args.text_flag
    png = Path(args.png) if args.png is not None else None
    # before any work: the parser's `new_file` refused a folder or a missing parent folder
    if png is not None:
        check_new_file(png, args.force, [args.model, getattr(args, "file", None), getattr(args, "lines", None)])
    if args.lines is not None:
        return _explain_lines(args)
    if args.out is not None:
        raise RnnlensError("--out goes with --lines (the JSONL and HTML of many sentences)")
    if args.text is not None and args.file is not None:
        raise RnnlensError("give either the text to explain or --file with a document, not both")
    if args.text is None and args.file is None:
        raise RnnlensError("give the text to explain, --file with a document, or --lines with one sentence a line")
    if args.file is None and args.max_n is not None:
        raise RnnlensError(_MAX_N_SENTENCE)
    text = args.text
    if args.file is not None:
        try:
            text = _read_document(args.file)
        except OSError as e:
            raise RnnlensError(f"cannot read {args.file}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise RnnlensError(f"{args.file} is not UTF-8 text ({e.reason})") from None
    run = _load_run(args)
    model, vocab = run.model, run.vocab
    tokens = run.tokenize(text)
    if not tokens:
        raise RnnlensError("the text is empty: nothing to explain")
    from ..analysis.sentence import SENTENCE_TOKENS     # a longer text is a document (--file)
    labels = run.labels
    if args.file is None and len(tokens) > SENTENCE_TOKENS:
        raise RnnlensError(f"the text has {len(tokens):,} tokens, more than the {SENTENCE_TOKENS} a sentence is "
                           "explained up to (every n-gram of it); give it with --file to explain it as a document "
                           "(its top n-grams, streamed)")
    if args.file is not None:
        if args.view == "exact":
            raise RnnlensError("--view exact explains sentences (up to "
                               f"{SENTENCE_TOKENS} tokens); a document's streamed n-grams use the first-order view")
        return _explain_document(args, model, vocab, run.reads(tokens), labels)
    from ..analysis.sentence import explain_text

    ex = explain_text(model, vocab, run.reads(tokens), target=args.target, view=args.view)
    warn_unknown(ex.unknown, tokens)
    top = args.top or None
    pngs = _explain_png(ex, png, args.force, [args.model]) if png is not None else []
    if args.json:
        print(json_text(ex.to_dict(top), indent=2))
        return 0
    print(_explain_text(ex, top))
    for path in pngs:
        print(f"wrote {path}")
    return 0


def _explain_png(ex, png: Path, force: bool, inputs) -> list[Path]:
    """The heatmap of a sentence: the standalone n-gram scores where the model has them,
    else the contributions (per position: those of the n-grams ending at each token). A
    bidirectional model's backward n-grams go beside it, in NAME-backward.png (as the report
    draws them). Returns the files written."""
    import numpy as np

    from ..outfiles import replacing
    from ..viz.plots import ngram_heatmap, ngram_heatmap_backward

    T = len(ex.tokens)
    both = ex.polarity is None and ex.directions > 1

    def grid_of(d):
        if ex.sentence_level:
            return ex.positions[0].ngrams[d]
        return np.stack([p.ngrams[d, t] for t, p in enumerate(ex.positions)]) if T else np.zeros((0, 0))

    if ex.polarity is not None:
        grid, title = ex.polarity, f"n-gram scores toward '{ex.positions[0].target}'"
    elif ex.sentence_level:
        grid, title = grid_of(0), f"n-gram contributions toward '{ex.positions[0].target}'"
    else:
        grid, title = grid_of(0), "n-gram contributions to each token's output"
    back = png.with_name(f"{png.stem}-backward{png.suffix or '.png'}") if both else None
    if back is not None:
        check_new_file(back, force, inputs)
    with replacing(png, suffix=".png") as tmp:
        ngram_heatmap(ex.tokens, grid, tmp, title + (" (forward)" if both else ""))
    if back is None:
        return [png]
    with replacing(back, suffix=".png") as tmp:
        ngram_heatmap_backward(ex.tokens, grid_of(1), tmp, title + " (backward)")
    return [png, back]


_MAX_N_SENTENCE = ("--max-n limits a document's n-grams (--file); a sentence's explanation lists all its "
                   "n-grams, which add up to the output (--top shows fewer)")
DOCUMENT_LIMIT = 64 << 20      # characters of a document to explain


def _read_document(file: str, limit: int = DOCUMENT_LIMIT) -> str:
    """The text of --file ('-': standard input), read at most `limit` characters: a longer one,
    or an endless one (/dev/zero), is a one-line error, not a read that fills the memory."""
    if file == "-":
        text = stdin_text().read(limit + 1)
    else:
        with open(file, encoding="utf-8-sig") as f:
            text = f.read(limit + 1)
    if len(text) > limit:
        raise RnnlensError(f"{'standard input' if file == '-' else file} is longer than {limit >> 20} MiB "
                           "characters; explain a shorter document (split a longer one)")
    return text


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
    if ex.view == "exact":
        lines.append("view: linearised at the true states; each n-gram's contribution depends on its context")
    both = ex.directions > 1
    tops = [[{**r, "text": shown(r["text"])} for r in p.top(ex.tokens, top if top is not None or p.position is None else 3)]
            for p in ex.positions]
    width = max(10, min(60, max((len(r["text"]) for rows in tops for r in rows), default=10)))
    for p, rows in zip(ex.positions, tops):
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
    return shown("\n".join(lines), keep="\n")


def _explain_document(args, model, vocab, tokens, labels) -> int:
    """Streamed top-k n-grams of a long document in memory that does not grow with it: the
    linear view is built for DOCUMENT_CHUNK tokens at a time and TopNgrams carries the
    n-grams of at most --max-n tokens and the running top-k from one chunk to the next."""
    import torch
    from tqdm import tqdm

    from ..analysis.ngrams import TopNgrams
    from ..analysis.sentence import readout_row
    from ..data.batching import Example, collate

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
    max_n = args.max_n or 8
    stream = TopNgrams(w, k=args.top or 20, max_n=max_n)
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
        print(json_text({"tokens": len(tokens), "target": name, "max_n": max_n, "ngrams": rows}, indent=2))
        return 0
    print(shown(f"{len(tokens)} tokens; the {len(rows)} n-grams of at most {max_n} tokens with the largest "
                f"|score| toward '{name}' (w^T v(i:t), each n-gram on its own)"))
    rows = [{**r, "text": shown(r["text"])} for r in rows]
    width = max(10, min(60, max((len(r["text"]) for r in rows), default=10)))
    print(f"{'start':>6} {'end':>6}  {'n-gram':<{width}} {'score':>8}")
    for r in rows:
        text = r["text"] if len(r["text"]) <= width else r["text"][: width - 1] + "…"
        print(f"{r['start']:>6} {r['end']:>6}  {text:<{width}} {r['score']:>+8.3f}")
    return 0


def _explain_lines(args) -> int:
    """--lines FILE --out DIR: every line's explanation as DIR/explanations.jsonl and one
    HTML page, DIR/explanations.html."""
    from tqdm import tqdm

    from ..app.explain_lines import explain_lines
    from ..app.predict import read_texts
    from ..train.checkpoint import output_dir
    from ..viz.explain_page import lines_page

    if args.out is None:
        raise RnnlensError("--lines needs --out DIR (explanations.jsonl and explanations.html are written there)")
    if args.text is not None or args.file is not None:
        raise RnnlensError("give --lines, or a text, or --file (one of them)")
    if args.max_n is not None:
        raise RnnlensError(_MAX_N_SENTENCE)
    if args.png is not None or args.json:
        raise RnnlensError(f"{'--png' if args.png is not None else '--json'} goes with one text; --lines writes "
                           "each line's explanation to --out DIR (explanations.jsonl and explanations.html)")
    out = Path(args.out)
    check_not_an_input(out, [args.model, args.lines])
    if out.exists() and not args.force:           # refuse before any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    try:
        if args.lines == "-":
            texts = list(read_texts(stdin_text(), "auto", "stdin"))
        else:
            with open(args.lines, encoding="utf-8-sig") as f:
                texts = list(read_texts(f, "auto", str(args.lines)))
    except OSError as e:
        raise RnnlensError(f"cannot read {args.lines}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RnnlensError(f"{args.lines} is not UTF-8 text ({e.reason})") from None
    if not texts:
        raise RnnlensError(f"{args.lines} has no lines to explain")
    run = _load_run(args)
    bar = tqdm(total=len(texts), desc="explain", unit=" sentences", file=sys.stderr, leave=False,
               disable=args.quiet or len(texts) < 20)
    records = explain_lines(run, texts, top=args.top or 5, progress=bar.update, view=args.view)
    bar.close()
    with output_dir(out, force=args.force) as tmp:
        (tmp / "explanations.jsonl").write_text("".join(json_text(r, ensure_ascii=False) + "\n" for r in records),
                                                encoding="utf-8")
        (tmp / "explanations.html").write_text(lines_page(records, str(args.model)), encoding="utf-8")
    print(f"explained {len(records)} sentences; wrote {out}/explanations.jsonl and {out}/explanations.html")
    return 0


def add_parser(sub) -> None:
    e = sub.add_parser("explain", help="the n-grams of a text and their scores")
    e.add_argument("--model", required=True, help="checkpoint folder")
    e.add_argument("text", nargs="?", help="the text (or --file)")
    e.add_argument("--text", dest="text_flag", metavar="TEXT", help="the text, as a flag (as report and wfsa "
                   "take it); the same as giving it as the argument")
    e.add_argument("--file", help="a document to explain ('-': standard input): its top-k n-grams, streamed in "
                   "bounded memory")
    e.add_argument("--lines", metavar="FILE", help="many sentences, one a line (or .tsv / .jsonl as predict reads "
                   "them; '-': standard input): each one's explanation in --out DIR as explanations.jsonl and one "
                   "HTML page")
    e.add_argument("--out", metavar="DIR", help="with --lines: the output folder")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--max-n", type=SIZE, help="documents (--file): longest n-gram considered (default 8); a "
                   "sentence's explanation lists all its n-grams, which add up to the output")
    e.add_argument("--target", help="label to explain (default: the prediction)")
    e.add_argument("--top", type=SIZE, default=None, metavar="K", help="show only the K (>= 1) n-grams with "
                   "the largest |score| (default: all of a sentence's; documents: 20)")
    e.add_argument("--view", choices=("first-order", "exact"), default="first-order",
                   help="first-order (default): each step linearised at the zero state, an n-gram's vector "
                   "the same in every context, a remainder for nonlinear cells; exact: linearised at the "
                   "true states, no remainder, n-grams that depend on their context")
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.add_argument("--png", type=new_file, help="also write the n-gram heatmap to this PNG file (a bidirectional model's backward "
                   "n-grams beside it, in NAME-backward.png)")
    e.add_argument("--force", action="store_true", help="replace the PNG file (or the --out folder) if it exists")
    e.set_defaults(func=cmd_explain)
