"""The commands that read one model family: `rnnlens wfsa` (rational recurrences), `unitary`
(URNs), `attention` and `complete` (recurrent memory networks), and `faithfulness`. Each
imports what it needs when it runs; cli.py builds the parser and handles errors."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import RnnlensError


def cmd_wfsa(args) -> int:
    """The automaton behind one dimension of a trained rational model (rational-recurrences
    Proposition 7): its score on a text, checked against the model's state, the best path in
    max-plus, the largest n-grams in the real semiring, and the DOT file."""
    import torch

    from .analysis.wfsa import compile_wfsa, path_ngram
    from .app.run import Run
    from .cells.rational import RationalCell

    dot = Path(args.dot) if args.dot else None
    if dot is not None:
        if dot.exists() and not args.force:
            raise RnnlensError(f"{dot} exists; use --force to replace it")
        if not dot.parent.is_dir():
            raise RnnlensError(f"folder {dot.parent} does not exist")
    run = Run.load(args.model)
    model, cfg, vocab = run.model, run.config, run.vocab
    cells = getattr(model.encoder, "cells", None)
    if not cells or not isinstance(cells[0], RationalCell):
        raise RnnlensError(f"wfsa explains rational models (cells rrnn-*); this one has cell {cfg.model.cell!r}")
    cell = cells[0]
    if not 0 <= args.dim < cell.hidden_size:
        raise RnnlensError(f"--dim {args.dim} is out of range: the first layer has {cell.hidden_size} dimensions")
    tokens = run.tokenizer(args.text)
    if not tokens:
        raise RnnlensError("the text is empty: nothing to score")
    ids = vocab.encode(tokens)
    wfsa = compile_wfsa(cell, args.dim, model.embedding)
    with torch.no_grad():
        score = float(wfsa.forward(ids))
        states, _ = cell.scan(model.embedding(torch.tensor([ids])))
        state = float(states[0, -1, (cell.blocks - 1) * cell.hidden_size + args.dim])
    kind = {"b": "B (2 states)", "c": "C (3 states)", "f": "F (4 states, one epsilon transition)",
            "ngram": f"the {cell.n}-gram automaton ({cell.n + 1} states)"}[cell.pattern]
    print(f"WFSA {kind}, {cell.sr.name} semiring, layer 1 dimension {args.dim}")
    print(f"tokens: {' '.join(tokens)}")
    print(f"score {score:+.6f}; the model's state c = {state:+.6f} (difference {abs(score - state):.1e})")
    if cell.sr.is_idempotent:
        best, path = wfsa.viterbi(ids)
        gram = path_ngram(path)
        words = " ... ".join(f"{tokens[p]}@{p}" for p, _ in gram)
        print(f"best path: score {float(best):+.6f}, pattern {words}")
    else:
        from .analysis.ngrams import ngram_vectors
        from .data.batching import Example, collate

        with torch.no_grad():
            view = cell.linear_view(model.embedding(collate([Example(tokens)], vocab).tokens))
            v = ngram_vectors(view)[0, -1, :, view.readout][:, args.dim]       # n-grams ending at the end
        order = v.abs().argsort(descending=True)[: args.top]
        print("largest n-grams ending at the last token (their paths summed; they add up to the score):")
        for i in order.tolist():
            print(f"  {' '.join(tokens[i:]):<50} {float(v[i]):+.6f}")
    if dot is not None:
        from .outfiles import replacing

        with replacing(dot) as tmp:
            tmp.write_text(wfsa.to_dot(), encoding="utf-8")
        print(f"wrote {dot}")
    return 0


def cmd_faithfulness(args) -> int:
    from .analysis.faithfulness import format_table
    from .app.faithfulness import run_on_checkpoint

    res = run_on_checkpoint(args.model, data_dir=args.data_dir, split=args.split, max_k=args.max_k,
                            max_sentences=args.sentences, methods=tuple(args.methods), seed=args.seed,
                            progress=not args.quiet)
    if args.json:
        print(json.dumps(res.to_dict()))
    else:
        print(format_table(res))
    return 0


def cmd_unitary(args) -> int:
    """A URN's words and phrases as the unitary-networks paper reads them (Tables 11.1-11.5):
    average effects, signatures, plane similarities, projections onto the prediction layer,
    Frobenius distances; with --pairs the Dyck matching pairs Q(close) Q(open)."""
    from .analysis.unitary_tables import (check_urn, default_items, dyck_pairs, format_tables, item_tokens,
                                          urn_tables)
    from .app.run import Run
    from .train.checkpoint import output_dir

    out = Path(args.out) if args.out else None
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
        from .viz.plots import distance_heatmap, signature_dials

        with output_dir(out, force=args.force) as tmp:
            (tmp / "unitary.json").write_text(json.dumps(res, indent=2), encoding="utf-8")
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
        print(json.dumps(res, indent=2))
        return 0
    print(format_tables(res, str(args.model)))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def _lm_corpus_sentences(run) -> dict[str, list[list[str]]]:
    """The splits of the corpus a language model was trained on, as sentences (word lists,
    no <eos>): one line of the text a sentence."""
    from .train.run import split_sentences

    cfg = run.config
    if run.task != "lm":
        raise RnnlensError(f"the model's corpus {cfg.data.corpus!r} is not a language-modelling corpus")
    data = run.data()
    out = {}
    for name, examples in data.splits.items():
        if not cfg.data.sentence_level:                 # one stream: cut it at <eos>
            examples = split_sentences(examples[0].tokens)[0]
        out[name] = [ex.tokens[:-1] if ex.tokens[-1:] == ["<eos>"] else list(ex.tokens) for ex in examples]
    return out


def _text_sentences(path) -> list[list[str]]:
    """One sentence a line, tokens split on whitespace (as the language models' training text
    is read); empty lines are dropped."""
    from .data.readers import read_lm_text

    out, cur = [], []
    for tok in read_lm_text(path):
        if tok == "<eos>":
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(tok)
    if not out:
        raise RnnlensError(f"{path} has no sentences")
    return out


def cmd_attention(args) -> int:
    """What the memory block of an RM/RMR language model attends to (recurrent-memory paper,
    Section 5): Figure 3, Figure 4 samples, Table 3 pairs, Figure 6 with --parses."""
    from .analysis.attention import analyse_attention, format_summary, memory_layout
    from .app.run import Run
    from .train.checkpoint import output_dir

    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:  # refuse before doing any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    for name, value, least in (("--samples", args.samples, 0), ("--batch-size", args.batch_size, 1),
                               ("--min-distance", args.min_distance, 1), ("--max-sentences", args.max_sentences, 0)):
        if value < least:
            raise RnnlensError(f"{name} must be >= {least}")
    run = Run.load(args.model, data_dir=getattr(args, "data_dir", None))
    model, cfg, vocab = run.model, run.config, run.vocab
    memory_layout(model)                                  # an LM with a memory block, or a clear error
    parses = None
    if args.parses:
        from .data.conllu import read_conllu
        parses = read_conllu(args.parses)
    corpus = None
    if Path(args.data).is_file():
        sentences = _text_sentences(args.data)
    elif Path(args.data).exists() or any(c in args.data for c in "/\\."):
        raise RnnlensError(f"--data {args.data}: no such text file (give a file with one sentence a line, "
                           "or a split of the model's corpus: train, dev, test)")
    else:
        corpus = _lm_corpus_sentences(run)
        if args.data not in corpus:
            raise RnnlensError(f"split {args.data!r} is not available; available: {', '.join(corpus)}")
        sentences = corpus[args.data]
    if args.max_sentences:                               # parses stay aligned with the sentences
        sentences = sentences[: args.max_sentences]
        parses = parses[: args.max_sentences] if parses is not None else None
    train = None
    if args.train:
        train = _text_sentences(args.train)
    elif corpus is not None:
        train = corpus.get("train")
    else:
        try:
            train = _lm_corpus_sentences(run).get("train")
        except RnnlensError as e:
            print(f"warning: no co-occurrence counts (the training data could not be read: {e}); "
                  "give it with --train FILE", file=sys.stderr)
    report = analyse_attention(model, vocab, sentences, parses=parses, train_sentences=train,
                               batch_size=args.batch_size, samples=args.samples, seed=args.seed,
                               min_distance=args.min_distance, predicted=args.predicted,
                               strip_subtypes=args.strip_subtypes)
    res = {"model": str(args.model), "data": str(args.data), "parses": args.parses, **report.to_dict()}
    if out is not None:
        from .viz.attention_plots import attention_by_position, attention_maps, dependency_attention_plot

        with output_dir(out, force=args.force) as tmp:
            (tmp / "attention.json").write_text(json.dumps(res, indent=2), encoding="utf-8")
            attention_by_position(report.average, tmp / "attention_by_position.png",
                                  "average attention per memory position (recurrent-memory Fig. 3)")
            attention_maps(report.samples, report.offsets, tmp / "attention_maps.png",
                           f"attention of {len(report.samples)} sampled positions (Fig. 4)")
            if report.dependencies is not None:
                dep = report.dependencies
                dependency_attention_plot(dep.binned(), dep.totals(), tmp / "attention_dependencies.png",
                                          "attention by dependency relation and direction (Fig. 6)")
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(format_summary(report))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def cmd_complete(args) -> int:
    """MSR sentence completion: score the five filled sentences of each question by total
    log-probability and pick the best (recurrent-memory paper, Section 6)."""
    from .analysis.completion import complete_with_model, format_result
    from .app.run import Run
    from .data.msr import read_msr_completion

    if args.batch_size < 1:
        raise RnnlensError("--batch-size must be positive")
    run = Run.load(args.model)
    model, cfg, vocab = run.model, run.config, run.vocab
    if model.task != "lm":
        raise RnnlensError(f"sentence completion needs a language model; {args.model} is a {model.task!r} model")
    questions = read_msr_completion(args.questions, args.answers, run.tokenizer)
    res = complete_with_model(model, vocab, questions, batch_size=args.batch_size)
    memory = "none" if cfg.model.memory is None else (
        f"{cfg.model.memory}, {'bidirectional' if cfg.model.memory_bidirectional else 'unidirectional'}")
    if args.json:
        print(json.dumps({"model": str(args.model), "memory": memory, **res.to_dict(questions)}, indent=2))
        return 0
    print(f"model {args.model} (memory block: {memory}); {len(questions)} questions")
    print(format_result(res, questions, show=args.show))
    return 0
