"""The import contract (docs/internals.md "Layers"), read from the source with ast; imports inside
functions count too:

* each part sits in one layer and imports only its own part and parts of lower layers (two parts of
  one layer never import each other); inside ``core/`` each domain likewise (``CORE_LAYERS``: the
  crash states and the crash models are one layer, they use each other);
* outside ``record/`` only ``record.recording`` (the format) is imported, and ``record.vm`` (the VM driver) only by
  ``campaign/`` and ``cli/``; ``guest/`` imports ``vm.guestjob`` and no other part of ``vm/``;
* third-party packages only where the table allows them;
* no import cycle between modules;
* imports inside functions only in ``cli/`` and ``guest/`` (start-up cost) and for the optional
  dependencies (libvirt, matplotlib);
* absolute imports only; every module has a docstring (no size cap: a module is sized by its idea); each package's
  ``__init__`` docstring names every module and subpackage of the package;
* ``workloads/`` and ``checkers/`` import only powercut's public API (``powercut.__all__``) and their own
  package; a checker may also import ``workloads/`` (workloads/pgserver.py runs PostgreSQL for both);
* no ``_private`` name of one module is imported by another (a name used across modules is public).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import powercut

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

LAYERS = (
    {"errors"},
    {"core", "linux"},
    {"config", "registry", "_pycall", "_logmark"},
    {"faults"},
    {"marks", "workload", "checker"},
    {""},
    {"vm", "images"},
    {"vmstart"},
    {"record"},
    {"replay"},
    {"check", "bench"},
    {"debug"},
    {"report"},
    {"campaign"},
    {"guest", "cli", "pytest_plugin"},
)
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}
THIRD_PARTY = {
    "tomli_w": {"config"},
    "rich": {"report", "cli"},
    "matplotlib": {"report"},
    "libvirt": {"vm"},
    "pytest": {"pytest_plugin"},
    "jinja2": {"report"},
}
# core/'s domains, lowest first: a domain imports its own modules and lower domains' (core/__init__.py)
CORE_LAYERS = ({"log"}, {"trace"}, {"recording"}, {"states", "crashmodels"}, {"judging"}, {"cause"})
CORE_LAYER = {d: i for i, ds in enumerate(CORE_LAYERS) for d in ds}
OPTIONAL = {"libvirt", "matplotlib"}  # may be imported inside a function anywhere they are allowed
LAZY_PARTS = {"cli", "guest", "pytest_plugin"}  # start-up cost: imports inside functions allowed
LAZY_RULE = True


@dataclass(frozen=True)
class Imp:
    name: str  # absolute module (or module.attr) name
    line: int
    in_function: bool
    relative: bool


def part_of(module: str) -> str | None:
    """The part of a powercut module name: 'core' for powercut.core.states.models, 'config' for
    powercut.config, '' for the package root; None for workloads/checkers."""
    if module == "powercut":
        return ""
    bits = module.split(".")
    if bits[0] != "powercut":
        return None
    if bits[1] in ("workloads", "checkers"):
        return None
    return bits[1]


def imports(source: str, module: str) -> list[Imp]:
    """Every import of a source, with relative ones resolved against ``module``'s package."""
    tree = ast.parse(source)
    funcs = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if n is not f
    }
    is_pkg = module.endswith(".__init__")
    module = module.removesuffix(".__init__")
    out: list[Imp] = []
    for node in ast.walk(tree):
        inside = id(node) in funcs
        if isinstance(node, ast.Import):
            out.extend(Imp(a.name, node.lineno, inside, False) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                full = f"{mod}.{a.name}"
                if mod == "powercut" and a.name in powercut.__all__:
                    full = "powercut"
                out.append(
                    Imp(full if _is_module(full) else mod, node.lineno, inside, bool(node.level))
                )
    return out


def _is_module(name: str) -> bool:
    """Is the dotted name a module or package of the tree (for 'from powercut.x import y')?"""
    if not name.startswith("powercut."):
        return False
    bits = name.split(".")[1:]
    base = {
        "images": ROOT / "vm-images",
        "workloads": ROOT / "workloads",
        "checkers": ROOT / "checkers",
    }
    top = base.get(bits[0], HARNESS / bits[0])
    path = top if bits[0] in base else HARNESS.joinpath(*bits)
    if bits[0] in base:
        path = top.joinpath(*bits[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(module: str, source: str, *, lazy: bool | None = None) -> list[str]:
    """What ``module`` (a dotted name under powercut; packages as ``pkg.__init__``) imports against
    the contract."""
    me = module.removesuffix(".__init__")
    lazy = LAZY_RULE if lazy is None else lazy
    bad: list[str] = []
    plugin = me.startswith(("powercut.workloads", "powercut.checkers"))
    mine = part_of(me)
    for imp in imports(source, module):
        top = imp.name.split(".")[0]
        where = f"{module}:{imp.line}"
        if imp.relative and not plugin:
            bad.append(f"{where} imports {imp.name} relatively (imports are absolute)")
        if plugin:
            # its own package; a checker also the workloads' (the program it checks: how it is run)
            own = (me.rsplit(".", 1)[0],) + (
                ("powercut.workloads",) if me.startswith("powercut.checkers") else ()
            )
            if top == "powercut" and imp.name != "powercut" and not imp.name.startswith(own):
                bad.append(f"{where} imports {imp.name}, not powercut's public API")
            continue
        if top == "powercut":
            theirs = part_of(imp.name)
            if theirs is None:
                bad.append(f"{where} imports the plug-in {imp.name}")
                continue
            if theirs not in LAYER or mine not in LAYER:
                bad.append(f"{where}: {imp.name} or {me} is in no layer")
                continue
            if theirs != mine and LAYER[theirs] >= LAYER[mine]:
                bad.append(
                    f"{where}: {mine or 'powercut'}/ (layer {LAYER[mine]}) imports {imp.name} "
                    f"(layer {LAYER[theirs]})"
                )
            if theirs == "record" and mine != "record":
                drivers = ("powercut.record.vm",)  # the VM driver (one disk or a cluster)
                if imp.name not in ("powercut.record.recording",) and not imp.name.startswith(
                    drivers
                ):
                    bad.append(f"{where} imports {imp.name}: outside record/ only record.recording")
                if imp.name.startswith(drivers) and mine not in ("campaign", "cli"):
                    bad.append(
                        f"{where} imports {imp.name}: record.vm is for campaign/ and cli/ only"
                    )
            if (
                mine == "guest"
                and theirs in ("vm", "images")
                and imp.name != "powercut.vm.guestjob"
            ):
                bad.append(f"{where} imports {imp.name}: the guest uses vm.guestjob only")
        elif top not in STDLIB:
            allowed = THIRD_PARTY.get(top)
            if allowed is None or mine not in allowed:
                bad.append(f"{where} imports third-party {imp.name}")
        if (
            lazy
            and imp.in_function
            and mine not in LAZY_PARTS
            and top not in OPTIONAL | STDLIB
            and me not in LATE_IMPORTS
        ):  # (LATE_IMPORTS: a measured reason, in the recorded program)
            bad.append(
                f"{where} imports {imp.name} inside a function (only cli/, guest/ and optional "
                f"dependencies do)"
            )
    return bad


def modules() -> list[tuple[str, Path]]:
    out = []
    for p in sorted(HARNESS.rglob("*.py")):
        rel = p.relative_to(HARNESS).with_suffix("")
        out.append((".".join(("powercut",) + rel.parts), p))
    for base, pkg in (
        (ROOT / "vm-images", "images"),
        (ROOT / "workloads", "workloads"),
        (ROOT / "checkers", "checkers"),
    ):
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(base).with_suffix("")
            out.append((".".join(("powercut", pkg) + rel.parts), p))
    return out


def graph() -> dict[str, set[str]]:
    """module -> the powercut modules it imports (package __init__ files under the package's name)."""
    names = {m.removesuffix(".__init__") for m, _ in modules()}
    g: dict[str, set[str]] = {}
    for mod, path in modules():
        me = mod.removesuffix(".__init__")
        deps = set()
        for imp in imports(path.read_text(), mod):
            n = imp.name
            while n and n not in names:
                n = n.rpartition(".")[0]
            if n and n != me:
                deps.add(n)
        g[me] = deps
    return g


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, or None (a package's __init__ importing its own modules counts
    as an edge like any other)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(g.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_the_tree_keeps_the_contract() -> None:
    bad = [v for mod, path in modules() for v in violations(mod, path.read_text())]
    assert not bad, "\n".join(bad)


def test_the_checker_catches_deliberate_bad_imports() -> None:
    assert violations("powercut.replay.materialize", "from powercut.record.vm import record\n")
    assert violations(
        "powercut.check.judge", "def f():\n    from powercut.record.vm import record\n"
    )
    assert violations("powercut.core.states.models", "import numpy\n")
    assert violations(
        "powercut.core.states.models", "from powercut.replay.materialize import plan\n"
    )
    assert violations(
        "powercut.core.states.stateid", "from powercut.linux import process\n"
    )  # same layer
    assert violations("powercut.vm.accel", "from powercut.images.build import cache_root\n")
    assert violations("powercut.check.judge", "from powercut.bench import parse\n")  # same layer
    assert violations("powercut.report.summary", "from powercut.campaign.phases import flaky\n")
    assert violations("powercut.guest.check", "from powercut.vm.qemu import run_vm\n")
    assert violations("powercut.debug.triage", "from . import bundle\n")  # relative
    assert violations("powercut.check.vm", "def f():\n    from powercut.debug import blame\n")
    assert violations(
        "powercut.check.host", "def f():\n    from powercut.replay import snapshot\n", lazy=True
    )
    assert violations("powercut.debug.bundle", "def f():\n    import rich\n", lazy=True)
    assert violations("powercut.report.summary", "import libvirt\n")
    assert violations("powercut.workloads.wal", "from powercut.check.judge import judge\n")
    assert violations("powercut.checkers.wal", "from powercut.linux import process\n")
    # and lets the allowed ones through
    assert not violations(
        "powercut.core.states.models",
        "from powercut.errors import UsageError\n"
        "from powercut.core.log.dmlog import Entry\nimport re\n",
    )
    assert not violations(
        "powercut.workloads.wal", "import powercut\nfrom powercut import ack, begin\n"
    )
    assert not violations(
        "powercut.checkers.pgsync", "from powercut.workloads.pgserver import bindir\n"
    )
    assert violations(
        "powercut.workloads.pgsync", "from powercut.checkers.postgres import Server\n"
    )
    assert not violations(
        "powercut.replay.materialize", "from powercut.record.recording import load\n"
    )
    assert not violations(
        "powercut.cli.check",
        "def f():\n    from powercut.campaign.run import run_campaign\n",
        lazy=True,
    )
    assert not violations("powercut.vm.libvirt", "def f():\n    import libvirt\n", lazy=True)
    assert not violations(
        "powercut.report.bench", "def plot():\n    import matplotlib\n", lazy=True
    )
    assert not violations("powercut.check.host", "def f():\n    import json\n", lazy=True)


def test_no_import_cycle() -> None:
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()) or [])


def test_the_cycle_check_finds_a_deliberate_cycle() -> None:
    g = graph()
    assert find_cycle(
        {**g, "powercut.linux.dm": g["powercut.linux.dm"] | {"powercut.replay.dmsnapshot"}}
    )
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_every_module_has_a_docstring() -> None:
    """A module is sized by what belongs together, not by a line count: one that grows past its idea
    is a review finding, not a test failure (issue 62)."""
    for mod, path in modules():
        src = path.read_text()
        if path.name not in ("__init__.py",) or path.parent == HARNESS:
            assert ast.get_docstring(ast.parse(src)), f"{mod} has no module docstring"


def test_each_package_init_names_its_modules() -> None:
    missing = []
    for init in sorted(HARNESS.glob("*/**/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        where = init.parent.relative_to(HARNESS)
        subpackages = [
            d / "__init__.py" for d in init.parent.iterdir() if (d / "__init__.py").is_file()
        ]
        for p in sorted(init.parent.glob("*.py")) + sorted(subpackages):
            stem = p.parent.name if p.name == "__init__.py" else p.stem
            if p != init and f"``{stem}``" not in doc and stem not in doc.split():
                missing.append(f"{where}/__init__.py does not name {stem}")
    assert not missing, "\n".join(missing)


def core_domain(module: str) -> str | None:
    """The domain of a core module (``states`` for powercut.core.states.models); None outside core/
    or for core's own ``__init__``."""
    bits = module.removesuffix(".__init__").split(".")
    if bits[:2] != ["powercut", "core"] or len(bits) < 3:
        return None
    return bits[2]


def core_violations(g: dict[str, set[str]]) -> list[str]:
    """The imports of ``g`` (``graph``) by which a core domain reaches a higher one or an unlisted one."""
    out = []
    for me, deps in sorted(g.items()):
        mine = core_domain(me)
        if mine is None:
            continue
        if mine not in CORE_LAYER:
            out.append(f"{me}: core domain {mine!r} is in no layer of CORE_LAYERS")
            continue
        for d in sorted(deps):
            theirs = core_domain(d)
            if (
                theirs is not None
                and theirs in CORE_LAYER
                and CORE_LAYER[theirs] > CORE_LAYER[mine]
            ):
                out.append(f"{me} imports {d}: {theirs} is above {mine}")
    return out


def test_core_domains_import_only_their_own_and_lower_ones() -> None:
    assert not core_violations(graph()), "\n".join(core_violations(graph()))


def test_the_core_domain_check_catches_an_upward_import_and_an_unlisted_domain() -> None:
    g = {
        "powercut.core.log.dmlog": {"powercut.core.states.crashstate"},
        "powercut.core.states.models": {
            "powercut.core.crashmodels.registry",
            "powercut.core.log.dmlog",
        },
        "powercut.core.crashmodels.registry": {"powercut.core.states.coverage"},
        "powercut.core.misc.x": set(),
    }
    assert core_violations(g) == [
        "powercut.core.log.dmlog imports powercut.core.states.crashstate: states is above log",
        "powercut.core.misc.x: core domain 'misc' is in no layer of CORE_LAYERS",
    ]


def private_imports(module: str, source: str) -> list[str]:
    """The ``_private`` names (not modules) ``module`` imports from another powercut module: a name
    used across modules is public (issue 49: record/cluster imported three of record/vm's)."""
    me = module.removesuffix(".__init__")
    bad = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").startswith("powercut")
        ):
            for a in node.names:
                dunder = a.name.startswith("__") and a.name.endswith(
                    "__"
                )  # __doc__, __version__: public
                if (
                    a.name.startswith("_")
                    and not dunder
                    and node.module != me
                    and not _is_module(f"{node.module}.{a.name}")
                ):
                    bad.append(
                        f"{module}:{node.lineno} imports {node.module}.{a.name}, a private name"
                    )
    return bad


def test_no_private_name_is_imported_across_modules() -> None:
    bad = [v for mod, path in modules() for v in private_imports(mod, path.read_text())]
    assert not bad, "\n".join(bad)


def test_the_private_name_check_catches_one() -> None:
    assert private_imports(
        "powercut.campaign.matrix", "from powercut.record.vm import _judge as judge\n"
    )
    assert not private_imports(
        "powercut.marks", "from powercut import _logmark as logmark\n"
    )  # a module
    assert not private_imports(
        "powercut.campaign.matrix", "from powercut.record.vm import judge_result\n"
    )


# -- imports at module top ------------------------------------------------------------------------
# modules that import powercut inside functions, each with its reason (written beside the imports too)
LATE_IMPORTS = {
    "powercut.cli.check": "command start-up (cli/__init__.py: 108 ms against 230 ms, measured)",
    "powercut.cli.record": "command start-up (cli/__init__.py)",
    "powercut.cli.bench": "command start-up (cli/__init__.py)",
    "powercut.cli.inspect": "command start-up (cli/__init__.py)",
    "powercut.cli.parser": "command start-up (cli/__init__.py)",
    "powercut.cli.argtypes": "command start-up (cli/__init__.py): the value types parser.py held",
    "powercut.cli.setup": "command start-up (cli/__init__.py)",
    "powercut.pytest_plugin": "loaded in every pytest session of a project that has powercut installed",
    "powercut.guest.check": "every checker VM imports it, under TCG at 10-50x the cost; one job needs them",
    "powercut.guest.template": "the agent resolves only on the sys.path a restored VM sets at that point",
    "powercut.linux.dm": "a mark runs it in the recorded program: its imports were 12 of marks' 26 ms natively, "
    "~0.9 s of a recording under TCG and strace (modprobe's runner only where used)",
    "powercut.marks": "the recorded program imports it: the fault plan's modules (4.7 ms natively) only when a "
    "recording has a plan",
}


def late_imports(source: str) -> list[int]:
    """The lines of the powercut imports inside functions of ``source``."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else ([a.name for a in node.names] if isinstance(node, ast.Import) else [])
                )
                if any(n == "powercut" or n.startswith("powercut.") for n in names):
                    out.append(node.lineno)
    return sorted(set(out))


def test_powercut_is_imported_at_module_top_but_where_a_reason_is_written() -> None:
    bad = [
        f"{mod}:{line}"
        for mod, path in modules()
        if mod not in LATE_IMPORTS
        for line in late_imports(path.read_text())
    ]
    assert not bad, (
        "import at module top, or add the module to LATE_IMPORTS with its measured reason:\n"
        + "\n".join(bad)
    )
    stale = [
        mod
        for mod in LATE_IMPORTS
        if not any(m == mod and late_imports(p.read_text()) for m, p in modules())
    ]
    assert not stale, f"no late import left in {stale}: remove them from LATE_IMPORTS"


def test_the_late_import_check_catches_one() -> None:
    assert late_imports("def f():\n    from powercut.core import models\n") == [2]
    assert late_imports("import os\nfrom powercut.core import models\n") == []
