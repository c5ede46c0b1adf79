"""Task heads: forward(states, batch) -> output, loss(output, batch), metrics(output, batch)."""
from .classify import ClassificationHead

HEADS = {"classify": ClassificationHead}

__all__ = ["HEADS", "ClassificationHead"]
