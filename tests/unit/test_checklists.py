"""docs/internals.md's "Adding ..." checklists stay true where a test can tell (issue 62 item 6):

* every file a checklist names -- in backticks, in a link or in its prose -- exists (from the
  repository's root or harness/; a link from the page), and a path with placeholders
  (``workloads/<module>.py``) names a file once filled in with the example its section cites
  ("the example is `idxstore`");
* every workload registered in pyproject.toml's ``powercut.workloads`` entry points has what
  "Adding a workload" says each has: its module, defining ``WORKLOAD`` under its name; a checker
  entry point of the same name whose module defines ``CHECKER``; its unit test file; matrix rows;
  a user's page naming it; a cluster workload named in the two packages' docstrings, and a module of
  workloads/ that is no workload in workloads/__init__.py's -- but for the exceptions ``GAPS``
  lists, each with why.  ``GAPS`` is exact (a gap closed must leave it) and the checklist names
  every workload it holds.

pyproject.toml is read, not the installed metadata: this checkout's entry points are the ones the
checklist speaks of.  Each check is tried on a made-up case it must flag."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INTERNALS = DOCS / "internals.md"
PYPROJECT = ROOT / "pyproject.toml"
MATRIX = ROOT / "checkers" / "matrix.toml"
BASES = (
    ROOT,
    ROOT / "harness",
)  # docs/internals.md: paths are the repository's, the package's in harness/

# -- the paths the checklists name ------------------------------------------------------------------

EXT = r"(?:py|toml|md|sh|go|c|j2|fio|txt|json|yml)"
PART = r"[\w.<>-]+"
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
FILE_PATH = re.compile(
    rf"(?<![\w/.<>-])((?:{PART}/)+{PART}\.{EXT})(?![\w/<>-])"
)  # core/states/models.py
WHOLE = re.compile(rf"((?:{PART}/)+(?:{PART}\.{EXT})?|[\w-]+\.(?:py|toml|md|sh|go|c|j2|fio))")
EXAMPLE = re.compile(r"the\s+example\s+is\s+`([\w-]+)`")
PLACEHOLDER = re.compile(r"<(\w+)>|\bNAME\b")
NODE_ID = re.compile(r"`((?:[\w.-]+/)+test_\w+\.py)::(\w+)`")  # `tests/unit/test_readme.py::test_x`


def checklists(text: str) -> dict[str, str]:
    """Each "## Adding ..." section of the page: heading -> its text up to the next "## " heading."""
    parts = re.split(r"^## ", text, flags=re.M)
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts[1:] if p.startswith("Adding ")}


def named_paths(section: str) -> tuple[list[Path], list[str]]:
    """(the targets of the section's relative links, resolved from docs/; the repository paths its
    backticks and prose name: a file with its extension anywhere, a directory or a bare file name
    only as a whole backticked token)."""
    links = [
        (DOCS / t.partition("#")[0]).resolve()
        for _, t in LINK.findall(section)
        if t.partition("#")[0] and not re.match(r"[a-z][a-z0-9+.-]*:", t)
    ]
    prose = LINK.sub(
        lambda m: m.group(1), section
    )  # link texts stay, their targets are counted above
    names = FILE_PATH.findall(prose)
    for tok in re.findall(r"`([^`\n]+)`", prose):
        tok = tok.split("::")[0]
        if WHOLE.fullmatch(tok):
            names.append(tok)
    return links, list(dict.fromkeys(names))


def filled(name: str, example: str | None) -> tuple[str | None, str]:
    """The path with its placeholders filled in from the section's example (``<name>``, ``NAME``: the
    example; ``<module>``: its module's name); (None, why) when it cannot be."""
    holes = {m.group(1) or "name" for m in PLACEHOLDER.finditer(name)}
    if not holes:
        return name, ""
    if unknown := holes - {"name", "module"}:
        return None, f"unknown placeholder(s) {', '.join(sorted(unknown))}"
    if example is None:
        return None, "placeholders, and the section cites no example ('the example is `NAME`')"
    words = {"name": example, "module": example.replace("-", "_")}
    return PLACEHOLDER.sub(lambda m: words[m.group(1) or "name"], name), ""


def stale_paths(section: str) -> list[str]:
    """What the section names that does not exist: each with why."""
    m = EXAMPLE.search(section)
    example = m.group(1) if m else None
    links, names = named_paths(section)
    bad = [
        f"link to {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}: no such file"
        for p in links
        if not p.exists()
    ]
    for name in names:
        path, why = filled(name, example)
        if path is None:
            bad.append(f"{name}: {why}")
        elif not any((base / path).exists() for base in BASES):
            bad.append(
                f"{name}: no such file"
                + (f" ({path}, for the example {example})" if path != name else "")
            )
    for path, test in NODE_ID.findall(section):  # a test named by its node id: its file defines it
        if (ROOT / path).is_file() and not re.search(
            rf"^def {test}\(", (ROOT / path).read_text(), re.M
        ):
            bad.append(f"{path}::{test}: no such test")
    return bad


def test_the_checklists_are_there() -> None:
    assert set(checklists(INTERNALS.read_text())) >= {
        "Adding a crash model",
        "Adding a cause rule",
        "Adding a workload",
        "Adding a checker",
        "Adding a CLI option",
    }


def test_every_path_a_checklist_names_exists() -> None:
    bad = [
        f"{heading}: {b}"
        for heading, text in checklists(INTERNALS.read_text()).items()
        for b in stale_paths(text)
    ]
    assert not bad, "docs/internals.md's checklists name what is not there:\n" + "\n".join(bad)


def test_the_workload_checklist_names_files_through_its_example() -> None:
    text = checklists(INTERNALS.read_text())["Adding a workload"]
    _, names = named_paths(text)
    assert {
        "workloads/<module>.py",
        "checkers/<module>.py",
        "tests/unit/checkers/test_<module>.py",
        "checkers/matrix.toml",
        "pyproject.toml",
    } <= set(names)


def test_the_path_check_flags_what_is_not_there() -> None:
    section = (
        "the example is `append-fsync`: `workloads/<module>.py`, `harness/core/nowhere.py`, "
        "[x](../harness/nowhere.py), checkers/<name>.py, `core/states/`, `core/gone/`, `README.md`, `NOTES.md`"
        " and [a heading](#adding-a-workload)"
    )
    assert stale_paths(section) == [
        "link to harness/nowhere.py: no such file",
        "harness/core/nowhere.py: no such file",
        "checkers/<name>.py: no such file (checkers/append-fsync.py, for the example append-fsync)",
        "core/gone/: no such file",
        "NOTES.md: no such file",
    ]
    assert stale_paths("`tests/unit/checkers/test_<module>.py`") == [
        "tests/unit/checkers/test_<module>.py: placeholders, and the section cites no example ('the example is `NAME`')"
    ]
    assert stale_paths("the example is `wal`: `checkers/<colour>.py`") == [
        "checkers/<colour>.py: unknown placeholder(s) colour"
    ]
    # code and commands are no paths; a test's node id is its file and a test in it
    assert (
        stale_paths(
            "`powercut.checker.get(name)`, `bash ci/setup.sh`, `--workload <name>`, `MODEL@CUT/`, and/or, "
            "`tests/unit/test_readme.py::test_readme_is_short`"
        )
        == []
    )
    assert stale_paths("`tests/unit/test_readme.py::test_x`") == [
        "tests/unit/test_readme.py::test_x: no such test"
    ]


# -- every workload has what the checklist says ---------------------------------------------------------


def module_of(name: str) -> str:
    return name.replace("-", "_")


def registered(obj: str, path: Path) -> str | None:
    """The ``name`` of the ``obj = Workload(...)``/``Checker(...)`` a module assigns at its top; None if none."""
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == obj for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            given = [k.value for k in node.value.keywords if k.arg == "name"] + node.value.args[:1]
            return given[0].value if given and isinstance(given[0], ast.Constant) else ""
    return None


def target(value: str, package: str, obj: str) -> str | None:
    """The module an entry point's value names in ``package`` (``powercut.checkers.wal:CHECKER`` -> ``wal``)."""
    m = re.fullmatch(rf"powercut\.{package}\.(\w+):{obj}", value.strip())
    return m.group(1) if m else None


def named_in(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"no '## {heading}'"
    return m.group(1)


@dataclass
class Tree:
    """What the rules read: the entry points and the files, the real ones unless a test says otherwise."""

    workloads: dict[str, str] = field(default_factory=dict)  # entry point name -> value
    checkers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def real(cls) -> Tree:
        eps = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
        return cls(dict(eps["powercut.workloads"]), dict(eps["powercut.checkers"]))


def matrix_nodes() -> dict[str, int]:
    """Each workload with rows in the verdict matrix -> the most nodes a row of it records."""
    out: dict[str, int] = {}
    for row in tomllib.loads(MATRIX.read_text()).get("row", []):
        out[row["workload"]] = max(out.get(row["workload"], 0), int(row.get("nodes", 1)))
    return out


def users_pages() -> str:
    """Where the checklist says a user reads about a workload: plugins.md's list, clusters.md, races.md."""
    return "\n".join(
        (
            section((DOCS / "plugins.md").read_text(), "The built-in workloads"),
            (DOCS / "clusters.md").read_text(),
            (DOCS / "races.md").read_text(),
        )
    )


def gaps(tree: Tree) -> dict[str, set[str]]:
    """Each rule of "Adding a workload" -> the workloads (or modules) that break it."""
    out: dict[str, set[str]] = {}
    rows = matrix_nodes()
    pages = users_pages()
    wl_doc, ck_doc = (
        docstring(ROOT / "workloads" / "__init__.py"),
        docstring(ROOT / "checkers" / "__init__.py"),
    )

    def rule(what: str, names: Iterable[str | None]) -> None:
        out[what] = {n for n in names if n is not None}

    w = tree.workloads
    rule(
        "module",
        (
            n
            for n, v in w.items()
            if target(v, "workloads", "WORKLOAD") != module_of(n)
            or registered("WORKLOAD", ROOT / "workloads" / f"{module_of(n)}.py") != n
        ),
    )
    rule(
        "checker entry point",
        (
            n
            for n in w
            if (m := target(tree.checkers.get(n, ""), "checkers", "CHECKER")) is None
            or registered("CHECKER", ROOT / "checkers" / f"{m}.py") is None
        ),
    )
    rule("checker entry point without a workload", set(tree.checkers) - set(w))
    rule(
        "own checker module",
        (
            n
            for n in w
            if target(tree.checkers.get(n, ""), "checkers", "CHECKER") != module_of(n)
            or registered("CHECKER", ROOT / "checkers" / f"{module_of(n)}.py") != n
        ),
    )
    rule(
        "unit test",
        (
            n
            for n in w
            if not (ROOT / "tests" / "unit" / "checkers" / f"test_{module_of(n)}.py").is_file()
        ),
    )
    rule("matrix rows", (n for n in w if n not in rows))
    rule("user's page", (n for n in w if f"`{n}`" not in pages))
    cluster = [n for n in w if rows.get(n, 1) > 1]
    rule(
        "cluster workload named in workloads/__init__.py",
        (n for n in cluster if not named_in(wl_doc, n)),
    )
    rule(
        "cluster checker named in checkers/__init__.py",
        (n for n in cluster if not named_in(ck_doc, n)),
    )
    workloads_modules = {target(v, "workloads", "WORKLOAD") for v in w.values()}
    rule(
        "module of workloads/ that is no workload named in workloads/__init__.py",
        (
            p.stem
            for p in (ROOT / "workloads").glob("*.py")
            if p.stem != "__init__"
            and p.stem not in workloads_modules
            and not named_in(wl_doc, p.stem)
        ),
    )
    return out


# rule -> {workload or module: why the rule does not hold for it (today)}
GAPS: dict[str, dict[str, str]] = {
    "own checker module": {
        "gotwofile": "twofile's store written by a Go program: twofile's checker judges it"
    },
    "matrix rows": {
        "gotwofile": "needs Go on the host; its race is shown by tests/vm/test_delaysync_vm.py",
        "pggroup": "a race program explored by run --explore-races (docs/races.md), not a matrix row",
    },
}


def test_every_workload_has_what_the_checklist_says() -> None:
    tree = Tree.real()
    assert len(tree.workloads) >= 10 and "idxstore" in tree.workloads
    found = {rule: names for rule, names in gaps(tree).items() if names}
    assert found == {rule: set(names) for rule, names in GAPS.items()}, (
        "the workloads and 'Adding a workload' disagree (a gap closed: drop it from GAPS and the checklist; a new "
        f"one: fix it, or list it with why): {found}"
    )


def test_the_checklist_names_each_exception() -> None:
    text = checklists(INTERNALS.read_text())["Adding a workload"]
    unnamed = sorted(n for names in GAPS.values() for n in names if not named_in(text, n))
    assert not unnamed, f"'Adding a workload' does not name the exceptions {unnamed}"


def test_the_workload_rules_flag_a_made_up_workload() -> None:
    real = Tree.real()
    ghost = Tree(
        {
            **real.workloads,
            "ghost-db": "powercut.workloads.ghost_db:WORKLOAD",
            "walrus": "powercut.workloads.wal:WORKLOAD",
        },  # a module registered under another name
        {
            **real.checkers,
            "walrus": "powercut.checkers.wal:CHECKER",
            "orphan": "powercut.checkers.wal:CHECKER",
        },
    )
    found = gaps(ghost)
    for rule in ("module", "checker entry point", "unit test", "matrix rows", "user's page"):
        assert "ghost-db" in found[rule], rule
    assert "walrus" in found["module"] and "walrus" in found["own checker module"]
    assert "walrus" not in found["checker entry point"]  # it has one: wal's
    assert found["checker entry point without a workload"] == {"orphan"}
    assert (
        "ghost-db" not in found["cluster workload named in workloads/__init__.py"]
    )  # no cluster rows: no rule


def test_the_name_lookups() -> None:
    assert registered("WORKLOAD", ROOT / "workloads" / "idxstore.py") == "idxstore"
    assert registered("CHECKER", ROOT / "checkers" / "twofile.py") == "twofile"
    assert registered("WORKLOAD", ROOT / "workloads" / "pgserver.py") is None
    assert target("powercut.checkers.append_fsync:CHECKER", "checkers", "CHECKER") == "append_fsync"
    assert target("my_package.crash:CHECKER", "checkers", "CHECKER") is None
    assert named_in("``etcd`` (three etcd members)", "etcd") and not named_in(
        "``etcdcluster``", "etcd"
    )
    assert matrix_nodes()["replog"] > 1 and matrix_nodes()["wal"] == 1
