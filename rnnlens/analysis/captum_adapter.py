"""NGramAttribution as a captum `Attribution`, so that captum's metrics take it like any of
captum's own methods.

    from captum.metrics import infidelity, sensitivity_max

    explainer = NGramAttributionCaptum(model)
    attr = explainer.attribute(tokens, target=1)                 # [B,T], like the inputs
    sens = sensitivity_max(explainer.attribute, tokens, perturb_func=swap_tokens, target=1)

The token scores are rnnlens.analysis.attribution.NGramAttribution's `tokens` (each n-gram
credited to the token it starts at) or, with shared=True, its `shared()` split (each n-gram
spread evenly over its tokens). They explain the target's output itself (a class's logit, or
a single score as it is), and add up to it less the offset and the first-order remainder.

For captum.metrics.infidelity the inputs captum perturbs must have the attributions' shape
[B,T]; token ids cannot be perturbed additively, so perturb a gate per token that scales its
embedding (rnnlens.analysis.faithfulness_metrics.token_infidelity does this for any [B,T]
scores), or, for a model whose pad embedding is zero, replace dropped ids by the pad id and
return the dropped tokens' indicator as the perturbation.
"""
from __future__ import annotations

import torch
from captum.attr import Attribution
from torch import nn

from .attribution import NGramAttribution


class NGramAttributionCaptum(Attribution):
    """captum Attribution over token ids whose attributions are NGramAttribution's token scores.

    forward_func: an rnnlens RNNModel, or an nn.Module that runs one torch.nn.RNN/GRU/LSTM
                  and returns scores [B,C] or [B] (what NGramAttribution takes).
    rnn:          the recurrent module to decompose, when the model holds several.
    shared:       split each n-gram evenly over its tokens instead of crediting its start.
    """

    def __init__(self, forward_func: nn.Module, rnn: nn.Module | None = None, shared: bool = False):
        super().__init__(forward_func)
        self.ngram = NGramAttribution(forward_func, rnn=rnn)
        self.shared = shared

    def attribute(self, inputs, target=None, additional_forward_args=None):
        """inputs: token ids [B,T] (for an RNNModel id 0 is padding), or a tuple whose first
        tensor is the ids (a plain module's further inputs after it, as captum's metrics pass
        them); target: class index (int or [B]) or None for the predicted class;
        additional_forward_args: passed to a plain module's forward after the inputs.
        Returns the token attributions [B,T] (0 at pads), detached, in the model's dtype; for
        tuple inputs a tuple like them, zeros for every input after the ids."""
        if isinstance(additional_forward_args, tuple) and not additional_forward_args:
            additional_forward_args = None
        elif additional_forward_args is not None and not isinstance(additional_forward_args, tuple):
            additional_forward_args = (additional_forward_args,)
        single = isinstance(inputs, tuple) and len(inputs) == 1
        attr = self.ngram.attribute(inputs[0] if single else inputs, target=target,
                                    additional_forward_args=additional_forward_args)
        scores = ((attr.shared() if self.shared else attr.tokens) * attr.mask.to(attr.tokens.dtype)).detach()
        if not isinstance(inputs, tuple):
            return scores
        return (scores, *(torch.zeros_like(x, dtype=scores.dtype) for x in inputs[1:]))

    def has_convergence_delta(self) -> bool:
        """False: the remainder NGramAttribution reports is not captum's convergence delta
        (which compares against a baseline input); read it from NGramAttribution itself."""
        return False
