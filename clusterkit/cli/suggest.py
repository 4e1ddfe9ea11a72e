"""argparse with "did you mean": a mistyped option names the subcommand it was given to, shows that
subcommand's usage and the closest real option; a mistyped command or choice offers the closest one that
``--help`` lists (never a hidden command such as ``summary``).

Python 3.14's ``suggest_on_error`` does the choice half; ClusterKit supports 3.11, so it is done here with
difflib (the same matcher). argparse hands a subcommand's leftover words back to the top-level parser, which
then reports them with the top-level usage: ``SubcommandParser`` reports them itself instead.
"""
from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn


def closest(word: str, candidates: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    match = closest(word, candidates)
    return f"; did you mean {match}?" if match else ""


def listed_choices(action: argparse.Action) -> list[str]:
    """The choices ``--help`` shows: for subcommands, those with a help line (hidden ones have none)."""
    if isinstance(action, argparse._SubParsersAction):  # argparse keeps no public list of subparsers
        return [a.dest for a in action._choices_actions]
    return [str(c) for c in action.choices or ()]


class SuggestingParser(argparse.ArgumentParser):
    """Invalid choices (commands included) name the closest listed one."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            listed = listed_choices(action)
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{_did_you_mean(str(value), listed)} "
                                                 f"(choose from {', '.join(listed)})")


class SubcommandParser(SuggestingParser):
    """A subcommand's parser: words it does not know are its error, shown with its usage."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras)
        return parsed, extras

    def unrecognized(self, extras: list[str]) -> NoReturn:
        options = sorted(o for a in self._actions for o in a.option_strings)
        first = next((e for e in extras if e.startswith("-")), extras[0])
        hint = _did_you_mean(first.split("=", 1)[0], options) if first.startswith("-") else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
