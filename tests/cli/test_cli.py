"""The command line end to end, and every bad input: exit code 2, one line, no traceback,
nothing half-written."""
import json
import os
import subprocess
import sys

import pytest
import torch

from rnnlens.cli import main
from tests.support import TINY, assert_clean_error
from tests.support import run_cli as run


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "model"
    assert main(["train", "--out", str(out), *TINY]) == 0
    return out


def test_demo_end_to_end_meets_the_negation_targets(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, _ = run(capsys, "demo", "--out", str(out), "--quiet")
    assert code == 0
    for f in ("config.json", "vocab.json", "model.safetensors", "metrics.jsonl", "summary.json",
              "report.html", "ngrams_charming.png", "ngram_heatmap.png", "polarity_boxes.png"):
        assert (out / f).is_file(), f
    summary = json.loads((out / "summary.json").read_text())
    adjs = summary["adjectives"]
    assert len(adjs) == 22 and {a["polarity"] for a in adjs} == {"positive", "negative"}
    assert set(adjs[0]) == {"word", "polarity", "token", "negation", "double_negation"}
    flips = sum((a["token"] > 0) != (a["negation"] > 0) for a in adjs)
    restores = sum((a["token"] > 0) == (a["double_negation"] > 0) for a in adjs)
    print("flips", flips, "restores", restores)
    assert flips == summary["negation_flips"] >= 20
    assert restores == summary["double_negation_restores"] >= 18
    assert "negative tokens (12)" in stdout and "positive tokens (10)" in stdout
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "Table 1" in html
    assert summary["bars"]["ngrams"][-1] == "charming"
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]         # no temporary left over


def test_train_with_config_file_and_flag_override(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": {"cell": "lstm", "hidden_size": 4}, "train": {"epochs": 1}}))
    out = tmp_path / "m"
    code, stdout, _ = run(capsys, "train", "--config", str(cfg), "--out", str(out), "--hidden-size", "6",
                          "--embedding-dim", "6", "--quiet")
    assert code == 0 and "test loss=" in stdout
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["model"]["cell"] == "lstm" and saved["model"]["hidden_size"] == 6


def test_train_on_tsv_files(tmp_path, capsys):
    rows = ["pos\ta fine film", "neg\ta dull film", "pos\tgood", "neg\tbad"] * 10
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.tsv").write_text("pos\tfine\nneg\tdull\n")
    out = tmp_path / "m"
    code, _, _ = run(capsys, "train", "--corpus", "tsv", "--train-file", str(tmp_path / "train.tsv"),
                     "--dev-file", str(tmp_path / "dev.tsv"), "--out", str(out), *TINY)
    assert code == 0
    assert json.loads((out / "config.json").read_text())["labels"] == ["neg", "pos"]
    code, stdout, _ = run(capsys, "explain", "--model", str(out), "a fine film", "--json")
    assert code == 0 and json.loads(stdout)["labels"] == ["neg", "pos"]


def _log_odds(model_dir, text):
    """The model's own logit for `text`, computed without the explainer."""
    from rnnlens.data.batching import Example, collate
    from rnnlens.data.tokenize import Tokenizer
    from rnnlens.train.checkpoint import load_checkpoint

    model, _, vocab, meta = load_checkpoint(model_dir)
    with torch.no_grad():
        return float(model.eval()(collate([Example(Tokenizer(**meta.get("tokenizer", {}))(text))], vocab))[0])


def test_explain_table_json_and_png(model_dir, tmp_path, capsys):
    code, out, err = run(capsys, "explain", "--model", str(model_dir), "the plot was not not dull")
    assert code == 0 and err == ""
    assert "prediction:" in out and "not not dull" in out and "remainder" in out
    # a final-state head: the contributions are those of the 6 n-grams ending at the last token
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) == 6
    code, out, _ = run(capsys, "explain", "--model", str(model_dir), "not dull", "--json",
                       "--target", "negative")
    d = json.loads(out)
    (o,) = d["outputs"]
    assert d["tokens"] == ["not", "dull"] and o["target"] == "negative"
    assert sorted((g["start"], g["end"]) for g in o["ngrams"]) == [(0, 1), (1, 1)]
    assert abs(o["output"] - (o["offset"] + o["ngram_total"] + o["remainder"])) < 1e-5
    assert abs(o["output"] + _log_odds(model_dir, "not dull")) < 1e-5       # toward the first label
    png = tmp_path / "h.png"
    code, out, _ = run(capsys, "explain", "--model", str(model_dir), "not dull", "--png", str(png), "--top", "1")
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) == 1
    assert_clean_error(*run(capsys, "explain", "--model", str(model_dir), "x", "--png", str(png))[::2], "--force")


def test_explain_only_unknown_words_warns(model_dir, capsys):
    code, out, err = run(capsys, "explain", "--model", str(model_dir), "zzzz qqqq")
    assert code == 0 and "prediction:" in out
    assert err.startswith("warning: all tokens are unknown") and "qqqq zzzz" in err


@pytest.mark.parametrize("text", ["", "   "])
def test_explain_empty_text(model_dir, capsys, text):
    assert_clean_error(*run(capsys, "explain", "--model", str(model_dir), text)[::2], "empty")


def test_explain_bad_target(model_dir, capsys):
    assert_clean_error(*run(capsys, "explain", "--model", str(model_dir), "good", "--target", "meh")[::2],
                       "negative, positive")


def test_missing_model_dir(tmp_path, capsys):
    assert_clean_error(*run(capsys, "explain", "--model", str(tmp_path / "nope"), "good")[::2], "does not exist")


def _copy_model(model_dir, tmp_path):
    import shutil
    dst = tmp_path / "copy"
    shutil.copytree(model_dir, dst)
    return dst


@pytest.mark.parametrize("damage,needle", [
    (lambda d: (d / "model.safetensors").unlink(), "missing model.safetensors"),
    (lambda d: (d / "config.json").write_text("{trunc"), "config.json is corrupt"),
    (lambda d: (d / "config.json").write_text('{"format": "other"}'), "not an rnnlens checkpoint"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:100]),
     "model.safetensors is corrupt"),
    (lambda d: (d / "vocab.json").write_text(json.dumps({"format": "rnnlens-vocab", "version": 1,
                                                          "itos": ["<pad>", "<unk>", "a"]})),
     "vocab.json has 3 tokens"),
    (lambda d: (d / "vocab.json").write_bytes(b"\xff\xfe"), "cannot read vocabulary"),
])
def test_corrupt_model_dir(model_dir, tmp_path, capsys, damage, needle):
    d = _copy_model(model_dir, tmp_path)
    damage(d)
    assert_clean_error(*run(capsys, "explain", "--model", str(d), "good")[::2], needle)


def test_swapped_weights_are_detected(model_dir, tmp_path, capsys):
    d = _copy_model(model_dir, tmp_path)
    meta = json.loads((d / "config.json").read_text())
    meta["config"]["model"]["hidden_size"] = 9
    (d / "config.json").write_text(json.dumps(meta))
    assert_clean_error(*run(capsys, "explain", "--model", str(d), "good")[::2], "does not match config.json")


def test_unknown_config_key_lists_valid_ones(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": {"hidden": 3}}))
    code, _, err = run(capsys, "train", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert_clean_error(code, err, "model.hidden", "hidden_size", "embedding_dim")
    assert not (tmp_path / "o").exists()


def test_bad_flag_value_and_missing_files(tmp_path, capsys):
    assert_clean_error(*run(capsys, "train", "--out", str(tmp_path / "o"), "--epochs", "two")[::2], "train.epochs")
    assert_clean_error(*run(capsys, "train", "--out", str(tmp_path / "o"), "--config", str(tmp_path / "x.json"))[::2],
                       "cannot read config")
    assert_clean_error(*run(capsys, "train", "--out", str(tmp_path / "o"), "--corpus", "tsv",
                            "--train-file", str(tmp_path / "none.tsv"), "--quiet")[::2], "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_malformed_tsv_names_file_and_line(tmp_path, capsys):
    f = tmp_path / "t.tsv"
    f.write_text("pos\tgood\nno tab here\n")
    code, _, err = run(capsys, "train", "--out", str(tmp_path / "o"), "--corpus", "tsv", "--train-file", str(f), *TINY)
    assert_clean_error(code, err, f"{f}:2")
    assert not (tmp_path / "o").exists()
    f.write_bytes(b"pos\tgood\nneg\t\xff\n")
    assert_clean_error(*run(capsys, "train", "--out", str(tmp_path / "o"), "--corpus", "tsv",
                            "--train-file", str(f), *TINY)[::2], "not valid UTF-8")
    g = tmp_path / "dev.tsv"
    f.write_text("pos\tgood\nneg\tbad\n")
    g.write_text("meh\tokay\n")
    assert_clean_error(*run(capsys, "train", "--out", str(tmp_path / "o"), "--corpus", "tsv", "--train-file", str(f),
                            "--dev-file", str(g), *TINY)[::2], "meh")


def test_existing_output_folder_is_refused_unless_force(model_dir, tmp_path, capsys):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    for cmd in (["demo", "--out", str(out), "--quiet"], ["train", "--out", str(out), *TINY]):
        assert_clean_error(*run(capsys, *cmd)[::2], "--force")
        assert (out / "keep.txt").read_text() == "precious"
    assert run(capsys, "train", "--out", str(out), "--force", *TINY)[0] == 0
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()


def test_usage_errors_are_one_line(capsys):
    code = None
    with pytest.raises(SystemExit) as e:
        main(["explain"])
    code = e.value.code
    _, err = capsys.readouterr()
    assert_clean_error(code, err, "--model")


def test_console_command_runs_as_a_process(model_dir):
    """The installed entry point (or python -m rnnlens) exits 2 without a traceback."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-m", "rnnlens", "explain", "--model", str(model_dir), ""],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1
    p = subprocess.run([sys.executable, "-m", "rnnlens", "explain", "--model", str(model_dir), "good film"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "prediction:" in p.stdout


def test_multiclass_mean_pooling_with_bias_adds_up(tmp_path, capsys):
    rows = ["a\tred apple", "b\tblue sky", "c\tgreen grass", "a\tred car", "b\tblue sea", "c\tgreen tree"] * 8
    (tmp_path / "t.tsv").write_text("\n".join(rows))
    out = tmp_path / "m"
    code, _, _ = run(capsys, "train", "--corpus", "tsv", "--train-file", str(tmp_path / "t.tsv"), "--out", str(out),
                     "--pooling", "mean", "--output-bias", "true", "--cell", "lstm", *TINY)
    assert code == 0
    for target in ("a", "b", "c"):
        code, stdout, _ = run(capsys, "explain", "--model", str(out), "red sky", "--json", "--target", target)
        d = json.loads(stdout)
        (o,) = d["outputs"]
        assert len(d["probabilities"]) == 3 and abs(sum(d["probabilities"].values()) - 1) < 1e-6
        assert abs(o["output"] - o["offset"] - o["ngram_total"] - o["remainder"]) < 1e-5 and not d["exact"]
        # The explained score is the model's own logit, its bias included (in the offset).
        from rnnlens.data.batching import Example, collate
        from rnnlens.train.checkpoint import load_checkpoint
        model, _, vocab, meta = load_checkpoint(out)
        k = meta["labels"].index(target)
        logits = model(collate([Example(["red", "sky"])], vocab))[0]
        assert o["target"] == target and abs(logits[k].item() - o["output"]) < 1e-5
        assert abs(o["offset"] - model.head.out.bias[k].item()) < 1e-5    # mean pooling of one LSTM layer


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("rnnlens ")


def test_explain_document_streams_top_k(model_dir, tmp_path, capsys):
    from rnnlens.analysis.ngrams import ngram_scores
    from rnnlens.data.batching import Example, collate
    from rnnlens.train.checkpoint import load_checkpoint

    words = "the plot was not dull but good and not bad".split()
    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(words[i % len(words)] for i in range(450)))
    code, out, err = run(capsys, "explain", "--model", str(model_dir), "--file", str(doc), "--top", "3",
                         "--max-n", "3", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["tokens"] == 450 and len(got["ngrams"]) == 3
    # the same three as brute force over all n-grams of at most 3 tokens
    model, _, vocab, _ = load_checkpoint(model_dir)
    tokens = (" ".join(words[i % len(words)] for i in range(450))).split()
    view = model.linear_view(collate([Example(tokens)], vocab))
    s = ngram_scores(view, model.readout_weight[0].detach())[0, :, :, 0]
    cand = [(abs(float(s[t, i])), i, t) for t in range(450) for i in range(max(0, t - 2), t + 1)]
    best = sorted(cand, reverse=True)[:3]
    assert [abs(r["score"]) for r in got["ngrams"]] == pytest.approx([b[0] for b in best], rel=1e-5)
    assert_clean_error(*run(capsys, "explain", "--model", str(model_dir))[::2], "--file")
    assert_clean_error(*run(capsys, "explain", "--model", str(model_dir), "--file", str(tmp_path / "no"))[::2],
                       "cannot read")


def test_explain_bidirectional_model_by_attribution(tmp_path, capsys):
    out = tmp_path / "bi"
    assert main(["train", "--out", str(out), *TINY, "--bidirectional", "true", "--layers", "2"]) == 0
    capsys.readouterr()
    code, stdout, err = run(capsys, "explain", "--model", str(out), "not good at all", "--json")
    assert code == 0, err
    d = json.loads(stdout)
    (o,) = d["outputs"]
    assert {r["direction"] for r in o["ngrams"]} == {"forward", "backward"}
    sign = 1 if o["target"] == "positive" else -1
    assert abs(o["output"] - sign * _log_odds(out, "not good at all")) < 1e-5
    assert abs(o["output"] - (o["offset"] + o["ngram_total"] + o["remainder"])) < 1e-5
    code, stdout, err = run(capsys, "explain", "--model", str(out), "not good at all", "--target", "negative")
    assert code == 0 and stdout.startswith("prediction:"), err


def test_faithfulness_command(model_dir, capsys):
    code, out, err = run(capsys, "faithfulness", "--model", str(model_dir), "--sentences", "12", "--max-k", "2",
                         "--methods", "ngram", "random", "--json", "--quiet")
    assert code == 0, err
    d = json.loads(out)
    assert set(d["methods"]) == {"ngram", "random"} and d["sentences"] == 12
    code, out, err = run(capsys, "faithfulness", "--model", str(model_dir), "--split", "nope")
    assert_clean_error(code, err, "nope")


def test_train_init_from_a_missing_folder_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "m"
    code = main(["train", "--epochs", "1", "--init-from", str(tmp_path / "nope"), "--out", str(out), "--quiet"])
    assert_clean_error(code, capsys.readouterr().err, "train.init_from", "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_heatmap_cells_show_the_decimals_their_scale_needs():
    """Scores of a few hundredths are not all written "-0.0": the decimals follow the largest
    magnitude shown, and a value that rounds to zero has no sign."""
    from rnnlens.viz.plots import cell_text

    assert [cell_text(v, 0.05) for v in (0.0123, -0.0371, -0.0001)] == ["0.012", "-0.037", "0.000"]
    assert [cell_text(v, 5.0) for v in (1.26, -0.01)] == ["1.3", "0.0"]
    assert cell_text(150.3, 200.0) == "150" and cell_text(0.5, 0.9) == "0.50"


def test_negation_on_a_built_in_corpus_model_reads_its_adjective_lists(model_dir, tmp_path, capsys):
    """The built-in corpus pairs "X" with "not X" under opposite labels, so no word passes the
    training split's frequency ratio: negation takes the corpus's own adjective lists, as the
    report's negation section does."""
    from rnnlens.data.synthetic import NEGATIVE, POSITIVE

    out = tmp_path / "neg"
    code, stdout, err = run(capsys, "negation", "--model", str(model_dir), "--threads", "1", "--out", str(out))
    assert code == 0, err
    adj = json.loads((out / "adjectives.json").read_text())
    assert adj["source"] == "the polarity corpus's adjective lists"
    assert sorted(adj["positive"]) == sorted(POSITIVE) and sorted(adj["negative"]) == sorted(NEGATIVE)
