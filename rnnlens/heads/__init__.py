"""Task heads: forward(states, batch) -> output, loss(output, batch), metrics(output, batch).
Which head a task uses is decided in rnnlens.models.build_head."""
from .classify import ClassificationHead, RegressionHead, RelationHead
from .lm import LMHead
from .tagger import TaggerHead

__all__ = ["ClassificationHead", "RegressionHead", "RelationHead", "LMHead", "TaggerHead"]
