"""rnnlens's C++ kernels (rnnlens/ops/csrc/): compiled on first use, then cached.

The first call in a fresh environment compiles the sources with the machine's C++ compiler
through torch.utils.cpp_extension (about a minute on 2 cores; a line on stderr says so) and
keeps the library in torch's extension cache (TORCH_EXTENSIONS_DIR, by default
~/.cache/torch_extensions), so later processes load it at once. Where no compiler is found
or the build fails, `load` returns None once and for all in this process and the callers
take their pure-PyTorch paths, which compute the same thing (more slowly); the reason is
kept in `load_error(name)`. RNNLENS_CPP=0 turns the kernels off.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

from .switches import switched_off

CSRC = Path(__file__).with_name("csrc")

_LOCK = threading.Lock()
_LOADED: dict[str, bool] = {}
_ERRORS: dict[str, str] = {}


def enabled() -> bool:
    """False when RNNLENS_CPP turns the kernels off (0, false, off or no; ops.switches)."""
    return not switched_off("RNNLENS_CPP")


def _flags() -> tuple[list[str], str]:
    """Compiler flags and a tag naming them: AVX2 and FMA where the CPU has them (the library is
    built on, and for, the machine that runs it)."""
    flags = ["-O3", "-fopenmp"]
    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except Exception:  # pragma: no cover - old torch
        cap = "DEFAULT"
    if cap in ("AVX2", "AVX512"):
        return flags + ["-mavx2", "-mfma"], "avx2"
    return flags, "base"


def load(name: str) -> bool:
    """Compile (once) and load csrc/<name>.cpp, whose TORCH_LIBRARY registers its ops under
    torch.ops.rnnlens_<name>. True when the ops are there; False when they cannot be had."""
    if name in _LOADED:
        return _LOADED[name]
    with _LOCK:
        if name in _LOADED:
            return _LOADED[name]
        _LOADED[name] = ok = _build(name)
        return ok


def load_error(name: str) -> str | None:
    """Why `load(name)` gave False, or None."""
    return _ERRORS.get(name)


def _headers() -> list[Path]:
    """The headers every kernel may include (csrc/*.h), in a fixed order."""
    return sorted(CSRC.glob("*.h"))


def build_location(name: str) -> tuple[str, Path]:
    """(the module name, its build folder in torch's extension cache) for csrc/<name>.cpp:
    the name carries a digest of the source, the shared headers (csrc/*.h) and the flags, so a
    changed source or header never reuses an old build, and every checkout of the same source
    shares one."""
    from torch.utils import cpp_extension

    flags, tag = _flags()
    src = CSRC / f"{name}.cpp"
    code = src.read_bytes() + b"".join(h.read_bytes() for h in _headers())
    digest = hashlib.sha1(code + " ".join(flags).encode()).hexdigest()[:10]
    module = f"rnnlens_{name}_{tag}_{digest}"
    return module, Path(cpp_extension._get_build_directory(module, verbose=False))


def _build(name: str) -> bool:
    if not enabled():
        _ERRORS[name] = "turned off by RNNLENS_CPP=0"
        return False
    src = CSRC / f"{name}.cpp"
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        _ERRORS[name] = f"no C++ compiler ({compiler}) on PATH"
        return False
    try:
        from torch.utils import cpp_extension
    except Exception as e:  # pragma: no cover - a torch without its extension tools
        _ERRORS[name] = f"torch.utils.cpp_extension unavailable: {e}"
        return False
    flags, _ = _flags()
    module, build_dir = build_location(name)
    built = any(build_dir.glob(f"{module}*.so"))
    if not built:
        print(f"rnnlens: compiling the C++ kernel {name} once (cached for later runs)...",
              file=sys.stderr, flush=True)
    try:
        with _build_lock(build_dir):
            # torch's own lock file, left behind by a process that died while compiling (an
            # interrupted first run): every later load would wait on it for ever. Holding the
            # flock above, no live rnnlens process is compiling this module, so it is stale.
            (build_dir / "lock").unlink(missing_ok=True)
            # every checkout of this source builds the same copy, with the shared headers beside it
            for file in (*_headers(), src):
                local = build_dir / file.name
                code = file.read_bytes()
                if not local.exists() or local.read_bytes() != code:
                    tmp = local.with_name(f".{local.name}.{os.getpid()}")
                    tmp.write_bytes(code)
                    os.replace(tmp, local)
            local = build_dir / src.name
            cpp_extension.load(name=module, sources=[str(local)], extra_cflags=flags,
                               extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    except Exception as e:   # compiler errors, a missing ninja, a read-only cache
        _ERRORS[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        return False
    return True


def _build_lock(build_dir: Path):
    """An OS lock (flock) on the module's build folder while it is compiled or loaded: the
    kernel frees it when the process ends, however it ends, so an interrupted build never
    blocks the next one. Where flock is missing, torch's own lock file is all there is."""
    from ..outfiles import waiting_lock

    return waiting_lock(build_dir / ".rnnlens-build.lock")
