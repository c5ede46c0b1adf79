"""Axis labels of the confusion matrix: elided in the middle where long, never two alike."""
from rnnlens.viz.plots import _distinct_short

SEMEVAL = ["Other", "Entity-Destination(e1,e2)", "Entity-Origin(e1,e2)", "Content-Container(e2,e1)",
           "Component-Whole(e2,e1)"]


def test_labels_elided_only_as_far_as_they_stay_distinct():
    short = _distinct_short(SEMEVAL, 12)
    assert len(set(short)) == len(SEMEVAL) and short[0] == "Other"
    assert all(len(s) <= len(lab) + 2 for s, lab in zip(short, SEMEVAL))
    assert _distinct_short(SEMEVAL, 26) == SEMEVAL                     # they fit in full
    assert _distinct_short(["a" * 40 + "x", "a" * 40 + "y"], 10) != ["a" * 40 + "x", "a" * 40 + "y"]
    assert len(set(_distinct_short(["a" * 40 + "x", "a" * 40 + "y"], 10))) == 2
    assert _distinct_short(["same", "same"], 2) == ["same", "same"]      # short ones stay whole
