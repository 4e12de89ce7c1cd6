"""README.md and ``--help`` agree (#25 item 9): the synopsis of every command in the README's
"Commands" block names every option the parser has; ``run`` has exactly record's and check's."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from powercut.cli.parser import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                inner = _subparsers(sub)
                out.update({f"{name} {k}": v for k, v in inner.items()} if inner else {name: sub})
    return out


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {max(a.option_strings, key=len) for a in p._actions if a.option_strings and "--help" not in a.option_strings}


def _named(p: argparse.ArgumentParser, opt: str, text: str) -> bool:
    """Is the option (by any of its spellings, e.g. -o for --out) a whole word of the text?"""
    spellings = next(a.option_strings for a in p._actions if opt in a.option_strings)
    return any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text) for s in spellings)


def _synopses() -> dict[str, str]:
    text = README.read_text()
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    out: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        m = re.match(r"powercut (\w+)(?: ([a-z|]+))?", line)
        if m:
            current = m.group(1)
            subs = (m.group(2) or "").split("|") if m.group(2) and m.group(2) != "" else [""]
            keys = [f"{current} {s}".strip() for s in subs]
            for k in keys:
                out[k] = out.get(k, "") + line + "\n"
            current = "\n".join(keys)
        elif current and line.startswith(" "):
            for k in current.split("\n"):
                out[k] += line + "\n"
    return out


def test_every_option_of_every_command_is_in_the_readme() -> None:
    subs, syn = _subparsers(build_parser()), _synopses()
    missing = []
    for name, p in sorted(subs.items()):
        if name == "run":
            continue
        assert name in syn, f"README has no synopsis for 'powercut {name}'"
        missing += [f"powercut {name} {opt}" for opt in sorted(_options(p)) if not _named(p, opt, syn[name])]
    assert not missing, "README synopses lack: " + ", ".join(missing)


def test_run_takes_record_and_check_options() -> None:
    subs = _subparsers(build_parser())
    assert _options(subs["run"]) <= _options(subs["record"]) | _options(subs["check"]) | {"--resume"}
