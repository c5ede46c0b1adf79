"""`rnnlens attention`: what an RM/RMR language model's memory block attends to."""
from __future__ import annotations

import sys
from pathlib import Path

from ..argtypes import COUNT, SEED, SIZE
from ..data.tokenize import shown
from ..errors import RnnlensError
from ..outfiles import json_text


def _lm_corpus_sentences(run) -> dict[str, list[list[str]]]:
    """The splits of the corpus a language model was trained on, as sentences (word lists,
    no <eos>): one line of the text a sentence."""
    from ..train.run import split_sentences

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
    from ..data.readers import read_lm_text

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
    from ..analysis.attention import memory_layout
    from ..analysis.attention_report import analyse_attention, format_summary
    from ..app.run import Run
    from ..outfiles import check_not_an_input
    from ..train.checkpoint import output_dir

    out = Path(args.out) if args.out else None
    if out is not None:
        check_not_an_input(out, [args.model, args.data if Path(args.data).is_file() else None, args.parses,
                                 args.train, getattr(args, "data_dir", None)])
    if out is not None and out.exists() and not args.force:  # refuse before doing any work
        raise RnnlensError(f"output folder {out} exists; use --force to replace it")
    for name, value, least in (("--samples", args.samples, 0), ("--batch-size", args.batch_size, 1),
                               ("--min-distance", args.min_distance, 1),
                               ("--max-sentences", 1 if args.max_sentences is None else args.max_sentences, 1)):
        if value < least:
            raise RnnlensError(f"{name} must be >= {least}")
    run = Run.load(args.model, data_dir=getattr(args, "data_dir", None))
    model, vocab = run.model, run.vocab
    memory_layout(model)                                  # an LM with a memory block, or a clear error
    parses = None
    if args.parses:
        from ..data.conllu import read_conllu
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
    if args.max_sentences is not None:                   # parses stay aligned with the sentences
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
        from ..viz.attention_plots import (
            attention_by_position,
            attention_maps,
            dependency_attention_plot,
        )

        with output_dir(out, force=args.force) as tmp:
            (tmp / "attention.json").write_text(json_text(res, indent=2), encoding="utf-8")
            attention_by_position(report.average, tmp / "attention_by_position.png",
                                  "average attention per memory position (recurrent-memory Fig. 3)")
            attention_maps(report.samples, report.offsets, tmp / "attention_maps.png",
                           f"attention of {len(report.samples)} sampled positions (Fig. 4)")
            if report.dependencies is not None:
                dep = report.dependencies
                dependency_attention_plot(dep.binned(), dep.totals(), tmp / "attention_dependencies.png",
                                          "attention by dependency relation and direction (Fig. 6)")
    if args.json:
        print(json_text(res, indent=2))
        return 0
    print(shown(format_summary(report), keep="\n"))
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def add_parser(sub) -> None:
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
    at.add_argument("--max-sentences", type=SIZE, default=None, help="use only the first N sentences (default: all)")
    at.add_argument("--batch-size", type=SIZE, default=64)
    at.add_argument("--seed", type=SEED, default=0, help="seed of the sampled positions")
    at.add_argument("--out", help="write attention.json and the PNGs here")
    at.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    at.add_argument("--json", action="store_true", help="machine-readable output")
    at.set_defaults(func=cmd_attention)
