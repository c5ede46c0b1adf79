"""`rnnlens vectors`: word2vec vectors of a corpus, in the GloVe text format."""
from __future__ import annotations

from ..argtypes import COUNT, POSITIVE, SEED, SIZE, THREADS


def cmd_vectors(args) -> int:
    from pathlib import Path

    from ..outfiles import check_can_create, check_new_file, writing

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    out = check_new_file(args.out, args.force, [args.data_dir])   # before the training, not after
    if not out.exists() or out.is_file():                          # (a device or pipe is written through)
        check_can_create(Path(out).absolute())
    with writing(args.out):                     # one writer of the file at a time
        return _vectors(args, say)


def _vectors(args, say) -> int:
    from ..data.word2vec import corpus_sentences, train_word2vec, write_vectors

    sentences, notes = corpus_sentences(args.corpus, args.data_dir, seed=args.seed)
    for note in notes:
        say(note)
    vectors = train_word2vec(sentences, dim=args.dim, epochs=args.epochs, min_count=args.min_count,
                             window=args.window, seed=args.seed, threads=args.threads, progress=say)
    del sentences
    write_vectors(vectors, args.out, force=args.force, normalize=args.normalize, std=args.std)
    print(f"wrote {len(vectors.words):,} vectors of {vectors.dim} dims to {args.out}")
    return 0


def add_parser(sub) -> None:
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
    wv.add_argument("--threads", type=THREADS, default=1,
                    help="worker threads (default 1: the only setting that is reproducible bit for bit)")
    wv.add_argument("--normalize", action="store_true", help="write unit-length vectors")
    wv.add_argument("--std", type=POSITIVE, help="then scale all vectors by one factor to this coordinate "
                    "standard deviation (1: the scale of the N(0,1) init that words missing from the file keep)")
    wv.add_argument("--force", action="store_true", help="replace the file if it exists")
    wv.add_argument("--quiet", action="store_true", help="no progress lines")
    wv.set_defaults(func=cmd_vectors)
