"""The built-in polarity corpus of the sequence-level paper (its Appendix A.2, Table 6).

Ten positive and twelve negative adjectives appear alone, negated ("not X") and doubly
negated ("not not X") inside short sentences made of neutral filler words. The label is
the polarity of the phrase: X and "not not X" keep the adjective's polarity, "not X"
flips it. Every split is balanced between the labels and generated deterministically
from a seed, so the demo needs no download.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from .batching import Example

POSITIVE = ("good", "nice", "charming", "awesome", "fascinating", "attractive",
            "interesting", "sweet", "stunning", "amazing")
NEGATIVE = ("awful", "bad", "uninspiring", "dull", "boring", "tedious", "mediocre",
            "shallow", "pointless", "unfunny", "gross", "poor")
NEGATION = "not"

# Neutral fillers: subject phrases and linking verbs, so the adjective phrase ends the
# sentence as in the paper's example "those filmmakings were not not charming".
_DETERMINERS = ("the", "this", "that", "those", "these", "our", "their", "his", "her")
_NOUNS = ("movie", "film", "films", "filmmakings", "story", "plot", "actors", "acting",
          "script", "ending", "scenes", "music", "director", "characters", "dialogue",
          "performance", "cast", "show")
_VERBS = ("was", "is", "were", "are", "seems", "seemed", "looked", "felt", "became",
          "remained", "appeared", "sounded")
_ADVERBS = ("really", "quite", "just", "simply", "somehow", "honestly", "overall",
            "still", "also", "then")

FORMS = ("token", "negation", "double_negation")

# Paper, Table 4: train / valid / test instance counts.
SPLIT_SIZES = {"train": 4120, "dev": 200, "test": 200}


def phrase(adjective: str, form: str) -> list[str]:
    """The adjective phrase of one form: ['x'], ['not','x'] or ['not','not','x']."""
    n = FORMS.index(form)
    return [NEGATION] * n + [adjective]


def phrase_label(adjective: str, form: str) -> int:
    """1 = positive, 0 = negative; each 'not' flips the adjective's polarity."""
    base = 1 if adjective in POSITIVE else 0
    return base if FORMS.index(form) % 2 == 0 else 1 - base


def _sentence(rng: random.Random, adjective: str, form: str) -> list[str]:
    words = [rng.choice(_DETERMINERS), rng.choice(_NOUNS), rng.choice(_VERBS)]
    if rng.random() < 0.3:
        words.append(rng.choice(_ADVERBS))
    return words + phrase(adjective, form)


@dataclass(frozen=True)
class PolarityCorpus:
    """Generator settings. double_negation_in_train=False leaves "not not X" out of the
    training split only (the paper's Figure 1); dev and test always contain all forms."""

    seed: int = 0
    double_negation_in_train: bool = True
    train_size: int = SPLIT_SIZES["train"]
    dev_size: int = SPLIT_SIZES["dev"]
    test_size: int = SPLIT_SIZES["test"]

    def split(self, name: str) -> list[Example]:
        sizes = {"train": self.train_size, "dev": self.dev_size, "test": self.test_size}
        if name not in sizes:
            raise KeyError(f"unknown split {name!r}; choose from {sorted(sizes)}")
        if sizes[name] % 2:
            raise ValueError("split sizes must be even so the labels balance")
        forms = FORMS
        if name == "train" and not self.double_negation_in_train:
            forms = FORMS[:2]
        # Each split has its own stream, derived from the seed and the split name.
        rng = random.Random(f"{self.seed}:{name}")
        # Every (adjective, form) phrase, grouped by the label it carries.
        by_label: dict[int, list[tuple[str, str]]] = {0: [], 1: []}
        for adj in POSITIVE + NEGATIVE:
            for form in forms:
                by_label[phrase_label(adj, form)].append((adj, form))
        examples: list[Example] = []
        for label in (0, 1):
            pool = by_label[label]
            # Cycle through a shuffled pool so every phrase appears about equally often.
            order: list[tuple[str, str]] = []
            while len(order) < sizes[name] // 2:
                chunk = pool[:]
                rng.shuffle(chunk)
                order.extend(chunk)
            for adj, form in order[: sizes[name] // 2]:
                examples.append(Example(_sentence(rng, adj, form), label))
        rng.shuffle(examples)
        return examples

    def splits(self) -> dict[str, list[Example]]:
        return {name: self.split(name) for name in ("train", "dev", "test")}
