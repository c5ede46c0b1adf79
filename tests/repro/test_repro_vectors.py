"""`rnnlens repro` makes the word-vector files its configs name (model.embeddings_file) once,
into DIR/vectors/, and points the run at them; a file that exists is used as given; an
unknown one is a clear error."""
from __future__ import annotations

import pytest

from rnnlens.errors import RnnlensError
from rnnlens.repro import run as R


def test_vectors_are_made_once_and_reused(shared_data, tmp_path, monkeypatch):
    monkeypatch.setitem(R.VECTORS, "tiny-cr.txt", {"corpus": "cr", "dim": 8, "epochs": 1, "std": 1.0})
    ctx = R.Context(out=tmp_path, data_dir=shared_data, progress=False)
    path = R.vectors_file(ctx, "tiny-cr.txt")
    assert path == str(tmp_path / "vectors" / "tiny-cr.txt")
    lines = (tmp_path / "vectors" / "tiny-cr.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 100 and len(lines[0].split()) == 9          # word + 8 numbers
    stamp = (tmp_path / "vectors" / "tiny-cr.txt").stat().st_mtime_ns
    assert R.vectors_file(ctx, "tiny-cr.txt") == path                 # made once
    assert (tmp_path / "vectors" / "tiny-cr.txt").stat().st_mtime_ns == stamp


def test_given_files_and_unknown_names(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text("a 1 2\n", encoding="utf-8")
    ctx = R.Context(out=tmp_path / "out", data_dir=None, progress=False)
    assert R.vectors_file(ctx, str(f)) == str(f)
    with pytest.raises(RnnlensError, match="does not know how"):
        R.vectors_file(ctx, "nowhere.txt")
    with pytest.raises(RnnlensError, match="--data-dir"):
        R.vectors_file(ctx, "imdb-w2v-300d.txt")


def test_a_w2v_config_resolves_to_the_made_file(tmp_path, monkeypatch):
    from rnnlens.repro import default_configs_dir

    made = []
    monkeypatch.setattr(R, "vectors_file", lambda ctx, name: made.append(name) or str(tmp_path / name))
    ctx = R.Context(out=tmp_path, data_dir=tmp_path, configs=default_configs_dir(), progress=False)
    cfg = R.row_config(ctx, "cr-rrnn-b-w2v.json")
    assert made == ["imdb-w2v-300d.txt"] and cfg.model.embeddings_file == str(tmp_path / "imdb-w2v-300d.txt")
    assert cfg.model.freeze_embeddings
    tiny = R.row_config(R.Context(out=tmp_path, data_dir=tmp_path, configs=default_configs_dir(), progress=False,
                                  tiny=True), "cr-rrnn-b-w2v.json")
    assert tiny.model.embeddings_file is None                         # the smoke test makes no vectors
