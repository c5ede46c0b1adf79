"""`rnnlens report`: one self-contained, escaped HTML page; and the page opened in headless
Chromium (started by the test itself) renders without console errors."""
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
from test_cli import assert_clean_error, run

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
                 "--test-file", str(d / "test.tsv"), "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def tsv_report(tsv_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    code = main(["report", "--model", str(tsv_model), "--out", str(out), "--text", f"a {SCRIPT} film",
                 "--text", "<td>good</td> $5", "--faithfulness-sentences", "6", "--quiet"])
    assert code == 0
    return out


def test_report_files_and_sections(tsv_report):
    assert sorted(p.name for p in tsv_report.iterdir()) == ["report.html", "report.json"]
    assert not [p for p in tsv_report.parent.iterdir() if p.name != "report"]      # nothing half-written left
    html = (tsv_report / "report.html").read_text()
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    d = json.loads((tsv_report / "report.json").read_text())
    assert d["model"]["labels"] == [LABEL, "neg"] and d["model"]["parameters"] > 0
    assert d["model"]["split_sizes"] == {"train": 48, "dev": 6, "test": 12}
    assert len(d["samples"]) == 2 and d["samples"][0]["text"] == f"a {SCRIPT} film"
    s = d["samples"][0]
    assert abs(s["output"] - s["offset"] - s["ngram_total"] - s["remainder"]) < 1e-4
    assert d["tsne"]["n"] == 12
    assert "not sentiment labels" in d["negation"]["skipped"]          # the section says why it is skipped
    assert "skipped: " in html and "not sentiment labels" in html
    assert "methods" in d["faithfulness"] or "skipped" in d["faithfulness"]


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
    assert len(imgs) == len(srcs) >= 5
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
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tsv_report))[::2], "--force")
    assert_clean_error(*run(capsys, "report", "--model", str(tsv_model), "--out", str(tmp_path / "o"),
                            "--samples", "-1")[::2], ">= 0")
    assert not (tmp_path / "o").exists()


def test_missing_analysis_modules_are_noted(tsv_model, tmp_path, monkeypatch):
    from rnnlens.viz import model_report

    monkeypatch.setattr(model_report, "_available", lambda name: False)
    out = tmp_path / "r"
    d = model_report.build_report(tsv_model, out, n_samples=0, progress=False)
    html = (out / "report.html").read_text()
    assert "negation study unavailable" in d["negation"]["skipped"] and "negation study unavailable" in html
    assert "faithfulness evaluation unavailable" in d["faithfulness"]["skipped"]
    assert "skipped" in d["samples"] and '<section id="samples">' in html

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
    assert d["samples"][0]["top"][0]["direction"] in ("forward", "backward")
    assert {t["direction"] for t in d["samples"][0]["top"]} <= {"forward", "backward"}
    assert "backward" in html and "both directions" in html
    assert d["tsne"]["dim"] == 16                              # both directions, concatenated
    assert "skipped" in d["negation"]                          # the phrase scores need one direction


# --- the pieces ---------------------------------------------------------------------------------
def test_context_representations_are_what_the_head_reads():
    from rnnlens.analysis.context import context_representations, tsne
    from rnnlens.data.batching import Example, collate
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.train.config import ModelConfig

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
    from rnnlens.train.config import ModelConfig
    from rnnlens.viz.model_report import explain_sentence

    vocab = Vocab(["the", "cat", "sat", "down"])
    labels = ["O", "B-X", "E-X", "S-X"] if task == "tag" else None
    cfg = ModelConfig(embedding_dim=4, hidden_size=5, adaptive_softmax=[3] if task == "lm" else None)
    model = RNNModel(cfg, len(vocab), task, labels).eval()
    v = explain_sentence(model, vocab, ["the", "cat", "sat", "down"])
    assert v.grid.shape == (1, 4, 4) and len(v.targets) == 4
    assert np.abs(np.triu(v.grid[0], 1)).max() == 0            # starts after the end: nothing
    assert np.abs(v.grid[0]).sum() > 0 and v.top(3)


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
    assert 'id="samples"' in html and "next symbol" in html


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
