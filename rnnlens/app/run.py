"""A trained run, loaded once: `Run.load(DIR)` gives the model, its config, vocabulary,
task, labels and tokenizer, and reloads the data it was trained on when asked (`split`,
`batches`), checking that the data still has the model's task and labels. Every command and
study that reads a model folder goes through it, so that logic and its messages exist once.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config
from ..data.datasets import Dataset
from ..data.tokenize import Tokenizer
from ..data.vocab import Vocab
from ..errors import RnnlensError
from ..outfiles import metric_record
from ..train.checkpoint import load_checkpoint

FORMAL_TASKS = ("dyck", "crossserial")     # models that read a start symbol before each string


@dataclass
class Run:
    path: Path
    model: object                    # rnnlens.models.RNNModel, in eval mode
    config: Config
    vocab: Vocab
    meta: dict                       # the checkpoint's config.json (task, labels, tokenizer, ...)
    data_dir: str | None = None      # where the data lives now (None: where it was trained)
    _data: Dataset | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path, device: str = "cpu", data_dir: str | Path | None = None) -> "Run":
        """The model folder `path` (RnnlensError naming the problem if it is not one)."""
        model, cfg, vocab, meta = load_checkpoint(path, device=device)
        return cls(Path(path), model, cfg, vocab, meta, None if data_dir is None else str(data_dir))

    # --- what the checkpoint says ------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.meta.get("task", "classify")

    @property
    def labels(self) -> list:
        return list(self.meta.get("labels") or [])

    @property
    def tokenizer(self) -> Tokenizer:
        return Tokenizer(**self.meta.get("tokenizer", {}))

    def tokenize(self, text: str) -> list[str]:
        """A raw text's tokens as the model's training data was read: the run's tokenizer; for
        a relation classifier the SemEval entity markers <e1> </e1> <e2> </e2> kept whole; for
        a formal-language model (dyck, crossserial) the string's single-character symbols
        ("aabbccdd" or "a a b b c c d d": data.formal.symbol_tokens), a leading start symbol
        dropped (`reads` puts it back); for a Treebank-tokenised corpus (the SST) a piece that
        is a token of the model's vocabulary ("mr.", "u.s.") is kept whole, as its trees had
        it, and any other is split as the Treebank splits ("it's" -> "it 's")."""
        if self.task in FORMAL_TASKS:
            from ..data.formal import START, symbol_tokens

            tokens = symbol_tokens(text, self.vocab)
            return tokens[1:] if tokens[:1] == [START] else tokens
        if self.task == "relation":
            from ..data.semeval_conll import semeval_tokens

            return semeval_tokens(text, self.tokenizer)
        tok = self.tokenizer
        if tok.treebank:
            from ..data.tokenize import clean_text

            text = clean_text(text)
            pieces = (text.lower() if tok.lowercase else text).split()
            return [t for piece in pieces for t in ([piece] if piece in self.vocab else tok(piece))]
        return tok(text)

    def reads(self, tokens: list[str]) -> list[str]:
        """`tokens` (from `tokenize`) as the model reads them: a formal-language model's start
        symbol first, as training and `rnnlens predict` put it before every string (its output
        after "<s>" is its prediction for the string's first symbol); other models' unchanged."""
        if self.task in FORMAL_TASKS:
            from ..data.formal import START

            return [START] + tokens
        return tokens

    def require_task(self, *tasks: str, what: str) -> None:
        """RnnlensError unless the run's task is one of `tasks`; `what` names the command."""
        if self.task not in tasks:
            raise RnnlensError(f"{what} needs a model of task {' or '.join(tasks)}; {self.path} is a "
                               f"{self.task!r} model")

    def metrics(self) -> list[dict]:
        """The rows of the run's metrics.jsonl (every epoch, then the test record), [] if none."""
        rows = []
        try:
            lines = (self.path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        except OSError:
            return rows
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                rows.append(metric_record(rec))
        return rows

    # --- the data it was trained on ----------------------------------------------------------
    def data_config(self) -> Config:
        """The run's config for reloading its data: every split whole (no training cap), from
        data_dir when given."""
        cfg = copy.deepcopy(self.config)
        d = cfg.data
        if self.data_dir:
            d.data_dir = self.data_dir
        for name in ("train_file", "dev_file", "test_file") + (() if self.data_dir else ("data_dir",)):
            setattr(d, name, self._resolve(getattr(d, name)))
        d.max_train_examples = None
        return cfg

    def _resolve(self, value: str | None) -> str | None:
        """A relative data path of the config: in data_dir (a file by its name) when that is
        given, else relative to the folder training ran in, as training read it (a file of the
        same name in this working folder is another file), else as stored, from here (the
        run's folder is gone or elsewhere)."""
        if not value or Path(value).is_absolute():
            return value
        if self.data_dir and (Path(self.data_dir) / Path(value).name).exists():
            return str(Path(self.data_dir) / Path(value).name)
        trained_in = self.meta.get("trained_in")
        if trained_in and (Path(trained_in) / value).exists():
            return str(Path(trained_in) / value)
        return value

    def data(self) -> Dataset:
        """The dataset the run was trained on, reloaded once; RnnlensError if it is not there
        or no longer has the model's task and labels."""
        if self._data is None:
            from ..train.run import load_data

            data = load_data(self.data_config())
            if data.task != self.task or list(data.labels or []) != self.labels:
                raise RnnlensError("the data found now does not have the task and labels the model was trained on")
            self._data = data
        return self._data

    def split(self, name: str) -> list:
        splits = self.data().splits
        if name not in splits:
            raise RnnlensError(f"split {name!r} is not available; available: {', '.join(splits)}")
        return splits[name]

    def batches(self, name: str):
        """Evaluation batches of split `name`, as training built them."""
        from ..train.run import batches

        return batches(self.data_config(), self.task, self.split(name), self.vocab, train=False)
