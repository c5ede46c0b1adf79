"""The negation / intensification study (implicit-ngrams 5.2) on trained runs: load and check
every model, extract one adjective set per training corpus (or use a given one), and score
each model's adjectives and phrases. `rnnlens negation` prints and writes what this returns."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import read_small_text
from ..errors import RnnlensError
from .run import Run


@dataclass
class NegationStudies:
    """forms: the phrase forms scored. sets: one {"source", "adjectives", "models"} per distinct
    adjective set. results: one dict per model (its summary, the study's numbers, and the
    NegationStudy itself under "study"). adjectives / report: what adjectives.json and
    negation.json hold."""

    forms: list[str]
    sets: list[dict]
    results: list[dict]
    adjectives: dict
    report: dict


def _built_in(path) -> bool:
    """Does --adjectives name the built-in "paper-table9" list (no file of that name here)?"""
    from ..analysis.negation import PAPER_TABLE9

    return str(path) == PAPER_TABLE9 and not Path(path).exists()


def read_adjectives(path):
    """The adjectives of a JSON file, or of the built-in name "paper-table9" (the
    implicit-ngrams paper's Table 9) where no file of that name exists."""
    from ..analysis.negation import Adjectives, paper_table9_adjectives

    if _built_in(path):
        return paper_table9_adjectives()
    try:
        d = json.loads(read_small_text(path, "adjectives file"))
    except FileNotFoundError:
        raise RnnlensError(f"adjectives file {path} does not exist") from None
    except OSError as e:
        raise RnnlensError(f"cannot read adjectives file {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
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


def model_names(paths: list[str]) -> list[str]:
    """A plain file name per model path (its folder's name), numbered where two are the same."""
    import re

    names, taken = [], set()
    for p in paths:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(p).resolve().name) or "model"
        name, k = base, 1
        while name in taken:              # m, m, m-2 -> m, m-2, m-2-2: every name its own file
            k += 1
            name = f"{base}-{k}"
        taken.add(name)
        names.append(name)
    return names


def _load_checked(path, data_dir) -> tuple:
    """(run, model, cfg, vocab, meta, task, sides) of a model the study can score; anything
    that would fail after the work fails here instead."""
    from ..analysis.negation import sentiment_sides
    from ..analysis.ngrams import require_real
    from ..data.batching import Example, collate

    run = Run.load(path, data_dir=data_dir)
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
    return run, model, cfg, vocab, meta, task, sides


class _AdjectiveSets:
    """One adjective set per distinct training corpus (or the given one), extracted on first use."""

    def __init__(self, given, given_path, ratio: float, min_count: int, lexicon_threshold: float,
                 progress: bool = True):
        self.given, self.given_path, self.progress = given, given_path, progress
        self.options = {"ratio": ratio, "min_count": min_count, "lexicon_threshold": lexicon_threshold}
        self.lexicon = None
        self.sets: dict[str, dict] = {}

    def for_run(self, run, cfg, sides) -> dict:
        from ..analysis.negation import corpus_adjectives

        if self.given is not None:
            source = "the implicit-ngrams paper's Table 9" if _built_in(self.given_path) else str(self.given_path)
            return self._set("given", source, lambda: self.given)
        built_in = corpus_adjectives(cfg.data.corpus)
        if built_in is not None:      # a corpus made from adjective lists: those lists
            return self._set(f"lists:{cfg.data.corpus}", f"the {cfg.data.corpus} corpus's adjective lists",
                             lambda: built_in)
        key, examples = _training_split(run)
        return self._set(key, f"{cfg.data.corpus} train split", lambda: self._extract(examples, cfg, sides))

    def _set(self, key: str, source: str, adjectives) -> dict:
        """The set under key, made (adjectives() called) the first time it is asked for."""
        if key not in self.sets:
            self.sets[key] = {"source": source, "adjectives": adjectives(), "models": []}
        return self.sets[key]

    def _extract(self, examples, cfg, sides):
        from ..analysis.negation import extract_adjectives, load_lexicon

        self.lexicon = self.lexicon if self.lexicon is not None else load_lexicon()
        if self.progress:
            print(f"negation: extracting adjectives from the {cfg.data.corpus} training split "
                  f"({len(examples):,} instances)", file=sys.stderr)
        adj = extract_adjectives(examples, sides.is_positive, sides.is_negative, self.lexicon, **self.options)
        if not adj.positive and not adj.negative:
            raise RnnlensError(
                f"no polarity adjectives found in the {cfg.data.corpus} training split "
                f"({adj.candidates['positive']} positive / {adj.candidates['negative']} negative tokens "
                "passed the frequency ratio, none is an adjective of that polarity in textblob's lexicon); "
                "pass --adjectives FILE")
        return adj


def _adjectives_json(set_list: list[dict]) -> dict:
    if len(set_list) == 1:
        return {"source": set_list[0]["source"], "models": set_list[0]["models"],
                **set_list[0]["adjectives"].to_dict()}
    return {"sets": [{"source": s["source"], "models": s["models"], **s["adjectives"].to_dict()}
                     for s in set_list]}


def negation_studies(model_paths: list[str], data_dir=None, adjectives=None, forms=None, score: str = "auto",
                     ratio: float = 3.0, min_count: int = 5, lexicon_threshold: float = 0.2,
                     progress: bool = True) -> NegationStudies:
    """The study on every model in model_paths. adjectives: a JSON file of the adjectives to
    use instead of extracting them; forms: phrase forms (default FORMS); score: "auto",
    "ngram" or "context"; ratio, min_count, lexicon_threshold: the extraction's options.
    Every model is loaded and checked before any work. Progress goes to stderr (progress=False:
    none; one line a model only where there are several)."""
    from ..analysis.negation import FORMS, form_tokens, negation_study, summarize_study

    forms = list(dict.fromkeys(forms or FORMS))
    for f in forms:
        form_tokens(f, "X")
    given = read_adjectives(adjectives) if adjectives else None
    kind = None if score == "auto" else score
    sets = _AdjectiveSets(given, adjectives, ratio, min_count, lexicon_threshold, progress)
    names = model_names(model_paths)
    loaded = [_load_checked(path, data_dir) for path in model_paths]
    results = []
    for k, (path, name, (run, model, cfg, vocab, meta, task, sides)) in enumerate(zip(model_paths, names, loaded), 1):
        if progress and len(names) > 1:
            print(f"negation: model {k}/{len(names)}: {path}", file=sys.stderr)
        entry = sets.for_run(run, cfg, sides)
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
    set_list = list(sets.sets.values())
    report = {"forms": forms, "models": [{k: v for k, v in r.items() if k != "study"} for r in results]}
    return NegationStudies(forms, set_list, results, _adjectives_json(set_list), report)
