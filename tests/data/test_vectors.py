"""`rnnlens vectors`: word2vec (gensim) on a corpus's text -> a GloVe-format file that
--embeddings-file loads."""
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support import assert_clean_error, run_cli as run

from rnnlens.data.vectors import load_vectors
from rnnlens.data.vocab import Vocab
from rnnlens.data.word2vec import (MAX_SENTENCE, WordVectors, _streams_to_sentences, corpus_sentences,
                                   train_word2vec, write_vectors)
from rnnlens.errors import RnnlensError

# Two topics that never meet in a sentence: words of one topic co-occur, words of
# different topics never do. "the" and "and" are everywhere.
PETS = ["cat", "dog", "mouse", "parrot", "hamster", "rabbit"]
CARS = ["car", "truck", "bus", "engine", "wheel", "garage"]


def topic_corpus(n: int = 600, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    sents = []
    for i in range(n):
        topic = PETS if i % 2 else CARS
        words = [rng.choice(topic) for _ in range(6)]
        sents.append(["the", *words[:3], "and", *words[3:]])
    return sents


def subj_dir(tmp_path, lines: int = 120):
    """A tiny data folder in the shared layout: subj/subj.all, `<label> <sentence>` lines."""
    rng = random.Random(1)
    rows = []
    for i in range(lines):
        topic, label = (PETS, 0) if i % 2 else (CARS, 1)
        rows.append(f"{label} The " + " ".join(rng.choice(topic) for _ in range(5)) + ", AND more.")
    d = tmp_path / "data"
    (d / "subj").mkdir(parents=True)
    (d / "subj" / "subj.all").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return d


@pytest.fixture
def gensim():
    return pytest.importorskip("gensim")


def cos(a, b) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_training_is_deterministic_with_a_seed_and_one_thread(gensim):
    sents = topic_corpus(200)
    a = train_word2vec(sents, dim=16, epochs=3, min_count=1, seed=3, threads=1)
    b = train_word2vec(sents, dim=16, epochs=3, min_count=1, seed=3, threads=1)
    c = train_word2vec(sents, dim=16, epochs=3, min_count=1, seed=4, threads=1)
    assert a.words == b.words and np.array_equal(a.vectors, b.vectors)
    assert a.words == c.words and not np.allclose(a.vectors, c.vectors)
    assert a.dim == 16 and a.vectors.shape == (len(a.words), 16)
    # most frequent first, counts as in the corpus
    assert set(a.words[:2]) == {"the", "and"} and a.counts[:2] == [200, 200] and a.counts == sorted(a.counts, reverse=True)


def test_cooccurring_words_end_up_closer(gensim):
    wv = train_word2vec(topic_corpus(), dim=20, epochs=15, min_count=1, window=3, seed=0, threads=1)
    vec = dict(zip(wv.words, wv.vectors))
    within = [cos(vec[a], vec[b]) for group in (PETS, CARS) for a in group for b in group if a < b]
    across = [cos(vec[a], vec[b]) for a in PETS for b in CARS]
    print(f"mean cosine within {np.mean(within):.3f}, across {np.mean(across):.3f}")
    assert np.mean(within) > np.mean(across) + 0.3 and min(within) > max(across)
    # and for every word, its nearest other topic word is of its own topic
    for w in PETS + CARS:
        others = [o for o in PETS + CARS if o != w]
        best = max(others, key=lambda o: cos(vec[w], vec[o]))
        assert (best in PETS) == (w in PETS), (w, best)


def test_written_file_loads_with_its_dimension_and_vocabulary(gensim, tmp_path):
    wv = train_word2vec(topic_corpus(200), dim=12, epochs=2, min_count=1, seed=0, threads=1)
    out = write_vectors(wv, tmp_path / "v.txt")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(wv.words) and all(len(ln.split(" ")) == 13 for ln in lines)
    vocab = Vocab(["the", "cat", "truck", "unseen"])
    vec, found = load_vectors(out, vocab, 12)
    assert found == 3
    for w in ("the", "cat", "truck"):
        want = torch.tensor(wv.vectors[wv.words.index(w)], dtype=torch.float32)
        assert (vec[vocab.stoi[w]] - want).abs().max() < 1e-5
    assert vec[vocab.stoi["unseen"]].abs().sum() == 0
    with pytest.raises(RnnlensError, match="expected 13 values"):
        load_vectors(out, vocab, 13)
    assert not [p for p in tmp_path.iterdir() if p.name != "v.txt"]  # no temporary file left


def test_write_is_atomic_refuses_to_overwrite_and_can_normalise_and_gzip(tmp_path):
    wv = WordVectors(["a", "b"], np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32), [2, 1])
    p = tmp_path / "v.txt"
    p.write_text("old\n")
    with pytest.raises(RnnlensError, match="exists; use --force"):
        write_vectors(wv, p)
    assert p.read_text() == "old\n"
    write_vectors(wv, p, force=True, normalize=True)
    assert p.read_text().splitlines() == ["a 0.6 0.8", "b 0 0"]   # a zero vector stays zero
    write_vectors(wv, p, force=True, std=1.0)        # one factor for all: [3, 4, 0, 0] has std 2.0463
    got = np.array([float(x) for ln in p.read_text().splitlines() for x in ln.split(" ")[1:]])
    assert abs(got.std() - 1.0) < 1e-5 and abs(got[1] / got[0] - 4 / 3) < 1e-5 and got[2:].tolist() == [0, 0]
    with pytest.raises(RnnlensError, match="std must be > 0"):
        write_vectors(wv, p, force=True, std=0.0)
    gz = write_vectors(wv, tmp_path / "v.txt.gz")
    vec, found = load_vectors(gz, Vocab(["a"]), 2)
    assert found == 1 and vec[2].tolist() == [3.0, 4.0]
    with pytest.raises(RnnlensError, match="does not exist"):
        write_vectors(wv, tmp_path / "no" / "v.txt")
    with pytest.raises(RnnlensError, match="whitespace"):
        write_vectors(WordVectors(["a b"], np.zeros((1, 2)), [1]), tmp_path / "w.txt")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["v.txt", "v.txt.gz"]


def test_lm_streams_are_cut_at_eos_and_long_sentences_are_split():
    toks = ["a", "b", "<eos>", "c", "<eos>", "d"]
    assert list(_streams_to_sentences(toks)) == [["a", "b", "<eos>"], ["c", "<eos>"], ["d"]]
    assert MAX_SENTENCE == 10_000   # gensim's limit: longer sentences would be cut silently


def test_corpus_sentences_tokenise_like_training(tmp_path):
    from rnnlens.data.datasets import load_dataset
    d = subj_dir(tmp_path, lines=20)
    sents, notes = corpus_sentences("subj", d)
    ds = load_dataset("subj", d)
    every = sorted(tuple(ex.tokens) for split in ds.splits.values() for ex in split)
    assert sorted(map(tuple, sents)) == every          # all splits, as training sees them
    assert sents[0][:2] == ["the", sents[0][1]] and "," in sents[0]   # lowercased, punctuation split
    assert "20 sentences" in notes[-1]


def test_corpus_sentences_of_sst_are_root_sentences_and_lm_is_cut(shared_data):
    sents, notes = corpus_sentences("sst2", shared_data)
    assert len(sents) == 8544 + 1101 + 2210 and "root sentences" in notes[0]
    sents, _ = corpus_sentences("ptb", shared_data)
    assert len(sents) == 42068 + 3370 + 3761 and all(s[-1] == "<eos>" for s in sents)


def test_cli_writes_vectors_that_initialise_a_model(gensim, tmp_path, capsys):
    d = subj_dir(tmp_path)
    out = tmp_path / "vec.txt"
    args = ["vectors", "--corpus", "subj", "--data-dir", d, "--out", out, "--dim", 8, "--epochs", 2,
            "--min-count", 2, "--seed", 0, "--threads", 1]
    code, stdout, err = run(capsys, *args)
    assert code == 0, err
    assert "word2vec epoch 2/2" in stdout and f"vectors of 8 dims to {out}" in stdout
    first = out.read_bytes()
    code, _, err = run(capsys, *args)
    assert_clean_error(code, err, "exists; use --force")
    code, _, err = run(capsys, *args, "--force", "--quiet")
    assert code == 0 and out.read_bytes() == first     # same seed, one thread: the same file
    vectors = {ln.split(" ")[0]: [float(x) for x in ln.split(" ")[1:]] for ln in first.decode().splitlines()}
    assert {"the", "cat", "truck", ",", "and"} <= set(vectors) and all(len(v) == 8 for v in vectors.values())

    model_dir = tmp_path / "m"
    code, stdout, err = run(capsys, "train", "--out", model_dir, "--data", "subj", "--data-dir", d,
                            "--cell", "rrnn-f", "--embedding-dim", 8, "--hidden-size", 8, "--epochs", 1,
                            "--embeddings-file", out, "--freeze-embeddings", "true", "--quiet")
    assert code == 0, err
    assert f"pretrained vectors for {len(vectors)} of" in stdout
    from rnnlens.train.checkpoint import load_checkpoint
    model, _, vocab, _ = load_checkpoint(model_dir)
    for w in ("cat", "truck", ","):
        got = model.embedding.weight[vocab.stoi[w]]
        assert (got - torch.tensor(vectors[w])).abs().max() < 1e-6


@pytest.mark.parametrize("extra, needles", [
    (["--corpus", "nope"], ["unknown corpus 'nope'", "imdb"]),
    (["--corpus", "dyck"], ["unknown corpus 'dyck'"]),
    (["--data-dir", "/no/such/dir"], ["data directory /no/such/dir does not exist"]),
    (["--out", "/no/such/dir/v.txt"], ["folder /no/such/dir does not exist"]),
    (["--epochs", "0"], ["epochs must be >= 1"]),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, needles):
    d = subj_dir(tmp_path, lines=10)
    base = {"--corpus": "subj", "--data-dir": str(d), "--out": str(tmp_path / "v.txt")}
    flags = []
    for k, v in base.items():
        if k not in extra:
            flags += [k, v]
    if "--epochs" in extra:
        pytest.importorskip("gensim")
    code, _, err = run(capsys, "vectors", *flags, *extra)
    assert_clean_error(code, err, *needles)
    assert not (tmp_path / "v.txt").exists()


def test_cli_out_is_a_folder_or_unwritable(tmp_path, capsys):
    d = subj_dir(tmp_path, lines=10)
    code, _, err = run(capsys, "vectors", "--corpus", "subj", "--data-dir", d, "--out", tmp_path)
    assert_clean_error(code, err, "is a folder")


def test_cli_without_gensim_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    d = subj_dir(tmp_path, lines=10)
    monkeypatch.setitem(sys.modules, "gensim", None)     # `import gensim` now raises ImportError
    code, _, err = run(capsys, "vectors", "--corpus", "subj", "--data-dir", d, "--out", tmp_path / "v.txt")
    assert_clean_error(code, err, "needs gensim", "pip install")
    assert not (tmp_path / "v.txt").exists()


@pytest.mark.parametrize("frozen", [True, False])
def test_embedding_norm_puts_every_words_vector_at_that_length(tmp_path, frozen):
    """model.embedding_norm: the file's vectors and the random rows of the words it lacks
    alike are rescaled to the length given (unit, as the rational paper's GloVe vectors),
    directions kept; padding stays zero; frozen embeddings keep it through training."""
    import torch

    from rnnlens.config import Config
    from rnnlens.data.vocab import Vocab
    from rnnlens.train.run import build_model

    vocab = Vocab(["good", "bad", "film", "missing"])
    path = tmp_path / "v.txt"
    path.write_text("good 3 4 0\nbad 0 0 2\nfilm 1 1 1\n")
    cfg = Config.from_dict({"model": {"cell": "gru", "embedding_dim": 3, "hidden_size": 4,
                                      "embeddings_file": str(path), "embedding_norm": 1.0,
                                      "freeze_embeddings": frozen}})
    model = build_model(cfg, vocab, "classify", ["neg", "pos"])
    w = model.embedding.weight.detach()
    ids = vocab.encode(["good", "bad", "film", "missing"])
    assert torch.allclose(w[ids].norm(dim=1), torch.ones(4))
    assert torch.allclose(w[ids[0]], torch.tensor([0.6, 0.8, 0.0]))
    assert torch.allclose(w[ids[2]], torch.full((3,), 3 ** -0.5))
    assert torch.equal(w[0], torch.zeros(3))                       # padding
    assert model.embedding.weight.requires_grad is not frozen
    with pytest.raises(Exception, match="embedding_norm"):
        Config.from_dict({"model": {"embedding_norm": 0.0}})


def test_cli_never_writes_over_the_corpus_it_reads(tmp_path, capsys):
    d = subj_dir(tmp_path, lines=10)
    read = next(p for p in Path(d).rglob("*") if p.is_file())
    before = read.read_bytes()
    code, _, err = run(capsys, "vectors", "--corpus", "subj", "--data-dir", d, "--out", read, "--force")
    assert_clean_error(code, err, "which this command reads")
    assert read.read_bytes() == before


def test_cli_writes_through_a_pipe(gensim, tmp_path, capsys):
    import threading

    d = subj_dir(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = run(capsys, "vectors", "--corpus", "subj", "--data-dir", d, "--out", fifo, "--dim", 4,
                       "--epochs", 1, "--min-count", 2, "--threads", 1, "--quiet")
    reader.join(60)
    assert code == 0, err
    assert fifo.is_fifo() and got and got[0].decode().split("\n")[0].count(" ") == 4


def test_a_vectors_file_word_may_hold_spaces_and_values_be_spaced_twice(tmp_path):
    # GloVe 840B has words with spaces (". . ."); its numbers are read from the line's end
    p = tmp_path / "v.txt"
    p.write_text(". . . 1 2\na  3  4\nb 5 6 \n")
    vec, found = load_vectors(p, Vocab(["a", "b", "."]), 2)
    v = Vocab(["a", "b", "."])
    assert found == 2 and vec[v.stoi["a"]].tolist() == [3, 4] and vec[v.stoi["b"]].tolist() == [5, 6]
    assert vec[v.stoi["."]].tolist() == [0, 0]
    p.write_text("a 1 2 3\n")                          # a file of another dimension is still named so
    with pytest.raises(RnnlensError, match="expected 2 values after the word, found 3"):
        load_vectors(p, Vocab(["a"]), 2)
