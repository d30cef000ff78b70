"""The `lumos` command: one entry point, one subcommand per stage.

Every subcommand lives in `lumos/commands/<name>.py`: `register(subparsers)`
adds its flags, `run(args)` calls library functions of its package. Only the
module of the subcommand being run is imported, so `lumos replay` never loads
the emulator or torch. Errors a user can fix (bad
trace, missing file, bad override, a flag's value out of its range: `lumos/commands/flags.py`) print one
line and exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = {
    "replay": ("lumos.commands.replay", "replay a measured iteration and compare with the measurement"),
    "diff": ("lumos.commands.diff", "attribute the iteration-time difference of two runs or steps to GPU, CPU, "
                                    "and what neither explains"),
    "predict": ("lumos.commands.predict", "predict a new configuration from a base trace (what-if)"),
    "search": ("lumos.commands.search", "rank every layout of N GPUs predicted from one base trace"),
    "export": ("lumos.commands.export", "write a run's execution graph as Chakra traces that ASTRA-sim runs"),
    "emulate": ("lumos.commands.emulate", "emulate a GPU cluster iteration and write per-rank traces (emulated)"),
    "capture": ("lumos.commands.capture", "record a trace Lumos can use (needs torch)"),
}


from lumos.errors import UserError  # noqa: E402  (main prints it as one line; still lumos.cli.UserError)


class _Version(argparse.Action):
    """--version: the installed package's version, looked up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("lumos")
        except PackageNotFoundError:   # run from a checkout that is not installed
            from lumos import __version__ as number
        print(f"lumos {number}")
        parser.exit()


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lumos", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print the version of lumos and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if name == command:
            importlib.import_module(module_name).register(sub)
            from lumos.commands.flags import one_line_errors   # a flag's bad value: one line, as UserError
            one_line_errors(sub.choices[name])
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


# commands whose first argument is a trace file or a directory of ranks: read it while the rest loads
PREFETCH = ("replay", "predict")


def _scan_on_the_side(data: bytes):
    """The reader's first passes over the prefetched bytes (C, without the interpreter lock), run on
    the prefetch thread while this one imports the command (`lumos.prefetch`)."""
    from lumos import jit

    if not jit.compiled():
        return None
    from lumos.trace.scan import scan_document   # no numpy: it need not wait for the main thread's import

    return scan_document(data)


def main(argv: list[str] | None = None) -> int:
    argv_from_process = argv is None   # run as the `lumos` process, not called from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if argv_from_process and command in PREFETCH and not os.environ.get("LUMOS_NO_PREFETCH"):
        at = argv.index(command) + 1
        if at < len(argv) and not argv[at].startswith("-"):
            from lumos import prefetch
            prefetch.start(argv[at], then=_scan_on_the_side)

    from lumos.trace.errors import TraceError

    parser = build_parser(command if command in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except UserError as exc:   # a flag's value out of its range (lumos.commands.flags)
        print(f"lumos {command}: error: {exc}", file=sys.stderr)
        return 2
    if not hasattr(args, "func"):
        parser.error(f"unknown command {args.command!r}")
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()   # a closed pipe shows here, not at exit
        if argv_from_process and getattr(args, "exit_without_teardown", False):
            # its outputs are written and closed; freeing the millions of objects a large run holds,
            # one by one, would only add seconds before the same exit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
        return rc
    except (TraceError, UserError, FileNotFoundError) as exc:
        print(f"lumos {args.command}: error: {_one_line(exc, args)}", file=sys.stderr)
        return 2
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:   # an output path in the way
        what = "is a file, not a directory" if isinstance(exc, FileExistsError) else exc.strerror.lower()
        print(f"lumos {args.command}: error: {exc.filename}: {what}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`lumos predict ... | head`): stop quietly, with the status of a process
        # SIGPIPE ended (128 + 13), as the shell's own tools do; stdout goes to /dev/null so that the
        # interpreter's last flush does not fail again
        if argv_from_process:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


# what to do with a directory whose files are not one run's, for a command without --ranks-from-files
ONE_RUN = "give a directory that holds the files of one run, one per rank"


def _one_line(exc: Exception, args) -> str:
    """The error's line; load_run's hint names --ranks-from-files, a flag only `lumos replay` has."""
    text = str(exc)
    if not hasattr(args, "ranks_from_files"):
        from lumos.trace.run import HINT

        if text.endswith(HINT):
            text = text[:-len(HINT)] + ONE_RUN
    return text


if __name__ == "__main__":
    sys.exit(main())
