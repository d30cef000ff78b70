"""What a flag's value may be: the argparse `type=` functions of the commands' numeric and path flags.

A value outside its range is refused when the flags are parsed, before any trace is read, as any
other error a user can fix: one line naming the flag and the limit, exit status 2, no usage:

    lumos predict: error: --dp must be a positive integer, got -2

`one_line_errors` (called by `lumos.cli` on the command's parser) turns the `ArgumentTypeError` of
each function marked `@check` into that `UserError`; the functions stay plain argparse types. No
number is taken silently as "the base's" (0) or carried into a replay it has no meaning in.
"""

from __future__ import annotations

import argparse
import functools
import math
from pathlib import Path
from typing import Callable

from lumos.errors import UserError

ENGINE_HELP = ("the replay's simulator: compiled (C), reference (pure Python; the same schedule bit for bit) "
               "or auto (default: compiled where the kernels are built)")
FORMAT_HELP = "table (default: for a person) or json (the whole document, for scripts)"

CHECKS: set[Callable] = set()


def check(fn: Callable) -> Callable:
    """Mark an argparse type whose ArgumentTypeError `one_line_errors` prints as `--FLAG <message>`."""
    CHECKS.add(fn)
    return fn


def _number(text: str, kind: type, what: str, ok: Callable[[float], bool]):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
    return value


@check
def positive_int(text: str) -> int:
    return _number(text, int, "a positive integer", lambda v: v >= 1)


@check
def non_negative_int(text: str) -> int:
    return _number(text, int, "an integer >= 0", lambda v: v >= 0)


@check
def positive_float(text: str) -> float:
    return _number(text, float, "a number > 0", lambda v: math.isfinite(v) and v > 0)


@check
def non_negative_float(text: str) -> float:
    return _number(text, float, "a number >= 0", lambda v: math.isfinite(v) and v >= 0)


@check
def fraction(text: str) -> float:
    return _number(text, float, "a fraction in [0, 1)", lambda v: 0 <= v < 1)


@check
def positive_int_list(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}")
    return values


@check
def output_path(text: str) -> str:
    """A path to write (a file, or a directory of files): none of its parents may be a file."""
    for parent in Path(text).parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a directory")
            break
    return text


@check
def output_file(text: str) -> str:
    """A file to write: `output_path`, and not an existing directory."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; give the file to write")
    return output_path(text)


def _named(flag: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def named(text: str):
        try:
            return fn(text)
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"{flag} {exc}") from None
    return named


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """The `@check` types of `parser`'s flags (and of its subcommands' flags) raise UserError
    '--FLAG <message>': the CLI prints it as its one-line error."""
    for action in parser._actions:
        if action.type in CHECKS and action.option_strings:
            action.type = _named(action.option_strings[0], action.type)
        for sub in (action.choices.values() if isinstance(action.choices, dict) else ()):
            if isinstance(sub, argparse.ArgumentParser):
                one_line_errors(sub)


def retype(parser: argparse.ArgumentParser, types: dict[str, Callable]) -> None:
    """Give flags that `parser` has already (by dest) these `type=` functions: for flags defined
    where this module cannot be imported (`lumos.capture` imports nothing of the CLI)."""
    actions = {a.dest: a for a in parser._actions}
    for dest, fn in types.items():
        actions[dest].type = fn   # a KeyError: the flag was renamed where it is defined
