"""The C++ kernels' build (rnnlens.ops.cpp): a lock file left by a process that died while
compiling does not make later loads wait for ever, and the build is one per source, whichever
checkout it is loaded from."""
import os
import subprocess
import sys

import pytest

from rnnlens.ops import cpp

pytestmark = pytest.mark.skipif(not cpp.enabled() or not cpp.load("affine_scan"),
                                reason="no C++ build here (no compiler, or RNNLENS_CPP=0)")


def test_a_stale_lock_does_not_block_the_next_load():
    module, build_dir = cpp.build_location("affine_scan")
    stale = build_dir / "lock"                  # what torch leaves when its builder is killed
    stale.touch()
    code = "from rnnlens.ops import cpp; print(cpp.load('affine_scan'), cpp.load_error('affine_scan'))"
    env = dict(os.environ, RNNLENS_CPP="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True", out.stdout + out.stderr
    assert not stale.exists()


def test_the_build_compiles_a_copy_in_its_own_folder():
    module, build_dir = cpp.build_location("affine_scan")
    assert module.startswith("rnnlens_affine_scan_") and build_dir.name == module
    assert (build_dir / "affine_scan.cpp").read_bytes() == (cpp.CSRC / "affine_scan.cpp").read_bytes()
    assert any(build_dir.glob(f"{module}*.so"))
