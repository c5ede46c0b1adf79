"""`rnnlens unitary`: a URN's words and phrases read as the unitary-networks paper reads them
(Tables 11.1-11.5), on a tiny trained Dyck model and on a hand-set rotation."""
import json
import math

import pytest
import torch

from tests.support import assert_clean_error, max_diff, run_cli as run
from rnnlens.analysis.unitary import average_effect, projection, signature, word_matrices
from rnnlens.cli import main
from rnnlens.data.formal import BRACKETS
from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint

# embedding 6 = the strict upper triangle of a 4 x 4 matrix: the embedding *is* the generator
TINY = ["--task", "dyck", "--embedding-dim", "6", "--hidden-size", "4", "--train-size", "128",
        "--dev-size", "32", "--test-size", "32", "--epochs", "1", "--quiet"]
BRACKET_SYMBOLS = [s for pair in zip(*BRACKETS) for s in pair]


@pytest.fixture(scope="module")
def urn_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("urn") / "model"
    assert main(["train", "--out", str(out), "--cell", "urn", *TINY]) == 0
    return out


def test_effects_are_the_analysis_functions_of_the_word_matrices(urn_dir, capsys):
    code, out, _ = run(capsys, "unitary", "--model", urn_dir, "--json")
    assert code == 0
    res = json.loads(out)
    names = [r["name"] for r in res["items"]]
    assert names == BRACKET_SYMBOLS                   # default: Dyck's 10 brackets (Table 11.2)
    model, _, vocab, _ = load_checkpoint(urn_dir)
    Q = word_matrices(model, vocab=vocab, words=names).double()
    got = torch.tensor([r["average_effect"] for r in res["items"]], dtype=torch.float64)
    assert max_diff(got, average_effect(Q)) < 1e-9
    for r, Qi in zip(res["items"], Q):
        assert r["angles_degrees"] == pytest.approx(signature(Qi).degrees, abs=1e-9)
        assert r["angles_degrees"] == sorted(r["angles_degrees"], reverse=True)
        want = projection(Qi, model.readout_weight.detach().double(), 2)
        assert max_diff(torch.tensor(r["projection"], dtype=torch.float64), want) < 1e-5
    D = torch.tensor(res["frobenius"]["values"], dtype=torch.float64)
    assert max_diff(D, ((Q[:, None] - Q[None]) ** 2).sum((-2, -1))) < 1e-5
    sim = res["plane_similarity"]["values"]
    assert all(abs(sim[i][i] - 2) < 1e-5 for i in range(len(names)))
    # the text shows the same effects, one row per item
    code, text, _ = run(capsys, "unitary", "--model", urn_dir)
    assert code == 0
    rows = {ln.split()[0]: ln.split()[1] for ln in text.split("\n\n")[1].splitlines()[1:]}
    assert rows == {r["name"]: f"{r['average_effect']:.4f}" for r in res["items"]}
    assert "Frobenius distances" in text and "main rotation planes" in text


def test_pairs_are_close_times_open(urn_dir, capsys):
    code, out, _ = run(capsys, "unitary", "--model", urn_dir, "--pairs", "--words", "(", "( [", "--json")
    assert code == 0
    res = json.loads(out)
    assert [p["name"] for p in res["pairs"]] == ["()", "[]", "{}", "<>", "+-"]
    model, _, vocab, _ = load_checkpoint(urn_dir)
    P = model.readout_weight.detach().double()
    Qw = dict(zip(BRACKET_SYMBOLS, word_matrices(model, vocab=vocab, words=BRACKET_SYMBOLS).double()))
    for p, (o, c) in zip(res["pairs"], BRACKETS):
        Q = Qw[c] @ Qw[o]                                   # h_t = Q(x_t) h_{t-1}: open acts first
        assert p["average_effect"] == pytest.approx(float(average_effect(Q)), abs=1e-9)
        # trace and angles cannot tell Q(c)Q(o) from Q(o)Q(c); the projection can
        assert max_diff(torch.tensor(p["projection"], dtype=torch.float64), projection(Q, P, 2)) < 1e-5
    assert res["pairs_mean_effect"] == pytest.approx(sum(p["average_effect"] for p in res["pairs"]) / 5)
    phrase = res["items"][1]
    assert phrase["tokens"] == ["(", "["]
    assert max_diff(torch.tensor(phrase["projection"], dtype=torch.float64),
                    projection(Qw["["] @ Qw["("], P, 2)) < 1e-5
    code, text, _ = run(capsys, "unitary", "--model", urn_dir, "--pairs")
    section = text.split("matching pairs Q(close) Q(open)\n")[1].splitlines()
    assert [ln.split()[0] for ln in section[1:6]] == ["()", "[]", "{}", "<>", "+-"]
    assert section[6].startswith("mean average effect of the pairs")


def test_out_writes_json_and_figures(urn_dir, tmp_path, capsys):
    out = tmp_path / "u"
    code, text, _ = run(capsys, "unitary", "--model", urn_dir, "--words", "(", "()", "[ ]", "--pairs",
                        "--out", out)
    assert code == 0 and f"wrote {out}" in text
    res = json.loads((out / "unitary.json").read_text())
    assert [r["name"] for r in res["items"]] == ["(", "()", "[ ]"]
    assert [r["tokens"] for r in res["items"]] == [["("], ["(", ")"], ["[", "]"]]
    for f in ("signatures.png", "frobenius.png", "pairs.png"):
        assert (out / f).stat().st_size > 1000, f
    code, _, err = run(capsys, "unitary", "--model", urn_dir, "--out", out)
    assert_clean_error(code, err, "exists", "--force")
    assert run(capsys, "unitary", "--model", urn_dir, "--out", out, "--force")[0] == 0
    assert not (out / "pairs.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u"]              # no temporary left over


def test_errors_are_one_line(urn_dir, tmp_path, capsys):
    lstm = tmp_path / "lstm"
    assert main(["train", "--out", str(lstm), "--cell", "lstm", *TINY]) == 0
    capsys.readouterr()
    assert_clean_error(*run(capsys, "unitary", "--model", lstm)[::2], "URN", "lstm")
    assert_clean_error(*run(capsys, "unitary", "--model", urn_dir, "--words", "(", "(x")[::2],
                       "vocabulary", "x")
    assert_clean_error(*run(capsys, "unitary", "--model", urn_dir, "--words", " ")[::2], "empty")
    assert_clean_error(*run(capsys, "unitary", "--model", urn_dir, "--dims", "0")[::2], "--dims")


def test_dims_beyond_the_rank_are_capped_and_said(urn_dir, capsys):
    model, _, _, _ = load_checkpoint(urn_dir)
    rank = int(torch.linalg.matrix_rank(model.readout_weight.detach().double()))
    code, out, _ = run(capsys, "unitary", "--model", urn_dir, "--dims", "100", "--json")
    assert code == 0
    pj = json.loads(out)["projection"]
    assert pj["dims"] == rank < 100 and pj["dims_asked"] == 100
    code, text, _ = run(capsys, "unitary", "--model", urn_dir, "--dims", "100")
    assert code == 0 and f"100 dimensions asked, but the layer's weight has rank {rank}" in text
    code, text, _ = run(capsys, "unitary", "--model", urn_dir, "--dims", "1")
    assert code == 0 and "asked" not in text


def test_a_hand_set_rotation_shows_its_angles(urn_dir, tmp_path, capsys):
    """Embedding row = the triangle (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) of T, S = T - T^T:
    T[0,1] = a, T[2,3] = b turn the planes (e0, e1) by a and (e2, e3) by b."""
    model, cfg, vocab, meta = load_checkpoint(urn_dir)
    assert model.encoder.cells[0].proj is None
    a, b, c = 1.2, 0.5, 1.0
    rows = {"(": [a, 0, 0, 0, 0, b], ")": [-a, 0, 0, 0, 0, -b],       # ")" undoes "("
            "[": [c, 0, 0, 0, 0, 0.3],                                # same planes as "("
            "{": [0, c, 0, 0, 0.2, 0]}                                # (e0, e2) by c, (e1, e3) by 0.2
    with torch.no_grad():
        for w, v in rows.items():
            model.embedding.weight[vocab.stoi[w]] = torch.tensor(v)
    hand = tmp_path / "hand"
    hand.mkdir()
    save_checkpoint(hand, model, cfg, vocab, meta["labels"], meta["task"])
    code, out, _ = run(capsys, "unitary", "--model", hand, "--words", "(", "[", "{", "--pairs", "--json")
    assert code == 0
    res = json.loads(out)
    it = {r["name"]: r for r in res["items"]}
    assert it["("]["angles_degrees"] == pytest.approx([math.degrees(a), math.degrees(b)], abs=1e-4)
    assert it["{"]["angles_degrees"] == pytest.approx([math.degrees(c), math.degrees(0.2)], abs=1e-4)
    assert it["("]["average_effect"] == pytest.approx(4 * (1 - math.cos(a)) + 4 * (1 - math.cos(b)), abs=1e-5)
    sim = res["plane_similarity"]["values"]
    assert sim[0][1] == pytest.approx(2.0, abs=1e-5)          # main planes of ( and [: both (e0, e1)
    assert sim[0][2] == pytest.approx(1.0, abs=1e-5)          # (e0, e1) against (e0, e2): one shared axis
    ft = res["planes_of_first_two"]["values"]                 # Table 11.1: (e0,e1)/(e2,e3) against the same
    assert max_diff(torch.tensor(ft), torch.tensor([[2.0, 0.0], [0.0, 2.0]])) < 1e-5
    # same planes: ||Q( - Q[||^2 = 4 (1 - cos(a - c)) + 4 (1 - cos(b - 0.3))
    d = 4 * (1 - math.cos(a - c)) + 4 * (1 - math.cos(b - 0.3))
    assert res["frobenius"]["values"][0][1] == pytest.approx(d, abs=1e-5)
    pair = res["pairs"][0]
    assert pair["name"] == "()" and pair["average_effect"] < 1e-10 and pair["angles_degrees"] == []
    code, text, _ = run(capsys, "unitary", "--model", hand, "--words", "(")
    assert f"{math.degrees(a):.1f} {math.degrees(b):.1f}" in text
