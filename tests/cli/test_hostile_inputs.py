"""Inputs an outside user tried that once broke a command: special files and folders as
outputs, text that is not valid Unicode, models of a kind a command cannot read, phrases long
enough to expose float32 drift, sizes past any memory. Each ends in a clean result or ONE
line on stderr with exit code 2, and nothing half-written."""
import json
import os
import stat

import pytest

from rnnlens.errors import RnnlensError
from rnnlens.outfiles import check_new_file, replacing
from tests.support import run_cli as run
from tests.support import untrained_checkpoint


def assert_clean_error(code, err, *needles):
    """Exit code 2 and one line on stderr holding every needle."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("rnnlens: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    return {"clf": untrained_checkpoint(root / "clf"),
            "urn": untrained_checkpoint(root / "urn", cell="urn", embedding_dim=6, hidden_size=4),
            "rrnn": untrained_checkpoint(root / "rrnn", cell="rrnn-f"),
            "lm": untrained_checkpoint(root / "lm", task="lm", labels=None, data={"sentence_level": True},
                                       cell="lstm", memory="rm", memory_size=3)}


# --- outputs --------------------------------------------------------------------------------

def test_a_special_file_is_written_through_never_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)       # a reader, so that opening for writing works
    try:
        with replacing(fifo) as tmp:
            tmp.write_text("through the pipe")
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)             # still a pipe, not a regular file
    with replacing(os.devnull) as tmp:
        tmp.write_text("gone")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    check_new_file(os.devnull, force=False)                 # a device needs no --force


def test_a_folder_where_a_file_goes_is_refused_with_or_without_force(tmp_path):
    (tmp_path / "d").mkdir()
    for force in (False, True):
        with pytest.raises(RnnlensError, match="is a folder"):
            check_new_file(tmp_path / "d", force)
    with pytest.raises(RnnlensError, match="is a folder"):
        with replacing(tmp_path / "d"):
            pass
    with pytest.raises(RnnlensError, match="exists; use --force"):
        (tmp_path / "f").write_text("x")
        check_new_file(tmp_path / "f", force=False)


def test_wfsa_dot_on_a_folder_is_one_line(models, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    code, _, err = run(capsys, "wfsa", "--model", models["rrnn"], "--dim", "0", "--text", "good film",
                       "--dot", tmp_path / "adir", "--force")
    assert_clean_error(code, err, "is a folder")


# --- text that is not valid Unicode -----------------------------------------------------------

def test_a_lone_surrogate_in_jsonl_is_predicted_not_a_crash(models, tmp_path, capsys):
    lines = ['{"text": "good film"}'] * 30 + ['{"text": "good \\ud800 film"}']
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "predict", "--model", models["clf"], tmp_path / "in.jsonl", "--batch-size", "4")
    assert code == 0, err
    recs = [json.loads(x) for x in out.splitlines()]
    assert len(recs) == 31 and recs[-1]["text"] == "good \ufffd film"


def test_command_line_bytes_that_are_not_utf8_can_be_plotted(models, tmp_path, capsys):
    text = b"good \xff film".decode("utf-8", "surrogateescape")      # what Python makes of such argv
    code, out, err = run(capsys, "explain", "--model", models["clf"], text, "--png", tmp_path / "x.png")
    assert code == 0, err
    assert (tmp_path / "x.png").stat().st_size > 0 and "\ufffd" in out


# --- models a command cannot read ---------------------------------------------------------------

def test_approx_error_on_a_memory_network_is_a_clear_error(models):
    from rnnlens.analysis.approx import approx_error
    from rnnlens.train.checkpoint import load_checkpoint

    model = load_checkpoint(models["lm"])[0]
    with pytest.raises(RnnlensError, match="MemoryEncoder"):
        approx_error(model, [])


def test_the_signature_of_a_long_phrase_stays_orthogonal(models, capsys):
    words = " ".join(["good", "film"] * 400)              # 800 words: float32 products drift past 1e-5
    code, out, err = run(capsys, "unitary", "--model", models["urn"], "--words", words)
    assert code == 0, err


# --- sizes past any memory ----------------------------------------------------------------------

def test_an_allocation_that_cannot_succeed_is_one_line(tmp_path, capsys, monkeypatch):
    import rnnlens.train.run as train_run

    def refuse(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 12000000000000 bytes.")
    monkeypatch.setattr(train_run, "RNNModel", refuse)
    code, _, err = run(capsys, "train", "--corpus", "polarity", "--embedding-dim", "8", "--hidden-size", "8",
                       "--epochs", "1", "--quiet", "--out", tmp_path / "m")
    assert_clean_error(code, err, "out of memory", "12000000000000 bytes")
    assert not (tmp_path / "m").exists()



def test_a_model_whose_weights_went_nan_still_writes_valid_jsonl(tmp_path, capsys):
    import torch

    from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint

    path = untrained_checkpoint(tmp_path / "m")
    model, cfg, vocab, meta = load_checkpoint(path)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    save_checkpoint(path, model, cfg, vocab, meta["labels"], meta["task"])
    (tmp_path / "in.txt").write_text("good film\n")
    code, out, err = run(capsys, "predict", "--model", path, tmp_path / "in.txt")
    assert code == 0, err
    rec = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert rec["probabilities"] == {"negative": None, "positive": None}


def test_predict_out_dash_is_standard_output(models, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("good film\n")
    code, out, err = run(capsys, "predict", "--model", models["clf"], "in.txt", "--out", "-")
    assert code == 0 and json.loads(out)["line"] == 1 and not (tmp_path / "-").exists()


def test_eval_takes_a_split_or_a_file_not_both(models, tmp_path, capsys):
    (tmp_path / "t.tsv").write_text("positive\tgood film\n")
    code, _, err = run(capsys, "eval", "--model", models["clf"], "--split", "dev", "--test-file", tmp_path / "t.tsv")
    assert_clean_error(code, err, "not both")


def test_faithfulness_json_file_needs_force_to_replace(models, tmp_path, capsys):
    (tmp_path / "f.json").write_text("{}")
    code, _, err = run(capsys, "faithfulness", "--model", models["clf"], "--json", tmp_path / "f.json")
    assert_clean_error(code, err, "exists; use --force")
    assert (tmp_path / "f.json").read_text() == "{}"


def test_explain_reads_a_document_or_lines_from_standard_input(models, tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("the film was good\n"))
    code, out, err = run(capsys, "explain", "--model", models["clf"], "--file", "-")
    assert code == 0 and "good" in out, err
    monkeypatch.setattr("sys.stdin", io.StringIO("the film was good\nnot bad\n"))
    code, out, err = run(capsys, "explain", "--model", models["clf"], "--lines", "-", "--out", tmp_path / "ex")
    assert code == 0, err
    assert len((tmp_path / "ex" / "explanations.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("argv", [("predict", "-"), ("explain", "--file", "-"), ("explain", "--lines", "-")])
def test_standard_input_that_is_not_utf8_is_refused_as_a_file_is(argv, models, tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xe9t\xe9 good\n"), encoding="utf-8",
                                                      errors="surrogateescape"))
    extra = ("--out", tmp_path / "ex") if "--lines" in argv else ()
    code, _, err = run(capsys, argv[0], "--model", models["clf"], *argv[1:], *extra)
    assert_clean_error(code, err, "not UTF-8 text")
    assert not (tmp_path / "ex").exists()


def test_standard_input_in_utf8_with_a_bom_is_read(models, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\ufeffété good\n".encode()), encoding="utf-8"))
    code, out, err = run(capsys, "predict", "--model", models["clf"], "-")
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["tokens"][0] == "été"


def test_a_dataset_too_small_to_carve_its_splits_is_refused_before_training(tmp_path, capsys):
    (tmp_path / "mr").mkdir()
    (tmp_path / "mr" / "rt-polarity.all").write_text("".join(f"{i % 2} a film {i}\n" for i in range(9)))
    code, out, err = run(capsys, "train", "--data", "mr", "--data-dir", tmp_path, "--out", tmp_path / "m",
                         "--hidden-size", "4", "--embedding-dim", "4", "--epochs", "1", "--quiet")
    assert_clean_error(code, err, "mr: the dev and test splits have no examples (train 9, dev 0, test 0)")
    assert "epoch" not in out and not (tmp_path / "m").exists()


@pytest.mark.parametrize("case", ["header", "glue order"])
def test_a_training_file_that_is_not_label_tab_text_is_refused(case, tmp_path, capsys):
    rows = [("pos", f"a good film number {i}") if i % 2 else ("neg", f"a dull film number {i}") for i in range(120)]
    if case == "header":
        lines = ["label\ttext"] + [f"{lab}\t{text}" for lab, text in rows]
    else:
        lines = ["sentence\tlabel"] + [f"{text}\t{int(lab == 'pos')}" for lab, text in rows]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    code, _, err = run(capsys, "train", "--corpus", "tsv", "--train-file", tmp_path / "train.tsv",
                       "--out", tmp_path / "m", "--hidden-size", "4", "--epochs", "1", "--quiet")
    assert_clean_error(code, err, "looks like a header" if case == "header" else "text<TAB>label order")
    assert not (tmp_path / "m").exists()
