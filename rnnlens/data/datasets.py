"""A registry of real NLP datasets: name -> loader -> Dataset of Examples.

    ds = load_dataset("sst2", "path/to/data", seed=0)
    ds.splits["train"][0]     # Example(tokens=[...], label=1)

A loader finds its files at `data_dir/<folder>/<file>` (the layout of the shared
data folder, e.g. `sst/trees/train.txt`), or with `data_dir` pointing straight at
the dataset folder (`.../sst` or `.../sst/trees`). Splits that a dataset does not
ship are carved from train, deterministically given `seed` (see `random_split`);
`Dataset.notes` says what was done.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..config import register
from ..errors import RnnlensError
from . import readers as R
from .agreement import read_linzen_tsv
from .batching import Example
from .semeval_conll import SEMEVAL_LABELS, read_conll2003, read_semeval

TASKS = ("classify", "regress", "relation", "tag", "lm", "dyck", "crossserial", "agreement")


@dataclass
class Dataset:
    """Splits of Examples plus what a model needs to know about the targets.

    task: "classify" | "regress" | "relation" | "tag" | "lm" | "dyck" | "crossserial" |
        "agreement" (the last three: see the loaders of the unitary-networks section).
    splits: "train", "dev", "test" (those available). Example labels are a class
        index (classify, relation, agreement), a float (regress), a list of tag indices
        (tag), a list of next-symbol indices (dyck, crossserial: one string per Example),
        or None (lm, where each split is ONE Example holding the whole token stream).
    labels: class names (index = class id) for classify/relation/agreement, tag names for
        tag, the predicted symbols for dyck/crossserial; None for regress and lm.
    notes: human-readable facts about provenance, splits and counts.
    lowercase: whether the tokens were case-folded: a trained model's new texts are read the
        same way (the tokenizer its checkpoint records).
    split_punct: whether new texts split punctuation off their words (raw-text corpora), or
        split on whitespace only, as the tokens of an already tokenised corpus (PTB, WikiText,
        CoNLL-2003, the agreement sentences) were read: "U.S." and "<unk>" stay whole.
    treebank: new texts are split as the Penn Treebank splits them (the SST's trees: "it 's",
        "does n't"; data.tokenize.treebank_tokens).
    """

    name: str
    task: str
    splits: dict[str, list[Example]]
    labels: list[str] | None
    notes: list[str] = field(default_factory=list)
    lowercase: bool = True
    split_punct: bool = True
    treebank: bool = False


# --- shared helpers -------------------------------------------------------------

def find_file(data_dir, rel: str) -> Path:
    """`data_dir/rel`, or rel with leading folders dropped (data_dir = the dataset folder).

    rel = "sst/trees/train.txt" is looked for as data_dir/sst/trees/train.txt, then
    data_dir/trees/train.txt, then data_dir/train.txt.
    """
    data_dir = Path(data_dir)
    parts = Path(rel).parts
    for i in range(len(parts)):
        p = data_dir.joinpath(*parts[i:])
        if p.is_file():
            return p
    raise RnnlensError(f"data file {data_dir / rel} does not exist (also looked for {parts[-1]} "
                       f"in the dataset folder, in case {data_dir} is that folder)")


def random_split(items: Sequence, fractions: Sequence[float], seed: int) -> list[list]:
    """Cut items into parts of the given fractions, at random but deterministically.

    Every part after the first gets floor(n * fraction) items; the first gets the
    rest, so nothing is lost to rounding. Each part keeps the items' original order
    (only membership is random), which makes splits easy to inspect and diff.
    This is the one helper behind both "carve dev from train" and "80/10/10".
    """
    n = len(items)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    sizes = [int(n * f) for f in fractions[1:]]
    sizes.insert(0, n - sum(sizes))
    parts, start = [], 0
    for size in sizes:
        chosen = sorted(order[start: start + size])
        parts.append([items[i] for i in chosen])
        start += size
    return parts


def carve_dev(train: Sequence, seed: int, fraction: float = 0.1) -> tuple[list, list]:
    """(train minus dev, dev): dev is `fraction` of train, chosen with random.Random(seed)."""
    rest, dev = random_split(train, (1 - fraction, fraction), seed)
    return rest, dev


def _count_note(splits: dict[str, list[Example]]) -> str:
    return "sizes: " + ", ".join(f"{k} {len(v):,}" for k, v in splits.items())


def _drop_empty(rows: list, where: str, notes: list[str]) -> list:
    """Drop items with no tokens (an RNN cannot read them); say so in the notes."""
    kept = [r for r in rows if r[0]]
    if len(kept) < len(rows):
        notes.append(f"{len(rows) - len(kept)} line(s) of {where} have no text and were dropped")
    return kept


def _classify(name: str, rows: dict[str, list], notes: list[str], labels: list[str] | None = None,
              task: str = "classify") -> Dataset:
    """Rows of (tokens, label string) per split -> Dataset with label indices.

    labels default to the sorted label strings found in train; a dev/test label not
    among them is an error (label_examples).
    """
    if labels is None:
        labels = sorted({lab for _, lab in rows["train"]})
        if len(labels) < 2:
            raise RnnlensError(f"{name}: the training split has {len(labels)} label(s) ({', '.join(labels)}); "
                               "a classifier needs at least 2")
    splits = {k: R.label_examples(v, labels, f"{name} {k}") for k, v in rows.items()}
    notes.append(_count_note(splits))
    return Dataset(name, task, splits, labels, notes)


# --- SST ------------------------------------------------------------------------------

SST_BINARY_LABELS = ["negative", "positive"]
SST_FINE_LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]
# The implicit-ngrams paper trains SST-2 on 98,794 binary instances (56,187 pos / 42,607 neg).
PAPER_SST2_TRAIN = 98_794


def _sst_targets(items, scheme: str) -> list[Example]:
    """(tokens, 0..4) -> Examples under scheme; neutral items are dropped for "binary"."""
    target = {fine: R.sst_label(fine, scheme) for fine in range(5)}  # one lookup per item: 300k items
    return [Example(tokens, target[fine]) for tokens, fine in items if target[fine] is not None]


def _load_sst(name: str, data_dir, scheme: str, train_phrases: bool) -> Dataset:
    """SST from the PTB trees. Train = every labelled node (phrase) of the train trees,
    or only the roots; dev/test are always root sentences. Tokens are lowercased,
    like every other classification dataset here (GLUE SST-2 is lowercase already).

    Measured on the official train trees: 318,582 labelled nodes, of which 98,794 are
    non-neutral (56,187 positive / 42,607 negative): exactly the paper's SST-2 training
    set. Deduplicated by token sequence there are only 77,616 non-neutral phrases (77,195
    once lowercased), so `sst2` uses ALL nodes, repeats included.
    """
    notes: list[str] = []
    split_files = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
    splits = {}
    for split, file in split_files.items():
        path = find_file(data_dir, f"sst/trees/{file}")
        phrases = train_phrases and split == "train"
        splits[split] = _sst_targets(R.read_sst_trees(path, phrases=phrases, lowercase=True), scheme)
    if train_phrases:
        train = splits["train"]
        unique = len({tuple(ex.tokens) for ex in train})
        what = "non-neutral " if scheme == "binary" else ""
        notes.append(f"train = every {what}labelled node (phrase) of the train trees: {len(train):,} "
                     f"items, repeats included ({unique:,} unique lowercased token sequences); "
                     "dev/test = root sentences")
        if scheme == "binary":
            pos = sum(ex.label for ex in train)
            notes.append(f"train has {pos:,} positive / {len(train) - pos:,} negative; the implicit-ngrams "
                         f"paper reports {PAPER_SST2_TRAIN:,} (56,187 / 42,607): "
                         + ("equal" if len(train) == PAPER_SST2_TRAIN else "DIFFERENT"))
    else:
        notes.append("all splits are root sentences (whole trees)")
    if scheme == "binary":
        notes.append("binary labels: 0,1 -> negative, 3,4 -> positive, neutral (2) dropped")
    if scheme == "regression":
        notes.append("target = fine label - 2, in -2.0 .. 2.0")
    notes.append("tokens lowercased; PTB escapes (-LRB-, \\/) left as written")
    notes.append(_count_note(splits))
    if scheme == "regression":
        return Dataset(name, "regress", splits, None, notes, treebank=True)
    labels = SST_BINARY_LABELS if scheme == "binary" else SST_FINE_LABELS
    return Dataset(name, "classify", splits, labels, notes, treebank=True)


def load_sst2(data_dir, seed: int = 0) -> Dataset:
    return _load_sst("sst2", data_dir, "binary", train_phrases=True)


def load_sst5(data_dir, seed: int = 0) -> Dataset:
    return _load_sst("sst5", data_dir, "fine", train_phrases=True)


def load_sst5_regress(data_dir, seed: int = 0) -> Dataset:
    return _load_sst("sst5-regress", data_dir, "regression", train_phrases=True)


def load_sst2_sentences(data_dir, seed: int = 0) -> Dataset:
    return _load_sst("sst2-sentences", data_dir, "binary", train_phrases=False)


def load_sst2_glue(data_dir, seed: int = 0) -> Dataset:
    rows = {"train": R.read_glue_sst2(find_file(data_dir, "sst/sst2_glue/train.tsv")),
            "dev": R.read_glue_sst2(find_file(data_dir, "sst/sst2_glue/dev.tsv"))}
    notes = ["GLUE SST-2: train = phrases and sentences, dev = sentences; GLUE's test has no "
             "labels, so there is no test split (use dev, or the `sst2` dataset's test)",
             "label 0 = negative, 1 = positive"]
    # Index i of SST_BINARY_LABELS is GLUE label str(i), so the names can be shared with sst2.
    ds = _classify("sst2-glue", rows, notes, labels=["0", "1"])
    ds.labels = list(SST_BINARY_LABELS)
    return ds


# --- sentence classification without an official split ------------------------------

def _load_label_first(name: str, rel: str, meaning: str):
    def load(data_dir, seed: int = 0) -> Dataset:
        notes: list[str] = []
        path = find_file(data_dir, rel)
        rows = _drop_empty(R.read_label_first(path, labels=("0", "1")), rel, notes)
        if not rows:
            raise RnnlensError(f"{path} has no sentences (every line is a label alone)")
        train, dev, test = random_split(rows, (0.8, 0.1, 0.1), seed)
        notes[:0] = [f"{meaning}; tokens lowercased",
                     f"no official split: shuffled with seed {seed} and cut 80/10/10 into train/dev/test"]
        return _classify(name, {"train": train, "dev": dev, "test": test}, notes)
    load.__doc__ = f"{name}: {rel}, 80/10/10 split with `seed`."
    return load


load_mr = _load_label_first("mr", "mr/rt-polarity.all", "MR movie-review polarity, 1 = positive")
load_subj = _load_label_first("subj", "subj/subj.all", "SUBJ, 0 = subjective, 1 = objective")
load_cr = _load_label_first("cr", "cr/custrev.all", "CR customer reviews, 1 = positive")
load_mpqa = _load_label_first("mpqa", "mpqa/mpqa.all", "MPQA phrase polarity, 1 = positive")


# --- datasets with train/test, dev carved from train -------------------------------

def _with_dev(name: str, train: list, test: list, seed: int, notes: list[str], labels=None,
              task: str = "classify") -> Dataset:
    train, dev = carve_dev(train, seed)
    notes.append(f"dev is 10% of train, carved with seed {seed}")
    return _classify(name, {"train": train, "dev": dev, "test": test}, notes, labels, task)


def load_trec(data_dir, seed: int = 0) -> Dataset:
    train = R.read_trec(find_file(data_dir, "trec/TREC.train"))
    test = R.read_trec(find_file(data_dir, "trec/TREC.test"))
    notes = ["TREC question type, 6 coarse classes (the fine label after ':' is ignored); tokens lowercased"]
    return _with_dev("trec", train, test, seed, notes)


def load_ag_news(data_dir, seed: int = 0) -> Dataset:
    try:
        train_path = find_file(data_dir, "ag_news/train.csv")
    except RnnlensError:
        raise RnnlensError(f"AG News train.csv is missing (looked for {Path(data_dir) / 'ag_news' / 'train.csv'}); "
                           "the shared copy has only test.csv, so ag_news cannot be trained") from None
    train = R.read_ag_news(train_path)
    test = R.read_ag_news(find_file(data_dir, "ag_news/test.csv"))
    notes = ["AG News: text = title + description; tokens lowercased"]
    try:
        names = R.read_text(find_file(data_dir, "ag_news/classes.txt")).split("\n")
        notes.append("classes 1..4 = " + ", ".join(n.strip() for n in names if n.strip()))
    except RnnlensError:
        pass  # class names are documentation only
    return _with_dev("ag_news", train, test, seed, notes)


def load_imdb(data_dir, seed: int = 0) -> Dataset:
    train = R.read_imdb(find_file(data_dir, "imdb/train.jsonl.gz"))
    test = R.read_imdb(find_file(data_dir, "imdb/test.jsonl.gz"))
    notes = ["IMDB reviews, label 1 = positive; <br /> removed, tokens lowercased",
             "dev is not stratified by label"]
    return _with_dev("imdb", train, test, seed, notes)


def load_semeval(data_dir, seed: int = 0) -> Dataset:
    train = read_semeval(find_file(data_dir, "semeval2010_task8/TRAIN_FILE.TXT"))
    test_path = find_file(data_dir, "semeval2010_task8/TEST_FILE_FULL.TXT")
    notes = ["SemEval-2010 Task 8: 19 directed labels; entity markers <e1> </e1> <e2> </e2> "
             "kept as tokens, other tokens lowercased",
             "test labels come from TEST_FILE_FULL.TXT's blocks"]
    try:
        key = find_file(data_dir, "semeval2010_task8/TEST_FILE_KEY.TXT")
    except RnnlensError:
        key = None
    if key is not None:
        # The official key has undirected labels; read_semeval checks they agree.
        notes.append("TEST_FILE_KEY.TXT (undirected labels) was checked against them: all agree")
    test = read_semeval(test_path, key_path=key)
    return _with_dev("semeval", train, test, seed, notes, labels=list(SEMEVAL_LABELS), task="relation")


def load_conll2003(data_dir, seed: int = 0) -> Dataset:
    from ..metrics import entity_lookup_baseline

    rows = {split: read_conll2003(find_file(data_dir, f"conll2003/{file}"), scheme="iobes")
            for split, file in (("train", "eng.train"), ("dev", "eng.testa"), ("test", "eng.testb"))}
    # every IOBES tag of each entity type training has (a type seen only as single words may
    # still span several in dev and test, or in a file the model is evaluated on later)
    types = {t.split("-", 1)[1] for _, tags in rows["train"] for t in tags if t != "O"}
    labels = ["O"] + sorted(f"{p}-{typ}" for typ in types for p in "BIES")
    index = {t: i for i, t in enumerate(labels)}
    splits = {}
    for split, sents in rows.items():
        unknown = sorted({t for _, tags in sents for t in tags} - set(index))
        if unknown:
            kinds = sorted({t.split("-", 1)[-1] for t in unknown})
            raise RnnlensError(f"conll2003 {split}: entity type(s) {', '.join(kinds)} do not occur in the training data")
        splits[split] = [Example(tokens, [index[t] for t in tags]) for tokens, tags in sents]
    notes = ["CoNLL-2003 English NER; dev = eng.testa, test = eng.testb; -DOCSTART- lines skipped",
             "tags converted from the file's IOB1 to IOBES (S- single, B- begin, I- inside, E- end)",
             "tokens keep their case",
             _count_note(splits) + " sentences"]
    base = entity_lookup_baseline(rows["train"], rows["test"])
    notes.append(f"entity lookup baseline (each training entity of one type, looked up; no training): "
                 f"test F1 {base['f1'] * 100:.2f}")
    return Dataset("conll2003", "tag", splits, labels, notes, lowercase=False, split_punct=False)


# --- language modelling ---------------------------------------------------------

def _load_lm(name: str, files: dict[str, str], what: str):
    def load(data_dir, seed: int = 0) -> Dataset:
        splits = {split: [Example(R.read_lm_text(find_file(data_dir, rel)), None)] for split, rel in files.items()}
        counts = ", ".join(f"{k} {len(v[0].tokens):,}" for k, v in splits.items())
        notes = [f"{what}; one token stream per split with <eos> after every line (pytorch/examples)",
                 f"tokens incl. <eos>: {counts}"]
        # PTB is lowercase; WikiText keeps case. Both are tokenised already: split on whitespace
        return Dataset(name, "lm", splits, None, notes, lowercase=name == "ptb", split_punct=False)
    load.__doc__ = f"{name}: {what}."
    return load


load_ptb = _load_lm("ptb", {"train": "ptb/ptb.train.txt", "dev": "ptb/ptb.valid.txt", "test": "ptb/ptb.test.txt"},
                    "Penn Treebank, Mikolov's LM split")
load_wikitext2 = _load_lm("wikitext2", {"train": "wikitext-2/train.txt", "dev": "wikitext-2/valid.txt",
                                        "test": "wikitext-2/test.txt"}, "WikiText-2 v1 (tokens)")


# --- formal languages and agreement (unitary-networks paper, section 11.5) -----------

# Generated by rnnlens.data.formal: no files, so no data_dir.
BUILT_IN = ("dyck", "crossserial")
AGREEMENT_LABELS = ["singular", "plural"]
AGREEMENT_FILES = ("agreement/agr_50_mostcommon_10K.tsv.gz", "agreement/agr_50_mostcommon_10K.tsv")


def _next_symbol_examples(strings: list[list[str]], symbols: list[str], info: dict | None = None) -> list[Example]:
    """[START] + w -> Example(tokens, label = the index in symbols of each next symbol)."""
    index = {s: i for i, s in enumerate(symbols)}
    return [Example(s, [index[t] for t in s[1:]], info) for s in strings]


def _pick(value, default):
    return default if value is None else value


def load_dyck(data_dir=None, seed: int = 0, train_size: int | None = None, dev_size: int | None = None,
              test_size: int | None = None, train_depth: int | None = None,
              test_depth: int | None = None) -> Dataset:
    """Generalised Dyck language (section 11.5.2): strings of 20 brackets of 5 types after a
    start symbol; train 102,400 of maximum depth 3, test 5,120 of maximum depth 10 (None
    picks these). dev (the paper has none) is a second sample of the test distribution,
    dev_size strings (default: as many as test) with its own seed, so the per-epoch dev
    metrics are the paper's per-epoch test curves; dev_size = 0 leaves it out.
    Task "dyck": next-symbol prediction, scored by closing-bracket accuracy (DyckHead).
    """
    from .formal import dyck_majority_baseline
    from . import formal

    train_size, test_size = _pick(train_size, formal.DYCK_TRAIN["size"]), _pick(test_size, formal.DYCK_TEST["size"])
    train_depth, test_depth = _pick(train_depth, formal.DYCK_TRAIN["max_depth"]), _pick(test_depth, formal.DYCK_TEST["max_depth"])
    dev_size = _pick(dev_size, test_size)
    corpus = formal.DyckCorpus(seed=seed, train_size=train_size, train_depth=train_depth, test_size=test_size,
                               test_depth=test_depth)
    strings = {"train": [ex.tokens for ex in corpus.split("train")]}
    if dev_size:
        strings["dev"] = formal.dyck_corpus(dev_size, corpus.length, test_depth, f"{seed}:dev-as-test", corpus.pairs)
    strings["test"] = [ex.tokens for ex in corpus.split("test")]
    symbols = list(formal.OPENERS + formal.CLOSERS)
    splits = {name: _next_symbol_examples(v, symbols) for name, v in strings.items()}
    base = dyck_majority_baseline(strings["train"], strings["test"])
    dev_note = f", dev drawn like test (depth <= {test_depth}, own seed)" if dev_size else ", no dev split"
    notes = [(f"generalised Dyck language, 5 bracket pairs, {corpus.length} brackets after {formal.START}; "
              f"train depth <= {train_depth}, test depth <= {test_depth}{dev_note}"),
             (f"majority baseline (always {base['label']!r}, the most frequent closer in train): "
              f"closing-bracket error {base['error']:.3f} on test"),
             _count_note(splits) + " strings"]
    return Dataset("dyck", "dyck", splits, symbols, notes)


def load_crossserial(data_dir=None, seed: int = 0, train_size: int | None = None, dev_size: int | None = None,
                     test_size: int | None = None, train_k: int | None = None, test_k: int | None = None) -> Dataset:
    """Cross-serial dependencies a^m b^n c^m d^n (section 11.5.1) between a start and a stop
    symbol: train 51,200 strings uniform over C_8, test 5,120 over C_10 (None picks these);
    dev as in load_dyck (a second sample of C_test_k). Every example carries info
    k = test_k: predictions are checked against C_test_k (the paper's C_10) in every split.
    Task "crossserial": next-symbol prediction, scored by full-string error (CrossSerialHead).
    """
    from . import formal

    train_size, test_size = _pick(train_size, formal.CROSS_TRAIN["size"]), _pick(test_size, formal.CROSS_TEST["size"])
    train_k, test_k = _pick(train_k, formal.CROSS_TRAIN["k"]), _pick(test_k, formal.CROSS_TEST["k"])
    dev_size = _pick(dev_size, test_size)
    corpus = formal.CrossSerialCorpus(seed=seed, train_size=train_size, train_k=train_k, test_size=test_size,
                                      test_k=test_k)
    strings = {"train": [ex.tokens for ex in corpus.split("train")]}
    if dev_size:
        strings["dev"] = formal.crossserial_corpus(dev_size, test_k, f"{seed}:dev-as-test", corpus.min_count)
    strings["test"] = [ex.tokens for ex in corpus.split("test")]
    symbols = list(formal.CROSS_SYMBOLS) + [formal.STOP]
    info = {"k": test_k}                      # one shared dict: the language predictions are checked in
    splits = {name: _next_symbol_examples(v, symbols, info) for name, v in strings.items()}
    unseen = sum(sum(formal.crossserial_mn(s)) >= train_k for s in strings["test"])
    dev_note = ", dev drawn like test (own seed)" if dev_size else ", no dev split"
    notes = [(f"cross-serial a^m b^n c^m d^n with m, n >= {corpus.min_count}: train from C_{train_k}, "
              f"test from C_{test_k}{dev_note}"),
             (f"predictions are checked against C_{test_k} in every split; {unseen} of {len(strings['test'])} "
              f"test strings have m + n >= {train_k} (lengths never seen in training)"),
             _count_note(splits) + " strings"]
    return Dataset("crossserial", "crossserial", splits, symbols, notes)


def load_agreement(data_dir, seed: int = 0) -> Dataset:
    """Linzen et al.'s number-prediction task from agr_50_mostcommon_10K.tsv(.gz) (not in the
    shared data: pass the folder holding your copy, or its parent with an agreement/ folder).
    Each example is the sentence up to the verb (exclusive), labelled singular or plural,
    with info attractors = n_diff_intervening. Split 90/5/5 into train/dev/test with `seed`
    (the unitary-networks paper: 90% train, 10% validation and test).
    """
    from ..metrics import majority_baseline

    path = None
    for rel in AGREEMENT_FILES:
        try:
            path = find_file(data_dir, rel)
            break
        except RnnlensError:
            continue
    if path is None:
        raise RnnlensError(f"agr_50_mostcommon_10K.tsv(.gz) is not in {data_dir} (nor in "
                           f"{Path(data_dir) / 'agreement'}); it is not part of the shared data: download it "
                           "as TalLinzen/rnn_agreement's README says")
    rows = read_linzen_tsv(path)
    notes = []
    kept = [r for r in rows if r.prefix]
    if len(kept) < len(rows):
        notes.append(f"{len(rows) - len(kept)} dependencies with the verb first (empty prefix) dropped")
    infos: dict[int, dict] = {}               # shared per count: a dict per example would cost ~200 B each
    examples = [Example(r.prefix, AGREEMENT_LABELS.index(r.number),
                        infos.setdefault(r.attractors, {"attractors": r.attractors})) for r in kept]
    train, dev, test = random_split(examples, (0.9, 0.05, 0.05), seed)
    splits = {"train": train, "dev": dev, "test": test}
    base = majority_baseline([ex.label for ex in train], [ex.label for ex in test])
    counts = {}
    for ex in test:
        counts[ex.info["attractors"]] = counts.get(ex.info["attractors"], 0) + 1
    notes[:0] = [(f"Linzen et al. 2016 number prediction from {path.name}: the words before the verb "
                  "-> singular (VBZ) / plural (VBP); attractors = n_diff_intervening"),
                 f"no official split: shuffled with seed {seed} and cut 90/5/5 into train/dev/test"]
    notes += [f"majority baseline (always {AGREEMENT_LABELS[base['label']]}): test accuracy {base['accuracy']:.3f}",
              "test items by attractors: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items())),
              _count_note(splits)]
    return Dataset("agreement", "agreement", splits, list(AGREEMENT_LABELS), notes, split_punct=False)


# --- registry -------------------------------------------------------------------

DATASETS: dict[str, Callable[..., Dataset]] = {
    "sst2": load_sst2,
    "sst5": load_sst5,
    "sst5-regress": load_sst5_regress,
    "sst2-sentences": load_sst2_sentences,
    "sst2-glue": load_sst2_glue,
    "mr": load_mr,
    "subj": load_subj,
    "cr": load_cr,
    "mpqa": load_mpqa,
    "trec": load_trec,
    "ag_news": load_ag_news,
    "imdb": load_imdb,
    "semeval": load_semeval,
    "conll2003": load_conll2003,
    "ptb": load_ptb,
    "wikitext2": load_wikitext2,
    "dyck": load_dyck,
    "crossserial": load_crossserial,
    "agreement": load_agreement,
}
register("corpus", DATASETS)


def load_dataset(name: str, data_dir, seed: int = 0, **options) -> Dataset:
    """Load a registered dataset by name from data_dir (see the module docstring).
    The BUILT_IN (generated) datasets need no data_dir and take their sizes as options."""
    if name not in DATASETS:
        raise RnnlensError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    if name not in BUILT_IN and (data_dir is None or not Path(data_dir).is_dir()):
        what = "is a file, not a folder" if data_dir is not None and Path(data_dir).exists() else "does not exist"
        raise RnnlensError(f"data directory {data_dir} {what}")
    if options and name not in BUILT_IN:
        raise RnnlensError(f"dataset {name!r} takes no options (got {', '.join(options)})")
    with R.bulk_build():  # hundreds of thousands of Examples: see bulk_build
        return DATASETS[name](None if data_dir is None else Path(data_dir), seed=seed, **options)
