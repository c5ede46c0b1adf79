"""`rnnlens predict`: a trained model on new texts, one JSON record a line."""
from __future__ import annotations

import sys
from pathlib import Path

from ..argtypes import COUNT, SIZE, THREADS, new_file
from ..errors import RnnlensError
from ..outfiles import check_new_file, json_text
from .common import stdin_text

CHUNK = 4096          # texts read, predicted and written at a time: memory stays bounded


def cmd_predict(args) -> int:
    from ..app.predict import FORMATS, Predictor, read_texts
    from ..app.run import Run

    texts = args.text or []
    if args.file is not None and texts:
        raise RnnlensError("give either FILE or --text, not both")
    if args.file is None and not texts:
        raise RnnlensError("give FILE with the texts (one a line; '-': standard input) or --text TEXT")
    out = Path(args.out) if args.out is not None else None
    if out is not None:                                          # refuse before any work
        check_new_file(out, args.force, [args.model, args.file])
    if args.format not in FORMATS:
        raise RnnlensError(f"--format must be one of {', '.join(FORMATS)}")
    if args.threads:
        from ..ops.threads import set_threads

        set_threads(args.threads)
    run = Run.load(args.model)
    predictor = Predictor(run, batch_size=args.batch_size, explain=args.explain)
    if texts:
        source, name = None, "--text"
    elif args.file == "-":
        source, name = stdin_text(), "stdin"
    else:
        try:
            source = open(args.file, encoding="utf-8-sig")       # noqa: SIM115 (closed below)
        except OSError as e:
            raise RnnlensError(f"cannot read {args.file}: {e.strerror or e}") from None
        name = str(args.file)
    items = list(enumerate(texts, 1)) if texts else None
    try:
        if items is None:
            items = read_texts(source, args.format, name)
        if out is None:
            n = _stream(predictor, items, sys.stdout, args.quiet)
            _some(n, name)
        else:
            from ..outfiles import replacing

            with replacing(out, suffix=".jsonl") as tmp, open(tmp, "w", encoding="utf-8") as f:
                n = _stream(predictor, items, f, args.quiet)
                _some(n, name)                 # inside: an empty input leaves no --out behind
    except UnicodeDecodeError as e:
        raise RnnlensError(f"{name} is not UTF-8 text ({e.reason})") from None
    finally:
        if source is not None and name != "stdin":
            source.close()
    if out is not None:
        print(f"wrote {n:,} prediction{'' if n == 1 else 's'} to {out}")
    return 0


def _some(n: int, name: str) -> None:
    if n == 0:
        raise RnnlensError(f"{name} has no texts to predict")


def _out_target(text: str) -> str | None:
    """--out's value: None for "-" (standard output), otherwise a file to write."""
    return None if text == "-" else new_file(text)


def _stream(predictor, texts, f, quiet: bool) -> int:
    """Predict `texts` chunk by chunk, writing each record as it comes; a progress bar on
    stderr once the input is longer than one chunk."""
    from tqdm import tqdm

    n = 0
    bar = None
    chunk: list[tuple[int, str]] = []

    def flush():
        nonlocal n
        for (no, _), rec in zip(chunk, predictor.records([t for _, t in chunk])):
            f.write(json_text({"line": no, **rec}, ensure_ascii=False) + "\n")
        n += len(chunk)
        if bar is not None:
            bar.update(len(chunk))
        chunk.clear()

    for item in texts:
        chunk.append(item)
        if len(chunk) == CHUNK:
            if bar is None and not quiet:
                bar = tqdm(desc="predict", unit=" texts", file=sys.stderr, leave=False)
            flush()
    flush()
    if bar is not None:
        bar.close()
    return n


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="a trained model on new texts: one JSON record a line (a classifier's "
                       "label and probabilities, a tagger's tags, a language model's log-probabilities)")
    p.add_argument("--model", required=True, help="checkpoint folder")
    p.add_argument("file", metavar="FILE", nargs="?", help="the texts: one a line (plain), label<TAB>text or text "
                   "(.tsv), {\"text\": ...} objects (.jsonl); - reads standard input")
    p.add_argument("--text", action="append", metavar="TEXT", help="a text to predict, in place of FILE "
                   "(repeatable: one record each, numbered as lines are)")
    p.add_argument("--format", default="auto", help="auto (by the file's extension), lines, tsv or jsonl")
    p.add_argument("--out", type=_out_target, help="write the JSONL here instead of standard output ('-': "
                   "standard output)")
    p.add_argument("--explain", type=COUNT, default=0, metavar="K",
                   help="sentence-level models: add the K n-grams that contribute most to each prediction")
    p.add_argument("--batch-size", type=SIZE, default=64)
    p.add_argument("--threads", type=THREADS, default=None, help="torch threads (default: torch's)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_predict)
