"""linux/environ.py: every POWERCUT_* variable is named there once, read through it, and listed in
docs/settings.md; a bad knob is one UsageError line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from powercut.core.states.selection import DEMO_SELECTION, RUN_SELECTION, SelectionSpec
from powercut.errors import UsageError
from powercut.linux import environ

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [
    p
    for d in ("harness", "vm-images", "workloads", "checkers")
    for p in (ROOT / d).rglob("*")
    if p.suffix in (".py", ".c", ".sh")
]
DOCS = (ROOT / "docs" / "settings.md").read_text()


def test_every_variable_in_the_source_is_in_the_table() -> None:
    named = {v.name for v in environ.VARIABLES}
    seen = {
        m
        for p in SOURCES
        for m in re.findall(r"POWERCUT_[A-Z][A-Z_]*[A-Z]", p.read_text(errors="replace"))
    }
    assert seen - named == set()
    assert named - seen == set(), "a variable in the table that nothing names"


def test_only_environ_reads_them() -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in SOURCES
        if p.suffix == ".py" and p.name != "environ.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"""environ(\.get\(|\[)\s*["']POWERCUT_|getenv\(\s*["']POWERCUT_""", line)
    ]
    assert bad == []


def test_the_docs_list_every_variable_with_its_default() -> None:
    for v in environ.VARIABLES:
        assert f"| `{v.name}` | {v.kind} | {v.default} | {v.meaning} |" in DOCS, v.name


def test_the_docs_give_each_selection_default_as_the_code_has_it() -> None:
    for name in ("bound", "samples", "torn_samples"):
        row = next(line for line in DOCS.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2:5] == [
            str(getattr(s, name)) for s in (SelectionSpec(), RUN_SELECTION, DEMO_SELECTION)
        ]


@pytest.mark.parametrize("raw", ["soon", "0", "-3", "nan"])
def test_a_bad_number_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(environ.BOOT_TIMEOUT, raw)
    with pytest.raises(UsageError, match=environ.BOOT_TIMEOUT) as e:
        environ.number(environ.BOOT_TIMEOUT, 5.0)
    assert "\n" not in str(e.value)


def test_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environ.BOOT_TIMEOUT, raising=False)
    assert environ.number(environ.BOOT_TIMEOUT, 5.0) == 5.0
    monkeypatch.setenv(environ.BOOT_TIMEOUT, "")
    assert environ.number(environ.BOOT_TIMEOUT, 5.0) == 5.0
    monkeypatch.setenv(environ.BOOT_TIMEOUT, "7.5")
    assert environ.number(environ.BOOT_TIMEOUT, 5.0) == 7.5
