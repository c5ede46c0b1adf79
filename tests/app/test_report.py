"""`rnnlens report`: one self-contained, escaped HTML page whose numbers are the model's
(each sentence's output, offset, n-gram total and remainder rebuilt from torch's GRUCell and
the head's weights; the faithfulness table's methods and ranges), whose skipped sections say
why; and the page opened in headless Chromium (started by the test itself) renders without
console errors."""
import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from rnnlens.cli import main
from rnnlens.viz import report as R
from tests.support import assert_clean_error, run_cli as run

TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--epochs", "2", "--quiet"]
SCRIPT = "<script>alert(1)</script>"
LABEL = "<b>x</b>"
SECTIONS = ("model-card", "training-curves", "samples", "tsne", "negation", "faithfulness")


@pytest.fixture(scope="module")
def tsv_model(tmp_path_factory):
    """A tiny classifier whose data and labels are hostile to HTML: a label `<b>x</b>` and
    texts holding `<script>alert(1)</script>`, `<td>`, `$` (matplotlib math) and `&`."""
    d = tmp_path_factory.mktemp("tsv")
    rows = [f"{LABEL}\ta fine {SCRIPT} film", "neg\ta dull film & <td>bad</td>", f"{LABEL}\tgood $5 fun",
            "neg\tbad $ plot", f"{LABEL}\tgreat acting", "neg\tawful acting"] * 8
    (d / "train.tsv").write_text("\n".join(rows) + "\n")
    (d / "dev.tsv").write_text("\n".join(rows[:6]) + "\n")
    (d / "test.tsv").write_text("\n".join(rows[:12]) + "\n")
    out = d / "model"
    assert main(["train", "--corpus", "tsv", "--train-file", str(d / "train.tsv"), "--dev-file", str(d / "dev.tsv"),
                 "--test-file", str(d / "test.tsv"), "--out", str(out), "--output-bias", "true", *TINY]) == 0
    return out


TEXTS = [f"a {SCRIPT} film", "<td>good</td> $5"]


@pytest.fixture(scope="module")
def tsv_report(tsv_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    code = main(["report", "--model", str(tsv_model), "--out", str(out), "--text", TEXTS[0],
                 "--text", TEXTS[1], "--faithfulness-sentences", "6", "--quiet"])
    assert code == 0
    return out


def gru_parts(model_dir, tokens, sign=1.0):
    """The binary GRU classifier's logit for `tokens`, split as the report splits it, computed
    without rnnlens's forward: torch's GRUCell in float64 with the checkpoint's weights, its
    first-order n-grams v_{i:T} (support.first_order_ngrams), the head's row w and bias b.
    output = w.h_T + b, offset = b, ngram_total = w.sum_i v_{i:T}, remainder = w.(h_T - sum_i v_{i:T}),
    scores[i] = w.v_{i:T}; all times `sign` (-1: the logit read toward the first label)."""
    from tests.support import first_order_ngrams, torch_step

    from rnnlens.train.checkpoint import load_checkpoint

    model, _, vocab, _ = load_checkpoint(model_dir)
    cell = model.encoder.cells[0]
    x = model.embedding.weight.detach().double()[torch.tensor(vocab.encode(tokens))]
    step = torch_step("gru", cell)
    h = x.new_zeros(cell.hidden_size)
    with torch.no_grad():
        for xt in x:
            h = step(xt, h)
    v = first_order_ngrams(step, x, cell.hidden_size)[len(tokens) - 1]
    w = sign * model.head.out.weight.detach().double()[0]
    b = sign * float(model.head.out.bias.detach()[0])
    return {"output": float(w @ h) + b, "offset": b, "ngram_total": float(w @ v.sum(0)),
            "remainder": float(w @ (h - v.sum(0))), "scores": (v @ w).tolist()}


def explained(d):
    """(output, offset, ngram_total, remainder) of one explained sentence, from a report sample
    or `rnnlens explain --json` (either keeps them flat or under outputs[0])."""
    if "outputs" in d:
        d = d["outputs"][0]
    names = ("output", "offset", "ngram_total", "remainder")
    return {k: d.get(k, d.get("logit") if k == "output" else None) for k in names}


def toward(d, labels):
    """+1 when the explained number is the logit of labels[1] (the head's one row), -1 when it
    is read toward labels[0] (the negated logit)."""
    target = d.get("target") or (d.get("outputs") or [{}])[0].get("target") or d["top"][0]["target"]
    assert target in labels, target
    return 1.0 if target == labels[1] else -1.0


def test_report_files_and_sections(tsv_report):
    assert sorted(p.name for p in tsv_report.iterdir()) == ["report.html", "report.json"]
    assert not [p for p in tsv_report.parent.iterdir() if p.name != "report"]      # nothing half-written left
    html = (tsv_report / "report.html").read_text()
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    d = json.loads((tsv_report / "report.json").read_text())
    assert d["model"]["labels"] == [LABEL, "neg"] and d["model"]["parameters"] > 0
    assert d["model"]["split_sizes"] == {"train": 48, "dev": 6, "test": 12}
    assert d["tsne"]["n"] == 12
    assert "not sentiment labels" in d["negation"]["skipped"]          # the section says why it is skipped
    assert "skipped: " in html and "not sentiment labels" in html


def test_sample_numbers_are_the_models(tsv_model, tsv_report):
    """Each requested sentence: the explained output is the model's logit (the head's bias
    included) read toward the label explained, the offset is that bias, and the n-grams and the
    remainder are those of the GRU's first-order view, all rebuilt independently; the page
    prints them."""
    d = json.loads((tsv_report / "report.json").read_text())
    html = (tsv_report / "report.html").read_text()
    assert [s["text"] for s in d["samples"]] == TEXTS
    for k, s in enumerate(d["samples"]):
        want = gru_parts(tsv_model, s["tokens"], toward(s, [LABEL, "neg"]))
        got = explained(s)
        print(k, got, {n: v for n, v in want.items() if n != "scores"})
        for name in ("output", "offset", "ngram_total", "remainder"):
            assert abs(got[name] - want[name]) < 1e-5, name
        assert abs(want["offset"]) > 1e-3 and abs(want["remainder"]) > 1e-4     # both parts are there to get wrong
        T = len(s["tokens"])
        assert s["top"], k
        for t in s["top"]:                 # final state: the n-grams end at the last token
            assert t["end"] == T - 1 and t["text"] == " ".join(s["tokens"][t["start"]:])
            assert abs(t["score"] - want["scores"][t["start"]]) < 1e-5
        biggest = sorted(map(abs, want["scores"]), reverse=True)[: len(s["top"])]
        assert max(abs(abs(t["score"]) - b) for t, b in zip(s["top"], biggest)) < 1e-5    # largest |score| first
        line = (f"Output {got['output']:+.3f} = offset {got['offset']:+.3f} + n-grams {got['ngram_total']:+.3f} "
                f"+ remainder {got['remainder']:+.3f}")
        block = html[html.index(f'id="sample-{k}"'):]
        block = block[: block.index("</div>")]
        assert line in block
        assert R.esc(TEXTS[k]) in block                             # the sentence asked for, escaped
        imgs = re.findall(r'<img\b[^>]*src="data:image/png;base64,([^"]+)"', block)
        assert len(imgs) == 2                                       # the heatmap and the bars
        assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)


def test_explain_and_report_give_the_same_numbers(tsv_model, tsv_report, capsys):
    """`rnnlens explain --target LABEL` on the report's sentences, for the label the report
    explains: the same output (the model's logit toward that label, bias included), offset,
    n-gram total and remainder."""
    d = json.loads((tsv_report / "report.json").read_text())
    for s in d["samples"]:
        sign = toward(s, [LABEL, "neg"])
        target = "neg" if sign > 0 else LABEL
        code, out, _ = run(capsys, "explain", "--model", tsv_model, s["text"], "--json", "--target", target)
        assert code == 0
        got = explained(json.loads(out))
        want = gru_parts(tsv_model, s["tokens"], sign)
        for name in ("output", "ngram_total", "offset", "remainder"):
            assert got[name] is not None and abs(got[name] - want[name]) < 1e-5, name
            assert abs(got[name] - explained(s)[name]) < 1e-5, name


def test_faithfulness_table(tsv_report):
    from rnnlens.analysis.token_attributions import METHODS

    d = json.loads((tsv_report / "report.json").read_text())["faithfulness"]
    html = (tsv_report / "report.html").read_text()
    assert set(d["methods"]) == set(METHODS)                  # the table, not a skip note
    assert d["sentences"] == 6 and d["skipped"] == 0 and d["output"] == "sigmoid" and d["max_k"] == 10
    assert d["curve_n"][0] == 6 and all(a >= b for a, b in zip(d["curve_n"], d["curve_n"][1:]))
    assert isinstance(d["first_order_error"], dict) and d["first_order_error"]["one_step"] > 0
    assert 0 < d["remainder_ratio"] < 1
    section = html[html.index('<section id="faithfulness">'):]
    section = section[: section.index("</section>")]
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td>", section)
    assert {name for name, _ in rows} == set(METHODS)
    assert all(h in section for h in ("compr. ^", "suff. v", "infid. v"))     # ERASER and infidelity too
    for name, aopc in rows:
        m = d["methods"][name]
        assert -1 <= m["aopc"] <= 1 and aopc == f"{m['aopc']:.4f}"       # drops of a probability
        assert m["aopc_se"] is not None and m["aopc_se"] >= 0
        assert m["spearman"] is None or -1 <= m["spearman"] <= 1
        assert all(c is None or -1 <= c <= 1 for c in m["curve"]) and len(m["curve"]) == 10
        assert m["spearman_n"] <= 6
    assert [float(a) for _, a in rows] == sorted((float(a) for _, a in rows), reverse=True)   # best first
    assert "Token attributions on 6 test sentences" in section


def test_skipped_sections_say_why(tsv_model, tmp_path):
    out = tmp_path / "r"
    assert main(["report", "--model", str(tsv_model), "--out", str(out), "--samples", "0",
                 "--faithfulness-sentences", "0", "--no-negation", "--quiet"]) == 0
    d = json.loads((out / "report.json").read_text())
    html = (out / "report.html").read_text()
    reasons = {"samples": "--samples 0 and no --text", "negation": "turned off (--no-negation)",
               "faithfulness": "--faithfulness-sentences 0"}
    for sid, reason in reasons.items():
        assert d[sid] == {"skipped": reason}, sid
        section = html[html.index(f'<section id="{sid}">'):]
        assert R.esc(f"skipped: {reason}") in section[: section.index("</section>")], sid
    assert "faithfulness-table" not in html and 'class="sample"' not in html
    assert d["tsne"]["n"] == 12                                  # the data sections that were asked for ran


def test_sections_needing_data_say_it_is_gone(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    rows = ["pos\tgood fun", "neg\tbad plot", "pos\tgreat acting", "neg\tawful acting"] * 4
    for split in ("train", "dev", "test"):
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    model = tmp_path / "m"
    assert main(["train", "--corpus", "tsv", "--train-file", str(d / "train.tsv"), "--dev-file", str(d / "dev.tsv"),
                 "--test-file", str(d / "test.tsv"), "--out", str(model), "--embedding-dim", "4",
                 "--hidden-size", "4", "--epochs", "1", "--quiet"]) == 0
    (d / "train.tsv").unlink()
    out = tmp_path / "r"
    rep = main(["report", "--model", str(model), "--out", str(out), "--quiet"])
    assert rep == 0
    r = json.loads((out / "report.json").read_text())
    for sid in ("tsne", "negation", "faithfulness"):
        reason = r[sid]["skipped"]
        assert reason.startswith("the training data could not be loaded") and "train.tsv" in reason, (sid, reason)
        assert reason.endswith("pass --data-dir")
    assert r["samples"] == {"skipped": "no sentences: pass --text or a dataset with a test split"}


def test_data_text_and_labels_are_escaped(tsv_report):
    html = (tsv_report / "report.html").read_text()
    low = html.lower()
    assert "<script" not in low                         # the page has no script at all, and data adds none
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # the --text sentence, shown as text
    assert "&lt; | script | &gt;" in html               # its tokens, one by one
    assert LABEL not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<td>good</td>" not in html and "&lt;td&gt;good&lt;/td&gt;" in html
    assert "<b>x" not in html


def test_report_is_self_contained(tsv_report):
    html = (tsv_report / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    assert "<link" not in html and "@import" not in html and "url(" not in html
    srcs = re.findall(r'\bsrc\s*=\s*"([^"]*)"', html)
    hrefs = re.findall(r'\bhref\s*=\s*"([^"]*)"', html)
    imgs = re.findall(r"<img\b", html)
    assert len(imgs) == len(srcs) == 6               # training curves, 2 per sentence (heatmap, bars), t-SNE
    assert all(h.startswith("#") for h in hrefs), hrefs
    for s in srcs:
        assert s.startswith("data:image/png;base64,")
        assert base64.b64decode(s.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_escapes_cells_that_look_like_markup():
    t = R.table(["<h>"], [["<td>evil</td>"], [R.score_cell(-1.5)], [R.cell("<i>", "text")]])
    assert "<td><td>" not in t and "&lt;td&gt;evil&lt;/td&gt;" in t and "&lt;h&gt;" in t
    assert '<td class="neg">-1.50</td>' in t and '<td class="text">&lt;i&gt;</td>' in t


def test_report_errors_are_one_line(tsv_model, tsv_report, tmp_path, capsys):
    assert_clean_error(*run(capsys, "report", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))[::2],
                       "does not exist")
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tmp_path / "o"),
                            "--text", " ")[::2], "no tokens")
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tmp_path / "o"),
                            "--text", "good " * 401)[::2], "401 tokens", "rnnlens explain --file")
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tsv_report))[::2], "--force")
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tmp_path / "o"),
                            "--samples", "-1")[::2], ">= 0")
    assert not (tmp_path / "o").exists()


def test_missing_analysis_modules_are_noted(tsv_model, tmp_path, monkeypatch):
    from rnnlens.app import report as model_report

    monkeypatch.setattr(model_report, "_available", lambda name: False)
    out = tmp_path / "r"
    d = model_report.build_report(tsv_model, out, n_samples=0, progress=False)
    html = (out / "report.html").read_text()
    assert "negation study unavailable" in d["negation"]["skipped"] and "negation study unavailable" in html
    assert "faithfulness evaluation unavailable" in d["faithfulness"]["skipped"]
    assert d["samples"] == {"skipped": "--samples 0 and no --text"} and '<section id="samples">' in html

def test_bidirectional_polarity_model_report(tmp_path, capsys):
    m = tmp_path / "m"
    assert main(["train", "--out", str(m), "--bidirectional", "true", "--embedding-dim", "8", "--hidden-size", "8",
                 "--epochs", "1", "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "r"
    code, stdout, _ = run(capsys, "report", "--model", str(m), "--out", str(out), "--samples", "1",
                          "--faithfulness-sentences", "4", "--quiet")
    assert code == 0 and stdout.strip() == f"wrote {out / 'report.html'}"
    html = (out / "report.html").read_text()
    d = json.loads((out / "report.json").read_text())
    s = d["samples"][0]
    T = len(s["tokens"])
    assert s["top"]
    for t in s["top"]:
        lo, hi = min(t["start"], t["end"]), max(t["start"], t["end"])
        assert t["text"] == " ".join(s["tokens"][lo: hi + 1])
        # the final state reads the forward direction at the last token, the backward one at the first
        assert (t["direction"], t["end"]) in (("forward", T - 1), ("backward", 0)), t
    from rnnlens.data.batching import Example, collate
    from rnnlens.train.checkpoint import load_checkpoint

    model, _, vocab, _ = load_checkpoint(m)
    with torch.no_grad():
        logit = float(model.eval()(collate([Example(s["tokens"])], vocab))[0])
    assert abs(explained(s)["output"] - logit) < 1e-5
    block = html[html.index('id="sample-0"'):]
    block = block[: block.index("</div>")]
    assert len(re.findall(r"<img\b", block)) == 3             # forward and backward heatmaps, both-direction bars
    assert "Backward direction" in block and "both directions" in block
    assert d["tsne"]["dim"] == 16                              # both directions, concatenated
    assert "one-direction" in d["negation"]["skipped"]         # the phrase scores need one direction


# --- the pieces ---------------------------------------------------------------------------------
def test_context_representations_are_what_the_head_reads():
    from rnnlens.analysis.context import context_representations, tsne
    from rnnlens.data.batching import Example, collate
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    vocab = Vocab(["a", "b", "c"])
    model = RNNModel(ModelConfig(embedding_dim=4, hidden_size=3, bidirectional=True), len(vocab), "classify",
                     ["n", "p"]).eval()
    exs = [Example(["a", "b", "c"], 0), Example(["c"], 1), Example(["b", "a"], 1), Example(["a"], 0)]
    batch = collate(exs, vocab)
    feats, labels = context_representations(model, [batch], max_n=3)
    out, _ = model.encoder(batch.tokens, batch.mask)
    want = torch.cat([out[torch.arange(4), batch.lengths - 1, :3], out[:, 0, 3:]], -1)[:3]
    assert feats.shape == (3, 6) and labels.tolist() == [0, 1, 1]
    assert np.abs(feats - want.detach().numpy()).max() < 1e-6
    pts = tsne(np.random.default_rng(0).normal(size=(5, 6)), perplexity=30)   # perplexity clipped below N
    assert pts.shape == (5, 2) and np.isfinite(pts).all()


@pytest.mark.parametrize("task", ["tag", "lm"])
def test_per_token_views_of_tag_and_lm_models(task):
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig
    from rnnlens.app.report_sections import explain_sentence

    vocab = Vocab(["the", "cat", "sat", "down"])
    labels = ["O", "B-X", "E-X", "S-X"] if task == "tag" else None
    cfg = ModelConfig(embedding_dim=4, hidden_size=5, adaptive_softmax=[3] if task == "lm" else None)
    model = RNNModel(cfg, len(vocab), task, labels).eval()
    v = explain_sentence(model, vocab, ["the", "cat", "sat", "down"])
    assert v.grid.shape == (1, 4, 4) and len(v.targets) == 4
    assert np.abs(np.triu(v.grid[0], 1)).max() == 0            # starts after the end: nothing
    assert np.abs(v.grid[0]).sum() > 0 and v.top(3)
    if task == "tag":
        # the emission score of the tag predicted at t is linear in h_t: its n-gram i..t
        # contributes W[tag] . v_{i:t} (torch's GRUCell unrolled to first order)
        from tests.support import first_order_ngrams, torch_step

        cell = model.encoder.cells[0]
        x = model.embedding.weight.detach().double()[torch.tensor(vocab.encode(["the", "cat", "sat", "down"]))]
        ngrams = first_order_ngrams(torch_step("gru", cell), x, cell.hidden_size)
        W = model.head.proj.weight.detach().double()
        for t, tag in enumerate(v.targets):
            want = (ngrams[t, : t + 1] @ W[model.head.tags.index(tag)]).numpy()
            assert np.abs(v.grid[0, t, : t + 1] - want).max() < 1e-5


def test_report_of_a_formal_language_model(tmp_path):
    """A Dyck model (next-symbol head) gets per-token views, not a crash."""
    from rnnlens.cli import main

    out = tmp_path / "dyck"
    assert main(["train", "--task", "dyck", "--cell", "urn", "--embedding-dim", "6", "--hidden-size", "4",
                 "--train-size", "64", "--dev-size", "16", "--test-size", "16", "--epochs", "1", "--quiet",
                 "--out", str(out)]) == 0
    assert main(["report", "--model", str(out), "--out", str(tmp_path / "rep"), "--samples", "1",
                 "--quiet"]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    d = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert 'id="sample-0"' in html and "symbol" in d["samples"][0]["explained"]
    assert d["faithfulness"] == {"skipped": "the faithfulness table scores sentence-level models, not dyck"}
    assert d["negation"] == {"skipped": "a dyck model is not a sentiment classifier or regressor"}
    assert d["tsne"] == {"skipped": "a dyck model has no sentence representation"}
    s = d["samples"][0]
    assert s["top"] and "output" not in s                       # one output per token, none for the whole
    for t in s["top"]:
        assert t["start"] <= t["end"]                           # a causal model: n-grams end where they are read
    if "outputs" in s:                                          # per-token totals: the URN's view is exact
        assert s["exact"] and len(s["outputs"]) == len(s["tokens"])
        assert all(abs(o["remainder"]) < 1e-5 for o in s["outputs"])


# --- in a browser -------------------------------------------------------------------------------
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the browser check needs it")
    return exe


def _browse(exe: str, page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"     # a fresh profile per run
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=60, check=False)


def _console_errors(stderr: str) -> list[str]:
    """Lines where the page wrote to the console. Headless Chromium logs every console message
    (console.error and uncaught exceptions included) as `INFO:CONSOLE(...)] "..."`; the report
    has no scripts, so any such line is a problem."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


def test_report_renders_in_headless_chromium(tsv_report, tmp_path):
    exe = _chromium()
    # The console check must be able to fail: a broken page is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<!doctype html><html><body><p>x</p><script>undefined_fn()</script></body></html>")
    p = _browse(exe, broken, tmp_path, "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    errors = _console_errors(p.stderr)
    assert errors and "Uncaught" in errors[0] and "undefined_fn" in errors[0], p.stderr[-2000:]

    page = tsv_report / "report.html"
    p = _browse(exe, page, tmp_path, "--dump-dom")
    assert p.returncode == 0, p.stderr[-2000:]
    assert _console_errors(p.stderr) == []
    for sid in SECTIONS:
        assert f'id="{sid}"' in p.stdout, sid
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in p.stdout and "<script" not in p.stdout.lower()
    assert p.stdout.count("<img") >= 5

    shot = tmp_path / "report.png"
    p = _browse(exe, page, tmp_path, f"--screenshot={shot}", "--window-size=1200,3000", "--hide-scrollbars")
    assert p.returncode == 0, p.stderr[-2000:]
    assert _console_errors(p.stderr) == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    print(f"screenshot: {shot}")


def test_sample_sentences_prefer_readable_ones_and_never_exceed_an_explained_sentences_limit():
    from types import SimpleNamespace

    from rnnlens.analysis.sentence import SENTENCE_TOKENS
    from rnnlens.app.report import _sample_sentences
    from rnnlens.data.batching import Example

    def data(*lengths):
        return SimpleNamespace(splits={"test": [Example([f"w{i}" for i in range(n)], 0) for n in lengths]})

    assert [len(s) for s in _sample_sentences(data(3, 30, 8, 2, 12), "test", "classify", 5)] == [8, 12]
    assert [len(s) for s in _sample_sentences(data(3, 900, 2), "test", "classify", 5)] == [3, 2]
    got = _sample_sentences(data(10_000, 500), "test", "classify", 5)
    assert [len(s) for s in got] == [SENTENCE_TOKENS, SENTENCE_TOKENS] and got[0][0] == "w0"


def test_sample_sentences_of_a_language_model_stream_or_sentences():
    from types import SimpleNamespace

    from rnnlens.app.report import _sample_sentences
    from rnnlens.data.batching import Example

    words = [[f"w{i}{j}" for j in range(5)] for i in range(6)]
    stream = SimpleNamespace(splits={"test": [Example([t for w in words for t in w + ["<eos>"]])]})
    sentences = SimpleNamespace(splits={"test": [Example(["<eos>"] + w) for w in words]})
    for data in (stream, sentences):
        assert _sample_sentences(data, "test", "lm", 4) == [w for w in words if w in
                                                           _sample_sentences(data, "test", "lm", 4)]
        assert len(_sample_sentences(data, "test", "lm", 4)) == 4
    assert _sample_sentences(stream, "test", "lm", 9) == words == _sample_sentences(sentences, "test", "lm", 9)
    one = SimpleNamespace(splits={"test": [Example(["<eos>"] + words[0])]})   # one sentence, no <eos> after
    assert _sample_sentences(one, "test", "lm", 3) == [words[0]]
