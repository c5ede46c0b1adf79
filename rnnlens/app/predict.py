"""A trained model on new text: `rnnlens predict` (one JSON record a line) and `rnnlens eval
--test-file` (the task's metrics, per-class precision, recall and F1, a confusion matrix).

Inputs are read as the model was trained to read them: its own tokenizer and vocabulary
(unknown words become <unk>). Predictions run in batches of texts of similar length, in eval
mode with no gradients, and come back in the input's order.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from ..data.batching import Example, collate
from ..data.tokenize import clean_text
from ..errors import RnnlensError
from .run import Run

SENTENCE_TASKS = ("classify", "regress", "relation", "agreement")
FORMATS = ("auto", "lines", "tsv", "jsonl")
LINE_LIMIT = 16 << 20        # characters in one input line: a text, not an endless stream (/dev/zero)


# --- reading texts ---------------------------------------------------------------------------
def read_texts(lines: Iterable[str], fmt: str = "auto", name: str = "input") -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line. lines: plain text (one text a line),
    TSV (the text is the last column: `label<TAB>text` as training files have it, or just the
    text) or JSONL (an object with a "text" field, or a JSON string). fmt "auto" takes JSONL
    for a name ending in .jsonl, TSV for .tsv, else plain lines."""
    if fmt not in FORMATS:
        raise RnnlensError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "auto":
        fmt = "jsonl" if name.endswith(".jsonl") else "tsv" if name.endswith(".tsv") else "lines"
    if hasattr(lines, "readline"):      # a file or stdin: each line read with a bound
        lines = _bounded_lines(lines, name)
    for no, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        if fmt == "lines":
            yield no, line
        elif fmt == "tsv":               # read as training reads it: the text after the first tab
            label, sep, text = line.partition("\t")
            yield no, text if sep else label
        else:
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise RnnlensError(f"{name}:{no}: not JSON ({e.msg})") from None
            text = obj.get("text") if isinstance(obj, dict) else obj
            if not isinstance(text, str):
                raise RnnlensError(f"{name}:{no}: expected an object with a \"text\" string, or a JSON string")
            yield no, clean_text(text)


def _bounded_lines(f, name: str, limit: int = LINE_LIMIT) -> Iterator[str]:
    """The lines of the text file f, each read at most `limit` characters at a time: a line
    longer than that (a device such as /dev/zero has one endless line) is an RnnlensError, not
    a read that fills the memory."""
    for no in itertools.count(1):
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) > limit:
            raise RnnlensError(f"{name}:{no}: a line longer than {limit >> 20} MiB characters; one text a line is "
                               "expected (is it a device or a binary file?)")
        yield line


# --- predicting ------------------------------------------------------------------------------
@dataclass
class Predictor:
    """Predictions of one run, batch by batch."""
    run: Run
    batch_size: int = 64
    explain: int = 0                  # top n-grams per text (sentence tasks)

    def __post_init__(self):
        if self.batch_size < 1:
            raise RnnlensError("--batch-size must be >= 1")
        if self.explain < 0:
            raise RnnlensError("--explain must be >= 0")
        if self.explain and self.run.task not in SENTENCE_TASKS:
            raise RnnlensError(f"--explain ranks the n-grams of a sentence-level model's prediction; this one is a "
                               f"{self.run.task!r} model")
        self.run.model.eval()

    def records(self, texts: list[str]) -> list[dict]:
        """One record per text (same order)."""
        tokens = [self.run.tokenize(t) for t in texts]
        out: list[dict | None] = [None] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i]))
        for s in range(0, len(order), self.batch_size):
            idx = order[s: s + self.batch_size]
            for i, rec in zip(idx, self._batch([tokens[i] for i in idx])):
                out[i] = {"text": texts[i], **rec}
        return out

    @torch.no_grad()
    def _batch(self, tokens: list[list[str]]) -> list[dict]:
        run, task = self.run, self.run.task
        if task == "lm":
            return self._lm(tokens)
        if task in ("dyck", "crossserial"):
            return self._next_symbols(tokens)
        empty = [i for i, t in enumerate(tokens) if not t]
        recs: list[dict] = [{} for _ in tokens]
        for i in empty:
            recs[i] = {"tokens": [], "error": "no tokens"}
        keep = [i for i, t in enumerate(tokens) if t]
        if not keep:
            return recs
        batch = collate([Example(tokens[i]) for i in keep], run.vocab)
        device = next(run.model.parameters()).device
        batch = batch.to(device)
        out = run.model(batch)
        head = run.model.head
        unk = run.vocab.unk_id
        for j, i in enumerate(keep):
            rec: dict = {"tokens": tokens[i],
                         "unknown": [w for w, k in zip(tokens[i], batch.tokens[j].tolist()) if k == unk]}
            if task == "tag":
                path = head.crf.decode(out[j: j + 1], batch.mask[j: j + 1])[0]
                rec["tags"] = [head.tags[k] for k in path]
            elif task == "regress":
                rec["value"] = float(out[j])
            else:
                probs = self._probabilities(out[j])
                best = max(probs, key=probs.get)
                rec.update(label=best, probabilities=probs)
            recs[i] = rec
        if self.explain:
            self._add_ngrams([recs[i] for i in keep])
        return recs

    def _probabilities(self, logits: torch.Tensor) -> dict[str, float]:
        labels = self.run.labels
        if logits.dim() == 0:                             # binary: one logit for labels[1]
            p = float(torch.sigmoid(logits.double()))
            return {labels[0]: 1.0 - p, labels[1]: p}
        probs = torch.softmax(logits.double(), -1).tolist()
        return {lab: p for lab, p in zip(labels, probs)}

    def _add_ngrams(self, recs: list[dict]) -> None:
        from ..analysis.sentence import explain_text

        for rec in recs:
            ex = explain_text(self.run.model, self.run.vocab, rec["tokens"])
            pos = ex.positions[0].to_dict(ex.tokens, self.explain)
            rec["explanation"] = {"explained": ex.explained, "view": "exact" if ex.exact else "first-order",
                                  "output": pos["output"], "offset": pos["offset"], "remainder": pos["remainder"],
                                  "ngrams": pos["ngrams"]}

    def _next_symbols(self, tokens: list[list[str]]) -> list[dict]:
        """A formal-language model (Dyck, cross-serial) reads the start symbol, then the string:
        after each prefix (the empty one first) the symbol it predicts next and its distribution
        over the symbols; `next[i]` follows the first i symbols, as in training."""
        recs: list[dict] = [{"tokens": [], "error": "no tokens"} for _ in tokens]
        keep = [i for i, t in enumerate(tokens) if t]
        if not keep:
            return recs
        batch = collate([Example(self.run.reads(tokens[i])) for i in keep], self.run.vocab)
        batch = batch.to(next(self.run.model.parameters()).device)
        probs = torch.softmax(self.run.model(batch).double(), -1).cpu()     # [B,T,C]
        symbols = self.run.labels
        for j, i in enumerate(keep):
            rows = probs[j, : len(tokens[i]) + 1].tolist()
            recs[i] = {"tokens": tokens[i], "unknown": [w for w in tokens[i] if w not in self.run.vocab],
                       "next": [symbols[max(range(len(r)), key=r.__getitem__)] for r in rows],
                       "probabilities": [dict(zip(symbols, r)) for r in rows]}
        return recs

    def _lm(self, tokens: list[list[str]]) -> list[dict]:
        from ..analysis.lm import sentence_batch, token_logprobs

        recs: list[dict] = []
        keep = [i for i, t in enumerate(tokens) if t]
        lp = None
        if keep:
            device = next(self.run.model.parameters()).device
            batch = sentence_batch(self.run.vocab, [tokens[i] for i in keep]).to(device)
            lp = token_logprobs(self.run.model, batch).cpu()
        j = 0
        for i, t in enumerate(tokens):
            if not t:
                recs.append({"tokens": [], "error": "no tokens"})
                continue
            row = lp[j, : len(t) + 1].tolist()               # each word, then <eos>
            j += 1
            total = sum(row)
            recs.append({"tokens": t + ["<eos>"], "unknown": [w for w in t if w not in self.run.vocab],
                         "log_probs": row, "log_prob": total, "ppl": math.exp(-total / len(row))})
        return recs


# --- evaluating on a file ----------------------------------------------------------------------
def file_examples(run: Run, path: str | Path) -> list[Example]:
    """A labelled file in the training format of the run's task: `label<TAB>text` lines for a
    classifier, CoNLL-2003 columns for a tagger, plain text for a language model."""
    from ..data import readers as R
    from ..data.semeval_conll import read_conll2003

    task = run.task
    if task == "classify":
        rows = R.read_labelled_tsv(path, run.tokenizer)
        return R.label_examples(rows, run.labels, path)
    if task == "tag":
        scheme = "iobes" if any(t.startswith(("E-", "S-")) for t in run.labels) else "bio"
        index = {t: i for i, t in enumerate(run.labels)}
        out = []
        for words, tags in read_conll2003(path, scheme=scheme):
            unknown = sorted(set(tags) - set(index))
            if unknown:
                kinds = sorted({t.split("-", 1)[-1] for t in unknown})
                raise RnnlensError(f"{path}: the model has no tag for {', '.join(kinds)} (its tags: "
                                   f"{', '.join(run.labels)})")
            lower = [w.lower() for w in words] if run.tokenizer.lowercase else list(words)
            out.append(Example(lower, [index[t] for t in tags]))
        if not out:
            raise RnnlensError(f"{path} has no sentences")
        return out
    if task == "lm":
        stream = R.read_lm_text(path)
        if not stream:
            raise RnnlensError(f"{path} has no text")
        return [Example(stream)]
    raise RnnlensError(f"eval --test-file reads label<TAB>text (classify), CoNLL (tag) or plain text (lm) files; "
                       f"this model's task is {task!r}: evaluate it on its own splits (--split)")


class Confusion:
    """A classifier's confusion matrix (rows: gold, columns: predicted), counted a batch at a
    time from the model's outputs (`add`), so that it can ride along any pass over the data
    (the evaluation's own: `Trainer.evaluate(batches, each=confusion.add)`)."""

    def __init__(self, run: Run):
        self.labels = run.labels
        self.head = run.model.head
        k = len(self.labels)
        self.counts = [[0] * k for _ in range(k)]

    def add(self, output: torch.Tensor, batch) -> None:
        for g, p in zip(batch.targets.tolist(), self.head.predict(output).tolist()):
            self.counts[int(g)][int(p)] += 1

    def report(self) -> dict:
        """Per-class precision, recall, F1 and support, macro averages (over the classes that
        occur as gold or predicted labels, as scikit-learn's) and the matrix."""
        from ..metrics import prf

        labels, conf = self.labels, self.counts
        scores = [prf(conf[i][i], sum(row[i] for row in conf), sum(conf[i])) for i in range(len(labels))]
        per = {lab: {"precision": s["precision"], "recall": s["recall"], "f1": s["f1"], "support": s["gold"]}
               for lab, s in zip(labels, scores)}
        # a class absent from both the gold and the predicted labels says nothing about the model
        seen = [s for s in scores if s["gold"] or s["predicted"]]
        macro = {m: sum(s[m] for s in seen) / max(len(seen), 1) for m in ("precision", "recall", "f1")}
        return {"labels": labels, "per_class": per, "macro": macro, "confusion": conf}


@torch.no_grad()
def classification_report(run: Run, examples: list[Example], batch_size: int = 64) -> dict:
    """Per-class precision, recall, F1 and support, macro averages and the confusion matrix
    (rows: gold, columns: predicted), for a classifier on labelled examples: one pass in eval
    mode with no gradients, in batches of similar length."""
    from ..data.batching import bucket_batches

    conf = Confusion(run)
    model = run.model.eval()
    device = next(model.parameters()).device
    for ids in bucket_batches([len(ex.tokens) for ex in examples], batch_size, shuffle=False):
        batch = collate([examples[i] for i in ids], run.vocab).to(device)
        conf.add(model(batch), batch)
    return conf.report()


def per_type_text(per_type: dict) -> str:
    """A tagger's entity-level scores per type, one line each, as conlleval lists them."""
    w = max(8, *(len(t) for t in per_type))
    lines = [f"{'type':<{w}} {'precision':>9} {'recall':>7} {'f1':>7} {'gold':>7} {'found':>7}"]
    for t, r in per_type.items():
        lines.append(f"{t:<{w}} {r['precision']:>9.4f} {r['recall']:>7.4f} {r['f1']:>7.4f} {r['gold']:>7} "
                     f"{r['predicted']:>7}")
    return "\n".join(lines)


def report_text(rep: dict) -> str:
    labels = rep["labels"]
    w = max(8, *(len(lab) for lab in labels))
    lines = [f"{'class':<{w}} {'precision':>9} {'recall':>7} {'f1':>7} {'support':>8}"]
    for lab in labels:
        r = rep["per_class"][lab]
        lines.append(f"{lab:<{w}} {r['precision']:>9.4f} {r['recall']:>7.4f} {r['f1']:>7.4f} {r['support']:>8}")
    m = rep["macro"]
    lines.append(f"{'macro':<{w}} {m['precision']:>9.4f} {m['recall']:>7.4f} {m['f1']:>7.4f}")
    lines += ["", "confusion matrix (rows: gold, columns: predicted)",
              " " * (w + 1) + " ".join(f"{lab[:8]:>8}" for lab in labels)]
    for lab, row in zip(labels, rep["confusion"]):
        lines.append(f"{lab:<{w}} " + " ".join(f"{n:>8}" for n in row))
    return "\n".join(lines)
