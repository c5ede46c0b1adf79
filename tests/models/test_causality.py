"""Next-symbol models (lm, dyck, crossserial) predict x_{t+1} from x_1..x_t: changing the
tokens after t must leave every output at t and before unchanged. Checked for every
registered cell, every memory-network option and the other model options, in float64 and
eval mode; and every configuration that would read later tokens is refused by the config
validation, before any data is read, with a line naming the field."""
import dataclasses

import pytest
import torch
from tests.support import max_diff

from rnnlens.cells import CELLS
from rnnlens.data.batching import Batch
from rnnlens.encoder import build_encoder
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import NEXT_TOKEN_TASKS, Config, ModelConfig

V, T = 14, 12
LENGTHS = [12, 9, 5]                  # right-padded rows: later tokens are changed within each row
SMALL = {"embedding_dim": 5, "hidden_size": 4}     # hidden 4 = 2 x 2, as the mm cell needs
MEMORY = {"cell": "lstm", "memory_size": 3}         # a window shorter than the rows: it slides
# Each task's data section as a user would write it (validation reads no files).
TASK_DATA = {"lm": [{"corpus": "ptb"}, {"corpus": "wikitext2"}, {"task": "lm", "corpus": "ptb"},
                    {"corpus": "ptb", "sentence_level": True}],
             "dyck": [{"corpus": "dyck"}, {"task": "dyck"}],
             "crossserial": [{"corpus": "crossserial"}, {"task": "crossserial"}]}
LABELS = {"lm": None, "dyck": ["(", "[", ")", "]"], "crossserial": ["a", "b", "c", "d", "</s>"]}


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LENGTHS)
    mask = torch.arange(T)[None] < lengths[:, None]
    tokens = torch.randint(2, V, (len(LENGTHS), T), generator=g) * mask
    return Batch(tokens, mask, lengths, torch.zeros_like(tokens))


def changed_after(b: Batch, t: int, seed: int, only: int | None = None) -> Batch:
    """b with new real tokens at every position after t (or at position `only`)."""
    g = torch.Generator().manual_seed(1000 + seed)
    tokens = b.tokens.clone()
    pos = torch.arange(T)[None].expand_as(tokens)
    where = b.mask & ((pos > t) if only is None else (pos == only))
    fresh = (tokens - 2 + torch.randint(1, V - 2, tokens.shape, generator=g)) % (V - 2) + 2  # never the same
    tokens[where] = fresh[where]
    return Batch(tokens, b.mask, b.lengths, b.targets)


def outputs(run, b: Batch) -> torch.Tensor:
    with torch.no_grad():
        return run(b)


def worst_leak(run, only_next: bool = False) -> float:
    """The largest change of an output at t <= s when the tokens after s change, over all s
    (only_next: of the output at s when the token at s + 1 alone changes: the word it predicts)."""
    b = batch()
    ref = outputs(run, b)
    worst = 0.0
    for s in range(T - 1):
        out = outputs(run, changed_after(b, s, s, only=s + 1 if only_next else None))
        seen = slice(s, s + 1) if only_next else slice(0, s + 1)
        worst = max(worst, max_diff(out[:, seen], ref[:, seen]))
        assert out.shape == ref.shape
    return worst


def lm(cfg: ModelConfig, task: str = "lm") -> RNNModel:
    torch.manual_seed(0)
    model = RNNModel(cfg, V, task, LABELS[task], sentence_level=cfg.memory is not None).double().eval()
    with torch.no_grad():       # biases away from zero so that every path carries a signal
        for n, p in model.named_parameters():
            if "bias" in n:
                p.uniform_(-0.5, 0.5)

    def run(b):
        model.reset_state()     # a stream LM would carry the state from the batch before
        return model(b)
    return run


def accepted(data: dict, model: dict) -> Config:
    return Config.from_dict({"data": data, "model": {**SMALL, **model}})


def assert_causal(run) -> None:
    assert worst_leak(run) <= 1e-12


# --- every registered cell, as a language model and as a next-symbol model ----------------

@pytest.mark.parametrize("name", list(CELLS))
def test_every_cell_is_accepted_and_causal_as_a_language_model(name):
    for data in TASK_DATA["lm"][:1]:
        cfg = accepted(data, {"cell": name})
    assert_causal(lm(cfg.model))


@pytest.mark.parametrize("task", ["dyck", "crossserial"])
@pytest.mark.parametrize("name", list(CELLS))
def test_every_cell_is_causal_on_the_formal_next_symbol_tasks(name, task):
    cfg = accepted(TASK_DATA[task][0], {"cell": name})
    assert_causal(lm(cfg.model, task))


# --- model options -------------------------------------------------------------------------

OPTIONS = [
    {"cell": "gru", "layers": 2, "layer_dropout": 0.3, "embedding_dropout": 0.2, "dropout": 0.1},
    {"cell": "lstm", "layers": 3, "recurrent_dropout": 0.3, "forget_bias": 1.0, "init_range": 0.1},
    {"cell": "gru", "tie_weights": True, "embedding_dim": 4},
    {"cell": "elman", "tie_weights": True, "embedding_dim": 6},           # tied through a projection
    {"cell": "lstm", "adaptive_softmax": [5]},                            # the output is the states
    {"cell": "gru", "spectral_norm": True},
    {"cell": "mvma-g", "clamp": 0.5},
    {"cell": "va-w", "window": 3},                                        # rows longer than the window
    {"cell": "urn", "truncation": 1, "word_dropout": "matrix", "recurrent_dropout": 0.2},
    {"cell": "rrnn-b", "pooling": "mean", "output_bias": True, "mlp_hidden": 3},   # sentence-head options
]


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_model_options_keep_a_language_model_causal(option):
    assert_causal(lm(accepted({"corpus": "ptb"}, option).model))


def test_chunked_training_forward_is_causal():
    """model.checkpoint_chunk changes the training forward only: train mode, dropout 0."""
    cfg = accepted({"corpus": "ptb"}, {"cell": "gru", "checkpoint_chunk": 4}).model
    model = RNNModel(cfg, V, "lm").double().train()

    def run(b):
        model.reset_state()
        with torch.enable_grad():
            return model(b).detach()
    assert_causal(run)


# --- recurrent memory networks -------------------------------------------------------------

MEMORY_OPTIONS = [{"memory": kind, "memory_temporal": temporal, "memory_composition": comp, **extra}
                  for kind in ("rm", "rmr") for temporal in (False, True) for comp in ("linear", "gated")
                  for extra in ({}, {"layers": 2, "layer_dropout": 0.2, "recurrent_dropout": 0.2})]
MEMORY_OPTIONS += [{"memory": "rmr", "cell": "gru", "memory_size": 1},
                   {"memory": "rm", "memory_size": 15}]                  # a window longer than the rows


@pytest.mark.parametrize("option", MEMORY_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_memory_networks_are_causal(option):
    cfg = accepted({"corpus": "ptb", "sentence_level": True}, {**MEMORY, **option})
    assert_causal(lm(cfg.model))


def test_the_bidirectional_block_reads_later_words_but_never_the_word_it_predicts():
    """The completion model (rm + memory_bidirectional) is accepted: at t it reads x_{t+2}..,
    by design, and never x_{t+1}, whatever the other memory options."""
    for temporal in (False, True):
        for comp in ("linear", "gated"):
            cfg = accepted({"corpus": "ptb", "sentence_level": True},
                           {**MEMORY, "memory": "rm", "memory_bidirectional": True, "layers": 2,
                            "memory_temporal": temporal, "memory_composition": comp})
            run = lm(cfg.model)
            assert worst_leak(run, only_next=True) <= 1e-12
            assert worst_leak(run) > 1e-6          # what makes it a sentence scorer, not an LM


# --- configurations that read later tokens -------------------------------------------------

# (model section, the field the refusal names)
FUTURE = [({"bidirectional": True}, "model.bidirectional"),
          ({"bidirectional": True, "cell": "lstm", "layers": 2}, "model.bidirectional"),
          ({"cell": "transformer"}, "model.cell 'transformer'")]
FUTURE_MEMORY = [({"memory": "rmr", "memory_bidirectional": True, **extra}, "model.memory_bidirectional")
                 for extra in ({}, {"memory_temporal": True, "memory_composition": "linear"}, {"layers": 2})]


@pytest.mark.parametrize("task", NEXT_TOKEN_TASKS)
@pytest.mark.parametrize("model,field", FUTURE, ids=lambda x: str(x))
def test_future_seeing_encoders_are_refused_by_validation(task, model, field):
    for data in TASK_DATA[task]:
        if data.get("sentence_level"):
            continue
        with pytest.raises(RnnlensError) as e:
            accepted(data, model)
        msg = str(e.value)
        print(msg)
        assert field in msg and f"the {task} task" in msg and "\n" not in msg
    accepted({}, model)                     # a sentence classifier may read the whole sentence


@pytest.mark.parametrize("model,field", FUTURE_MEMORY, ids=lambda x: str(x))
def test_rmr_with_a_bidirectional_block_is_refused_by_validation(model, field):
    with pytest.raises(RnnlensError, match=field) as e:
        accepted({"corpus": "ptb", "sentence_level": True}, {**MEMORY, **model})
    assert "word it predicts" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("model,field", FUTURE + FUTURE_MEMORY, ids=lambda x: str(x))
def test_every_refused_configuration_does_read_the_word_it_predicts(model, field):
    """The refusals are not over-cautious: each encoder's output at t moves with x_{t+1}."""
    cfg = ModelConfig(**{**SMALL, **({"cell": "lstm", "memory_size": 3} if "memory" in model else {}), **model})
    torch.manual_seed(0)
    encoder = build_encoder(cfg, V).double().eval()
    leak = worst_leak(lambda b: encoder(b.tokens, b.mask)[0], only_next=True)
    assert leak > 1e-8


def test_the_model_refuses_them_too():
    """A model built from a ModelConfig without Config's validation refuses them as well."""
    for model, field in FUTURE + FUTURE_MEMORY:
        cfg = ModelConfig(**{**SMALL, **({"cell": "lstm"} if "memory" in model else {}), **model})
        for task in NEXT_TOKEN_TASKS:
            with pytest.raises(RnnlensError, match=field):
                RNNModel(cfg, V, task, LABELS[task])


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(ModelConfig) if f.type in (bool, "bool")])
def test_every_switch_the_validation_accepts_keeps_a_language_model_causal(name):
    """Each boolean model option turned on, on a plain LM and on a memory network: either the
    validation refuses it, or the model is causal (the bidirectional block: never the word
    it predicts). A new switch is covered without editing this test."""
    bases = [({"corpus": "ptb"}, {"cell": "gru"}),
             ({"corpus": "ptb", "sentence_level": True}, {**MEMORY, "memory": "rm"}),
             ({"corpus": "ptb", "sentence_level": True}, {**MEMORY, "memory": "rmr"})]
    for data, model in bases:
        try:
            cfg = accepted(data, {**model, name: True})
        except RnnlensError:
            continue
        run = lm(cfg.model)
        if cfg.model.memory == "rm" and cfg.model.memory_bidirectional:
            assert worst_leak(run, only_next=True) <= 1e-12
        else:
            assert_causal(run)


def test_train_command_refuses_with_one_line_before_reading_data(tmp_path, capsys):
    from rnnlens.cli import main

    code = main(["train", "--out", str(tmp_path / "m"), "--data", "ptb", "--data-dir", str(tmp_path / "nowhere"),
                 "--sentence-level", "true", "--cell", "lstm", "--memory", "rmr", "--memory-bidirectional", "true"])
    err = capsys.readouterr().err.strip()
    print(err)
    assert code == 2 and "model.memory_bidirectional" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "m").exists()
