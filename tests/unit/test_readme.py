"""The README and the manual in docs/ agree with the code and with themselves (#25 item 9, #36):

* the synopsis of every command in docs/commands.md names every option the parser has; ``run``
  has exactly record's and check's;
* every relative link in README.md and docs/*.md resolves to a file, and a ``#anchor`` to a heading
  of that file (GitHub's anchors);
* every source, test or script path the pages name in backticks exists;
* README.md stays short (at most 250 lines) and every docs page is linked from docs/index.md;
* every code symbol docs/internals.md names in backticks (``Judging.run``, ``split_by_base``,
  ``powercut.core.log.dmlog``) is a module, class, function or attribute of the source (#49)."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from powercut.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMANDS = DOCS / "commands.md"
INDEX = DOCS / "index.md"
README_MAX_LINES = 250


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                inner = _subparsers(sub)
                out.update({f"{name} {k}": v for k, v in inner.items()} if inner else {name: sub})
    return out


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {
        max(a.option_strings, key=len)
        for a in p._actions
        if a.option_strings and "--help" not in a.option_strings
    }


def _named(p: argparse.ArgumentParser, opt: str, text: str) -> bool:
    """Is the option (by any of its spellings, e.g. -o for --out) a whole word of the text?"""
    spellings = next(a.option_strings for a in p._actions if opt in a.option_strings)
    return any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text) for s in spellings)


def _synopsis_block() -> str:
    """The first code block under docs/commands.md's "## Synopsis" heading."""
    text = COMMANDS.read_text()
    m = re.search(r"^## Synopsis\n.*?^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert m, (
        f"{COMMANDS.relative_to(ROOT)} has no '## Synopsis' heading with a code block under it"
    )
    return m.group(1)


def _synopses() -> dict[str, str]:
    block = _synopsis_block()
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


def test_every_option_of_every_command_is_in_the_synopsis() -> None:
    subs, syn = _subparsers(build_parser()), _synopses()
    missing = []
    for name, p in sorted(subs.items()):
        if name == "run":
            continue
        assert name in syn, f"docs/commands.md has no synopsis for 'powercut {name}'"
        missing += [
            f"powercut {name} {opt}" for opt in sorted(_options(p)) if not _named(p, opt, syn[name])
        ]
    assert not missing, "docs/commands.md synopses lack: " + ", ".join(missing)


def test_run_takes_record_and_check_options() -> None:
    subs = _subparsers(build_parser())
    run_only = {"--resume", "--repeat", "--explore-races", "--explore-delay", "--budget"}
    assert _options(subs["run"]) <= _options(subs["record"]) | _options(subs["check"]) | run_only


# -- the pages and their links ---------------------------------------------------------------------


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text without its fenced code blocks (their '#' lines are no headings, their brackets no links)."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces -> ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _prose(page.read_text()), re.M):
        base = _slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(page: Path) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", _prose(page.read_text()))  # a link inside code is no link
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", prose)


def _target(page: Path, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return ((page.parent / path).resolve() if path else page.resolve()), anchor


def _relative(link: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", link)  # http:, https:, mailto:, ...


def test_the_manual_exists() -> None:
    assert INDEX.is_file() and COMMANDS.is_file()
    assert len(_pages()) > 3


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in _pages():
        for link in filter(_relative, _links(page)):
            target, anchor = _target(page, link)
            where = f"{page.relative_to(ROOT)}: {link}"
            if not target.exists():
                broken.append(
                    f"{where}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
                )
            elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
                broken.append(f"{where}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_short() -> None:
    n = len(README.read_text().splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines (at most {README_MAX_LINES}): move the detail into a "
        "docs/ page and link to it"
    )


def test_every_docs_page_is_linked_from_the_index() -> None:
    linked = {_target(INDEX, link)[0] for link in filter(_relative, _links(INDEX))}
    missing = [
        p.name for p in sorted(DOCS.glob("*.md")) if p != INDEX and p.resolve() not in linked
    ]
    assert not missing, "docs/index.md does not link: " + ", ".join(missing)
    assert any(
        _target(README, link)[0] == INDEX.resolve() for link in filter(_relative, _links(README))
    ), "README.md does not link docs/index.md"


# a path in backticks that names a file of this repository: a source, test, script, template or config
_NAMED = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|sh|toml|j2|c|txt|yml|fio|md))`")


def test_named_paths_exist() -> None:
    """``core/states/models.py``, ``tests/unit/report/test_html.py``, ``ci/setup.sh``, ``templates/report.html.j2``:
    each resolves from the repository's root, ``harness/`` or ``harness/report/``."""
    stale = []
    for page in _pages():
        for name in sorted(set(_NAMED.findall(page.read_text()))):
            if not any(
                (base / name).exists()
                for base in (ROOT, ROOT / "harness", ROOT / "harness" / "report")
            ):
                stale.append(f"{page.relative_to(ROOT)}: {name}")
    assert not stale, "paths named in the manual that do not exist:\n" + "\n".join(stale)


# -- docs/internals.md names only what exists ---------------------------------------------------------
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
FILE_EXT = {
    "json",
    "jsonl",
    "py",
    "html",
    "j2",
    "toml",
    "md",
    "txt",
    "img",
    "bin",
    "gz",
    "log",
    "sh",
    "yml",
    "png",
    "c",
    "xml",
}
SOURCES = (
    (ROOT / "harness", "powercut"),
    (ROOT / "vm-images", "powercut.images"),
    (ROOT / "workloads", "powercut.workloads"),
    (ROOT / "checkers", "powercut.checkers"),
)


def _defined() -> tuple[set[str], set[str]]:
    """(every name a class, function, assignment or attribute assignment defines; every module
    name, dotted from powercut and each shorter tail: 'check.vm', 'vm')."""
    names: set[str] = set()
    mods: set[str] = set()
    for base, pkg in SOURCES:
        for path in base.rglob("*.py"):
            parts = [x for x in path.relative_to(base).with_suffix("").parts if x != "__init__"]
            mods.add(".".join([pkg, *parts]))
            mods.update(".".join(parts[i:]) for i in range(len(parts)))
            for n in ast.walk(ast.parse(path.read_text())):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(n.name)
                targets = (
                    n.targets
                    if isinstance(n, ast.Assign)
                    else [n.target]
                    if isinstance(n, ast.AnnAssign)
                    else []
                )
                for t in targets:
                    if isinstance(t, ast.Name):
                        names.add(t.id)
                    elif isinstance(t, ast.Attribute):
                        names.add(t.attr)
    return names, mods


def code_symbols(text: str) -> list[str]:
    """The backticked tokens that are code symbols: dotted, snake_case, _private or CamelCase
    identifiers (a call's arguments dropped), not file names or standard-library names."""
    out = []
    for tok in re.findall(r"`([^`\n]+)`", text):
        t = re.sub(r"\(.*\)$", "", tok.strip())
        if not re.fullmatch(rf"{IDENT}(\.{IDENT})*", t):
            continue
        parts = t.split(".")
        if parts[-1] in FILE_EXT or parts[0] in sys.stdlib_module_names:
            continue
        if (
            len(parts) > 1
            or "_" in t.strip("_")
            or t.startswith("_")
            or re.search(r"[a-z][A-Z]|^[A-Z][a-z]+[A-Z]", t)
        ):
            out.append(t)
    return out


def unknown_symbols(text: str, names: set[str], mods: set[str]) -> list[str]:
    bad = []
    for t in code_symbols(text):
        parts = t.split(".")
        known = t in mods or any(
            ".".join(parts[:i]) in mods and all(p in names for p in parts[i:])
            for i in range(1, len(parts))
        )
        if not (known or all(p in names or p in mods for p in parts)):
            bad.append(t)
    return sorted(set(bad))


def test_internals_names_only_symbols_that_exist() -> None:
    names, mods = _defined()
    bad = unknown_symbols((DOCS / "internals.md").read_text(), names, mods)
    assert not bad, f"docs/internals.md names what the source does not define: {bad}"
    # the check itself: a renamed class is caught, a file name or a stdlib call is not a symbol
    assert unknown_symbols("`_Judging.run` and `Judging.run`", names, mods) == ["_Judging.run"]
    assert unknown_symbols("`summary.json`, `os.pwrite`, `flaky`", names, mods) == []


OUTSIDE = re.compile(
    "|".join(
        ("ARCHITECTURE" + r"\.md", "LAYOUT" + r"\.md", "FIELD-" + "NOTES", r"\.\./" + "shared/")
    )
)


def outside_citations(text: str) -> list[int]:
    """The lines of ``text`` that cite a document outside the repository."""
    return [n for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    """The repository explains itself: what its code and docs rely on lives in docs/ (issue 62)."""
    found = []
    for base in ("harness", "vm-images", "workloads", "checkers", "tests", "docs", "ci", "bench"):
        for p in sorted((ROOT / base).rglob("*")):
            if p.suffix in (".py", ".md", ".sh", ".j2", ".toml") and p.is_file():
                found += [
                    f"{p.relative_to(ROOT)}:{n}"
                    for n in outside_citations(p.read_text(errors="replace"))
                ]
    found += [f"README.md:{n}" for n in outside_citations((ROOT / "README.md").read_text())]
    assert not found, found
    assert outside_citations("see ARCHITECTURE" + ".md, Conventions\nfine") == [1]
