"""Sentence completion (analysis/completion.py): the choice logic on a hand-set bigram
scorer, and a memory network whose hand-set output weights make one candidate clearly most
probable (unidirectional and with a bidirectional block), against hand-computed scores."""
import math

import pytest
import torch

from rnnlens.analysis.completion import choose, complete, complete_with_model, format_result
from rnnlens.data.batching import EOS
from rnnlens.data.msr import read_msr_completion
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig
from tests.support import FIXTURES as FIX


class Bigram:
    """Scores a sentence as sum_i log p(w_i | w_{i-1}) from a hand-set table; pairs not in
    the table get log 1e-3. It also records what it was asked, to check the batching."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def logp(self, prev, w):
        return math.log(self.table.get((prev, w), 1e-3))

    def __call__(self, sentences):
        self.calls.append(len(sentences))
        out = []
        for s in sentences:
            seq = [EOS, *s, EOS]
            out.append(sum(self.logp(a, b) for a, b in zip(seq, seq[1:])))
        return torch.tensor(out, dtype=torch.float64)


def questions():
    return read_msr_completion(FIX / "msr_questions.csv", FIX / "msr_answers.csv")


def test_choose_first_on_ties():
    s = torch.tensor([[-3.0, -1.0, -2.0, -1.0, -5.0], [-1.0, -1.0, -1.0, -1.0, -1.0]])
    assert choose(s) == [1, 0]
    with pytest.raises(RnnlensError):
        choose(torch.zeros(0, 5))


def test_complete_with_a_hand_set_bigram_scorer():
    # Q3 "the dog ___ at the stranger .": "dog barked" 0.5 and "barked at" 0.5 make a) win;
    # "dog slept" 0.9 alone is not enough: slept -> at falls back to 1e-3.
    # Q1: "are residing" 0.2, "residing alone" 0.5 make c) win. Q2: nothing set, all five
    # filled sentences tie (every pair 1e-3, the same length) -> a), which is right.
    scorer = Bigram({("dog", "barked"): 0.5, ("barked", "at"): 0.5, ("dog", "slept"): 0.9,
                     ("are", "residing"): 0.2, ("residing", "alone"): 0.5, ("are", "walking"): 0.3})
    res = complete(scorer, questions())
    assert scorer.calls == [15]                              # one call, all 3 x 5 sentences
    assert res.choices == [2, 0, 0] and res.answers == [2, 0, 0]
    assert res.accuracy == 1.0 and res.correct == 3 and res.answered == 3
    # Q3 by hand: 7 bigrams of the filled sentence + <eos> at both ends = 8 terms
    base = 6 * math.log(1e-3)
    assert res.scores[2, 0].item() == pytest.approx(base + 2 * math.log(0.5))
    assert res.scores[2, 1].item() == pytest.approx(base + math.log(0.9) + math.log(1e-3))
    d = res.to_dict(questions())
    assert d["accuracy"] == 1.0 and d["choices"][2]["chosen_word"] == "barked" and d["choices"][0]["choice"] == "c"
    assert "accuracy 1.0000 (3/3 questions)" in format_result(res)


def test_accuracy_counts_wrong_choices_and_needs_answers():
    scorer = Bigram({("dog", "sang"): 0.9, ("sang", "at"): 0.9})          # Q3 -> e), wrong
    res = complete(scorer, questions())
    assert res.choices[2] == 4 and res.accuracy == pytest.approx(1 / 3)    # Q1, Q2: all tie -> a)
    qs = read_msr_completion(FIX / "msr_questions.machine.txt")
    res = complete(scorer, qs)
    assert res.accuracy is None and res.answers == [None] * 3
    assert "no gold answers" in format_result(res, qs, show=3)
    assert "3: e) sang" in format_result(res, qs, show=3)
    with pytest.raises(RnnlensError, match="no questions"):
        complete(scorer, [])


def hand_set_model(bidirectional=False):
    """A tiny RM model whose output layer ignores the state (weights 0) and whose bias gives
    every word a fixed log-probability: a sentence's score is then the sum of log-softmax(bias)
    over its words and <eos>, whatever the LSTM and the memory block compute."""
    words = sorted({w for q in questions() for s in q.sentences for w in s})
    vocab = Vocab([EOS, *words])
    cfg = ModelConfig(cell="lstm", embedding_dim=4, hidden_size=4, memory="rm", memory_size=3,
                      memory_temporal=True, memory_bidirectional=bidirectional)
    model = RNNModel(cfg, len(vocab), "lm", sentence_level=True).double().eval()
    bias = torch.zeros(len(vocab), dtype=torch.float64)
    for w, b in {"residing": 3.0, "bedroom": 2.0, "barked": 4.0, "walking": 2.5}.items():
        bias[vocab.stoi[w]] = b
    with torch.no_grad():
        model.head.out.weight.zero_()
        model.head.out.bias.copy_(bias)
    return model, vocab, torch.log_softmax(bias, 0)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_completion_picks_the_most_probable_candidate_of_a_hand_set_model(bidirectional):
    model, vocab, logp = hand_set_model(bidirectional)
    qs = questions()
    res = complete_with_model(model, vocab, qs, batch_size=4)
    assert res.choices == [2, 0, 0] and res.accuracy == 1.0
    for q, row in zip(qs, res.scores):
        want = [sum(logp[vocab.stoi[w]].item() for w in s) + logp[vocab.stoi[EOS]].item() for s in q.sentences]
        assert row.tolist() == pytest.approx(want, abs=1e-10)
    assert res.oov == [0, 0, 0]


def test_completion_counts_unknown_candidates_and_needs_an_lm():
    model, vocab, _ = hand_set_model()
    small = Vocab([w for w in vocab.itos[2:] if w not in ("seaside", "kitchen")])
    model2 = RNNModel(model.cfg, len(small), "lm", sentence_level=True).double().eval()
    res = complete_with_model(model2, small, questions())
    assert res.oov == [0, 2, 0] and "1 question(s) have candidates outside" in format_result(res)
    clf = RNNModel(ModelConfig(cell="gru", embedding_dim=4, hidden_size=4), len(vocab), "classify", ["a", "b"])
    with pytest.raises(RnnlensError, match="needs a language model"):
        complete_with_model(clf, vocab, questions())


# --- the command line ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def lm_models(tmp_path_factory):
    from tests.support import train_tiny, write_tiny_corpus

    root = write_tiny_corpus(tmp_path_factory.mktemp("corpus"))
    models = tmp_path_factory.mktemp("models")
    return {"rm": train_tiny(root, models / "rm", "--memory", "rm", "--memory-size", "3"),
            "rm-bi": train_tiny(root, models / "rm-bi", "--memory", "rm", "--memory-size", "3",
                                "--memory-bidirectional", "true"),
            "lstm": train_tiny(root, models / "lstm")}


QUESTIONS = ('id,question,a),b),c),d),e)\n'
             '1,"The dog _____ the cat.",sees,big,the,red,bird\n'
             '2,"The _____ cat likes the bird.",big,sees,likes,the,chases\n'
             '3,"The old man _____ the woman.",hears,man,old,the,cat\n')


@pytest.mark.parametrize("kind", ["rm", "rm-bi", "lstm"])
def test_complete_command_end_to_end(lm_models, tmp_path, capsys, kind):
    import json

    from rnnlens.analysis.lm import sentence_logprobs
    from rnnlens.data.tokenize import Tokenizer
    from rnnlens.train.checkpoint import load_checkpoint
    from tests.support import run_cli as run

    q = tmp_path / "q.csv"
    q.write_text(QUESTIONS)
    a = tmp_path / "a.csv"
    a.write_text("id,answer\n1,a\n2,a\n3,a\n")
    code, out, err = run(capsys, "complete", "--model", lm_models[kind], "--questions", q, "--answers", a,
                         "--show", "3")
    assert code == 0 and err == ""
    assert "accuracy" in out and "/3 questions)" in out and "(gold a)" in out
    assert ("memory block: none" in out) == (kind == "lstm") and ("bidirectional" in out) == (kind == "rm-bi")
    code, out, _ = run(capsys, "complete", "--model", lm_models[kind], "--questions", q, "--answers", a, "--json")
    d = json.loads(out)
    # the choices are the argmax of the model's sentence log-probabilities
    model, cfg, vocab, meta = load_checkpoint(lm_models[kind])
    qs = read_msr_completion(q, a, Tokenizer(lowercase=meta["tokenizer"]["lowercase"]))   # punctuation split
    assert qs[0].sentences[0] == ["the", "dog", "sees", "the", "cat", "."]
    for row, question in zip(d["choices"], qs):
        lp = sentence_logprobs(model, vocab, question.sentences)
        assert row["choice"] == "abcde"[int(lp.argmax())] and row["scores"] == pytest.approx(lp.tolist())
    assert d["questions"] == 3 and d["answered"] == 3
    assert d["accuracy"] == pytest.approx(sum(r["correct"] for r in d["choices"]) / 3)
    code, out, _ = run(capsys, "complete", "--model", lm_models[kind], "--questions", q)
    assert code == 0 and "no gold answers" in out


def test_complete_command_errors(lm_models, tmp_path, capsys):
    from tests.support import assert_clean_error, run_cli as run

    bad = tmp_path / "q.txt"
    bad.write_text("1a) x [a] y\n1b) x b y\n")
    rm = lm_models["rm"]
    assert_clean_error(*run(capsys, "complete", "--model", rm, "--questions", bad)[::2], f"{bad}:2:")
    few = tmp_path / "few.csv"
    few.write_text("id,answer\n1,c\n")
    assert_clean_error(*run(capsys, "complete", "--model", rm, "--questions", FIX / "msr_questions.csv",
                            "--answers", few)[::2], "no answer for 2 question")
    assert_clean_error(*run(capsys, "complete", "--model", rm, "--questions", tmp_path / "none.csv")[::2],
                       "does not exist")
    assert_clean_error(*run(capsys, "complete", "--model", rm, "--questions", bad, "--batch-size", "0")[::2],
                       "--batch-size must be >= 1")


def test_complete_command_refuses_a_classifier(tmp_path, capsys):
    from rnnlens.cli import main
    from tests.support import TINY, assert_clean_error, run_cli as run

    clf = tmp_path / "clf"
    assert main(["train", "--out", str(clf), *TINY]) == 0
    capsys.readouterr()
    assert_clean_error(*run(capsys, "complete", "--model", clf, "--questions", FIX / "msr_questions.csv")[::2],
                       "needs a language model")


def test_scores_equal_to_the_last_bits_are_ties_and_the_first_wins():
    """Candidates the model cannot tell apart (all unknown words) score the same up to float32
    noise that depends on the batch; the choice must not depend on that noise."""
    s = torch.tensor([[-40.0, -40.0 + 1e-6, -40.0 - 1e-6, -41.0],
                      [-40.0, -39.0, -39.0 + 1e-7, -60.0],
                      [float("-inf"), -3.0, -2.0, -2.0]], dtype=torch.float64)
    assert choose(s) == [0, 1, 2]
    assert choose(torch.tensor([[-1.0, -1.0 + 1e-3]], dtype=torch.float64)) == [1]     # a real difference
