"""What several commands share: config override flags, loading --model, a scores line."""
from __future__ import annotations

import argparse
import sys

from ..data.tokenize import shown
from ..errors import RnnlensError


def resume_command(out, force: bool = False) -> str:
    """The command that continues an interrupted `train --out OUT` from its checkpoint, quoted
    for a shell; with --force where the run was replacing an OUT that is still there (its
    resume replaces it too)."""
    import shlex
    from pathlib import Path

    return f"rnnlens train --resume {shlex.quote(str(out))}" + (" --force" if force and Path(out).exists() else "")


def stdin_text():
    """Standard input as UTF-8 text read strictly (a BOM dropped), as a file is read: bytes
    that are not UTF-8 are an error, not characters replaced. sys.stdin itself where it has
    no byte stream under it (a test's StringIO)."""
    import io

    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:
        return sys.stdin
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=None)


def _config_type(where: str, typ):
    """The argparse type of a config flag: its text parsed as the field's type (the range is
    Config.validate's to check, naming the field)."""
    from ..config import parse_flag

    def parse(text: str):
        try:
            return parse_flag(text, typ, where)
        except RnnlensError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


# False while the command being parsed is not `train` (rnnlens.cli.build_parser): the flags
# list the registered cells, which imports torch
CONFIG_FLAGS = True


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    if not CONFIG_FLAGS:
        return
    from ..config import TASKS, flat_fields

    g = p.add_argument_group("config overrides (each also settable in --config)")
    from ..cells import CELLS
    from ..data.datasets import DATASETS

    choices = {"corpus": ["polarity", "tsv", *DATASETS], "cell": [*CELLS, "transformer"],
               "task": list(TASKS)}
    for name, (section, typ) in flat_fields().items():
        flags = [f"--{name.replace('_', '-')}"] + (["--data"] if name == "corpus" else [])
        extra = f": one of {', '.join(choices[name])}" if name in choices else ""
        # SUPPRESS: a flag not given is absent, so that a given "none" (None) is told from it
        g.add_argument(*flags, dest=f"cfg:{section}.{name}", metavar="V", help=f"{section}.{name}{extra}",
                       type=_config_type(f"{section}.{name}", typ), default=argparse.SUPPRESS)


def warn_unknown(unknown: list[str], tokens: list[str]) -> None:
    """The warning explain and wfsa print when words of the text are read as <unk>."""
    if unknown:
        which = "all tokens are" if len(set(unknown)) == len(set(tokens)) else "some tokens are"
        print(f"warning: {which} unknown to the model and read as <unk>: {shown(' '.join(sorted(set(unknown))))}",
              file=sys.stderr)


def _load_run(args, device: str = "cpu"):
    """The model folder of --model, with --data-dir (if the command has it) as where its data
    lives now."""
    from ..app.run import Run

    return Run.load(args.model, device=device, data_dir=getattr(args, "data_dir", None))
