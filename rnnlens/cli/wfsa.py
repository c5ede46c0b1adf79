"""`rnnlens wfsa`: the weighted automaton behind one dimension of a rational model."""
from __future__ import annotations

import sys
from pathlib import Path

from ..argtypes import COUNT, SIZE
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import check_new_file
from .common import warn_unknown


def cmd_wfsa(args) -> int:
    """The automaton behind one dimension of a trained rational model (rational-recurrences
    Proposition 7): its score on a text, checked against the model's state, the best path in
    max-plus, the largest n-grams in the real semiring, and the DOT file."""
    import torch

    from ..analysis.wfsa import compile_wfsa
    from ..analysis.wfsa_core import path_ngram
    from ..app.run import Run
    from ..cells.rational import RationalCell

    dot = Path(args.dot) if args.dot is not None else None
    if dot is not None:
        check_new_file(dot, args.force, [args.model])
    run = Run.load(args.model)
    model, cfg, vocab = run.model, run.config, run.vocab
    cells = getattr(model.encoder, "cells", None)
    if not cells or not isinstance(cells[0], RationalCell):
        raise RnnlensError(f"wfsa explains rational models (cells rrnn-*); this one has cell {cfg.model.cell!r}")
    cell = cells[0]
    if not 0 <= args.dim < cell.hidden_size:
        raise RnnlensError(f"--dim {args.dim} is out of range: the first layer has {cell.hidden_size} dimensions")
    tokens = run.tokenize(args.text)
    if not tokens:
        raise RnnlensError("the text is empty: nothing to score")
    tokens = run.reads(tokens)
    ids = vocab.encode(tokens)
    warn_unknown([t for t, i in zip(tokens, ids) if i == vocab.unk_id and t != "<unk>"], tokens)
    rest = (["its backward direction"] if cfg.model.bidirectional else []) + \
        (["the layers above"] if cfg.model.layers > 1 else [])
    if rest:
        print(f"note: this automaton is layer 1's forward direction alone; the model's output also reads "
              f"{' and '.join(rest)}", file=sys.stderr)
    wfsa = compile_wfsa(cell, args.dim, model.embedding)
    with torch.no_grad():
        score = float(wfsa.forward(ids))
        states, _ = cell.scan(model.embedding(torch.tensor([ids])))
        state = float(states[0, -1, (cell.blocks - 1) * cell.hidden_size + args.dim])
    kind = {"b": "B (2 states)", "c": "C (3 states)", "f": "F (4 states, one epsilon transition)",
            "ngram": f"the {cell.n}-gram automaton ({cell.n + 1} states)"}[cell.pattern]
    print(f"WFSA {kind}, {cell.sr.name} semiring, layer 1 dimension {args.dim}")
    print(shown(f"tokens: {' '.join(tokens)}"))
    print(f"score {score:+.6f}; the model's state c = {state:+.6f} (difference {abs(score - state):.1e})")
    if cell.sr.is_idempotent:
        best, path = wfsa.viterbi(ids)
        gram = path_ngram(path)
        words = shown(" ... ".join(f"{tokens[p]}@{p}" for p, _ in gram))
        print(f"best path: score {float(best):+.6f}, pattern {words}")
    else:
        from ..analysis.ngrams import ngram_vectors
        from ..data.batching import Example, collate

        with torch.no_grad():
            view = cell.linear_view(model.embedding(collate([Example(tokens)], vocab).tokens))
            v = ngram_vectors(view)[0, -1, :, view.readout][:, args.dim]       # n-grams ending at the end
        order = v.abs().argsort(descending=True)[: args.top]
        print("largest n-grams ending at the last token (their paths summed; they add up to the score):")
        for i in order.tolist():
            print(f"  {shown(' '.join(tokens[i:])):<50} {float(v[i]):+.6f}")
    if dot is not None:
        from ..outfiles import replacing

        with replacing(dot) as tmp:
            tmp.write_text(wfsa.to_dot(), encoding="utf-8")
        print(f"wrote {dot}")
    return 0


def add_parser(sub) -> None:
    w = sub.add_parser("wfsa", help="the weighted automaton behind one dimension of a rational model")
    w.add_argument("--model", required=True, help="checkpoint folder of a model with rrnn-* cells")
    w.add_argument("--dim", type=COUNT, required=True, help="hidden dimension of the first layer (from 0)")
    w.add_argument("--text", required=True, help="the text to score")
    w.add_argument("--dot", help="write the automaton as a Graphviz DOT file")
    w.add_argument("--top", type=SIZE, default=5, help="real semiring: how many n-grams to list")
    w.add_argument("--force", action="store_true", help="replace the DOT file if it exists")
    w.set_defaults(func=cmd_wfsa)
