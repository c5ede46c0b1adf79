"""Number agreement as supervised classification (Linzen, Dupoux & Goldberg 2016; the
unitary-networks paper, section 11.5.3): from the state after the words before the verb,
predict whether the verb is singular or plural. Scored by accuracy per number of
attractors (nouns of the other number between subject and verb), with Wilson 95%
intervals, as the paper's Fig. 11.6 plots it."""
from __future__ import annotations

from ..metrics import wilson_interval
from .classify import ClassificationHead


class AgreementHead(ClassificationHead):
    """A ClassificationHead (final pooling: the state just before the verb) whose metrics
    also break accuracy down by Batch.extra["attractors"] (Example.info, set by the
    agreement loader; -1 where absent). finalize() adds

      by_attractors: {str(count): {n, correct, accuracy, error, low, high}}, with the
        Wilson 95% interval of the accuracy.

    The per-count tallies are numbers ("n@3", "correct@3"), so batches merge by addition
    and a running finalize stays cheap over a 1.5M-sentence training epoch.
    """

    def metrics(self, output, batch) -> dict:
        hits = (self.predict(output) == batch.targets).long().tolist()
        attractors = batch.extra.get("attractors") or [None] * len(batch)
        out = super().metrics(output, batch)
        for hit, a in zip(hits, attractors):
            key = -1 if a is None else int(a)
            out[f"n@{key}"] = out.get(f"n@{key}", 0.0) + 1.0
            out[f"correct@{key}"] = out.get(f"correct@{key}", 0.0) + hit
        return out

    def finalize(self, m: dict) -> dict:
        by = {}
        for key in sorted(int(k[2:]) for k in m if k.startswith("n@")):
            n, ok = m[f"n@{key}"], m[f"correct@{key}"]
            low, high = wilson_interval(ok, n)
            by[str(key)] = {"n": int(n), "correct": int(ok), "accuracy": ok / n, "error": 1 - ok / n,
                            "low": low, "high": high}
        return {**super().finalize(m), "by_attractors": by}
