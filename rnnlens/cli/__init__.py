"""The `rnnlens` command line: one module per command (parse -> the layers below -> print),
each with its `add_parser(sub)`. Bad input ends with one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import errno
import os
import sys

from ..argtypes import THREADS
from ..errors import RnnlensError
from . import (
    attention,
    bench,
    complete,
    demo,
    evaluate,
    explain,
    faithfulness,
    negation,
    predict,
    report,
    train,
    unitary,
    vectors,
    wfsa,
)

# the order of `rnnlens --help`
COMMANDS = (demo, train, vectors, evaluate, predict, bench, explain, wfsa, faithfulness, negation, report, unitary, attention,
            complete)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit code 2)."""

    def error(self, message: str):
        # "argument --top: must be >= 1, got 0" -> "--top must be >= 1, got 0"
        if message.startswith("argument ") and ": must be " in message:
            flag, _, rest = message[len("argument "):].partition(": ")
            message = f"{flag} {rest}"
        # every error line starts "rnnlens: error:", a subcommand's too; its help is named
        self.exit(2, f"rnnlens: error: {message} (see {self.prog} --help)\n")


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The subparser of `command` (the top parser when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The whole parser. command: the subcommand the arguments name, when main knows it: the
    config flags of `train` (whose help lists the registered cells, which imports torch) are
    added only when that command is `train` or not known (""), so that `rnnlens --help` and
    every other command's parsing stay fast."""
    from ..repro.command import add_parser as add_repro_parser
    from ..version import __version__
    from . import common

    common.CONFIG_FLAGS = command in ("", "train")

    p = _Parser(prog="rnnlens", description="Train recurrent networks and read what they compute as n-grams.")
    p.add_argument("--version", action="version", version=f"rnnlens {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMANDS:
        module.add_parser(sub)
    add_repro_parser(sub)
    for name, sp in sub.choices.items():
        if name in THREADED and not any("--threads" in a.option_strings for a in sp._actions):
            sp.add_argument("--threads", dest="torch_threads", type=THREADS, default=None, metavar="N",
                            help="torch threads (default: torch's)")
    return p


# the commands that compute with torch: each takes --threads (its own, or the one added here)
THREADED = ("demo", "train", "eval", "predict", "explain", "wfsa", "faithfulness", "negation", "report",
            "unitary", "attention", "complete", "bench", "repro", "vectors", "approx-error")


def _tolerant_output() -> None:
    """Text the terminal cannot encode (a byte of argv that was not UTF-8, a word outside a
    Latin-1 locale) is printed as a backslash escape, not a UnicodeEncodeError traceback."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError, AttributeError):
                pass


# The exit code when stdout's reader went away (`rnnlens ... | head -1`): 128 + SIGPIPE, what
# a shell reports for `cat`, `grep` and the rest in that case, so `set -o pipefail` sees the
# same as for them.
PIPE_CLOSED = 141


def _pipe_closed() -> int:
    """End quietly after a BrokenPipeError on stdout: what is still buffered goes to
    /dev/null, so the flush at exit finds nothing to complain about (Python's recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):      # a stdout without a file descriptor (captured)
        pass
    return PIPE_CLOSED


def _clean_texts(args) -> None:
    """The texts given on the command line (--text, a text argument) with any byte that is not
    UTF-8 made U+FFFD: printing or plotting them must not fail (paths are left as given)."""
    from ..data.tokenize import clean_text

    for name in ("text", "text_flag"):
        v = getattr(args, name, None)
        if isinstance(v, str):
            setattr(args, name, clean_text(v))
        elif isinstance(v, list):
            setattr(args, name, [clean_text(t) if isinstance(t, str) else t for t in v])


class _Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a job scheduler's stop) raised where the command is, so that it ends as
    an interrupt does: files closed, the resume hint printed, exit code 143 (128 + SIGTERM)."""


def _on_sigterm(signum, frame):
    raise _Terminated


def _terminate_as_interrupt():
    """Make SIGTERM end a command the way Ctrl-C does, returning the handler to put back when the
    command ends (None: nothing was changed). Only the main thread may set a handler, and one
    someone else installed (an embedding program's) is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        old = signal.getsignal(signal.SIGTERM)
        if old != signal.SIG_DFL:
            return None
        signal.signal(signal.SIGTERM, _on_sigterm)
        return old
    except (ValueError, OSError, AttributeError):
        return None


def main(argv: list[str] | None = None) -> int:
    _tolerant_output()
    previous = _terminate_as_interrupt()
    try:
        return _main(argv)
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _has_checkpoint(out) -> bool:
    """Whether the interrupted `train --out/--resume OUT` left a checkpoint to continue from."""
    try:
        from ..train.resume import _listing, partial_dir

        return bool(_listing(partial_dir(out) / "checkpoints"))
    except (OSError, RnnlensError):
        return False


def _bad_path(e: OSError) -> bool:
    """Print the one-line error of a path the user named that the system cannot take (too long,
    a loop of links); True when e is such an error."""
    if e.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
        return False
    what = "file name too long" if e.errno == errno.ENAMETOOLONG else "too many levels of links"
    name = str(e.filename or "")
    shown = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]}"
    print(f"rnnlens: error: {what}: {shown}", file=sys.stderr)
    return True


def _main(argv: list[str] | None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        named = next((w for w in words if not w.startswith("-")), None)   # the subcommand, if any
        parser = build_parser(named)
        try:
            args, extra = parser.parse_known_args(argv)
        except OSError as e:           # checking a path the user named (its type function)
            if _bad_path(e):
                return 2
            raise
        if extra:                      # named with the subcommand's help, not the top one's
            _command_parser(parser, getattr(args, "command", None) or named).error(
                f"unrecognized arguments: {' '.join(extra)}")
        _clean_texts(args)
        threads = getattr(args, "torch_threads", None)
        if threads:                    # the commands that take --threads and do not set it themselves
            from ..ops.threads import set_threads

            set_threads(threads)
        try:
            code = args.func(args)
        except RnnlensError as e:
            one_line = " ".join(part.strip() for part in str(e).split("\n") if part.strip())
            print(f"rnnlens: error: {one_line}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as e:
            out = getattr(args, "resume", None) or getattr(args, "out", None)
            from .common import resume_command

            hint = (f"; continue from the last checkpoint with: {resume_command(out, getattr(args, 'force', False))}"
                    if args.command == "train" and out and _has_checkpoint(out) else "")
            if args.command == "repro" and not getattr(args, "render", False) and getattr(args, "tables", None):
                hint = "; the same repro command continues each unfinished run from its last checkpoint"
            what = "stopped (SIGTERM)" if isinstance(e, _Terminated) else "interrupted"
            print(f"rnnlens: {what}{hint}", file=sys.stderr)
            return 143 if isinstance(e, _Terminated) else 130
        except MemoryError:
            print("rnnlens: error: out of memory (smaller sizes, batches or inputs need less)", file=sys.stderr)
            return 2
        except RuntimeError as e:
            first = (str(e).strip().splitlines() or [""])[0]
            if type(e).__name__ != "OutOfMemoryError" and "can't allocate memory" not in first:
                raise
            print(f"rnnlens: error: out of memory: {first[:300]} (smaller sizes, batches or inputs need less)",
                  file=sys.stderr)
            return 2
        except OSError as e:
            if _bad_path(e):
                return 2
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            what = (e.strerror or str(e)).strip()
            where = f" while writing {e.filename}" if e.filename else ""
            print(f"rnnlens: error: {what[:1].lower() + what[1:]}{where}", file=sys.stderr)
            return 2
        sys.stdout.flush()             # a closed pipe shows here, not in the flush at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()


if __name__ == "__main__":
    sys.exit(main())
