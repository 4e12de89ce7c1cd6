"""The import contract (ARCHITECTURE.md "Boundaries"), read from the source with ast -- imports
inside functions count too:

* the pure core (log, stateid, models, selection, shrink) imports only the standard library,
  ``errors`` and the pure core itself;
* nothing that judges or rebuilds states (replay, check, hostcheck, checkvm, campaign, guest)
  imports ``record`` (the host half of a recording);
* ``vm/`` never imports the image builder (``powercut.images``);
* ``workloads/`` and ``checkers/`` import only powercut's public API (``powercut.__all__``).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import powercut

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
PURE = {"log", "stateid", "models", "selection", "shrink"}
NO_RECORD = {"replay", "check", "hostcheck", "checkvm", "campaign", "guest", "journal", "verdict"}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def imported(source: str, package: str) -> list[str]:
    """Absolute module names a source imports (relative imports resolved against ``package``)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import x, y
                    out.extend(f"{mod}.{a.name}" for a in node.names)
                    continue
            else:
                mod = node.module or ""
            if mod == "powercut":  # from powercut import x: x may be a submodule
                out.extend(f"powercut.{a.name}" if a.name not in powercut.__all__ else "powercut"
                           for a in node.names)
            else:
                out.append(mod)
    return out


def violations(module: str, source: str) -> list[str]:
    """What ``module`` (a dotted name under powercut) imports against the contract."""
    package = module.rsplit(".", 1)[0]
    parts = module.split(".")
    bad = []
    for name in imported(source, package):
        top = name.split(".")[0]
        inner = name.split(".")[1] if name.startswith("powercut.") else ""
        if parts[:2] == ["powercut", parts[1]] and parts[1] in PURE and len(parts) == 2:
            if top != "powercut" and top not in STDLIB:
                bad.append(f"{module} (pure) imports third-party {name}")
            elif top == "powercut" and inner not in PURE | {"errors"}:
                bad.append(f"{module} (pure) imports {name}")
        if len(parts) == 2 and parts[1] in NO_RECORD and inner == "record":
            bad.append(f"{module} imports {name} (the host half of a recording)")
        if parts[:2] == ["powercut", "vm"] and inner == "images":
            bad.append(f"{module} imports the image builder {name}")
        if len(parts) > 2 and parts[1] in ("workloads", "checkers") and top == "powercut" and name != "powercut":
            bad.append(f"{module} imports {name}, not powercut's public API")
    return bad


def modules() -> list[tuple[str, Path]]:
    out = [(f"powercut.{p.stem}", p) for p in HARNESS.glob("*.py")]
    out += [(f"powercut.vm.{p.stem}", p) for p in (HARNESS / "vm").glob("*.py")]
    out += [(f"powercut.workloads.{p.stem}", p) for p in (ROOT / "workloads").rglob("*.py")]
    out += [(f"powercut.checkers.{p.stem}", p) for p in (ROOT / "checkers").rglob("*.py")]
    return out


def test_the_tree_keeps_the_contract() -> None:
    bad = [v for mod, path in modules() for v in violations(mod, path.read_text())]
    assert not bad, "\n".join(bad)


def test_the_checker_catches_deliberate_bad_imports() -> None:
    assert violations("powercut.replay", "from .record import load_recording\n")
    assert violations("powercut.check", "def f():\n    from powercut.record import record\n")
    assert violations("powercut.models", "import numpy\n")
    assert violations("powercut.models", "from .replay import plan\n")
    assert violations("powercut.stateid", "from . import process\n")
    assert violations("powercut.vm.accel", "from powercut.images.build import cache_root\n")
    assert violations("powercut.workloads.wal", "from powercut.check import judge\n")
    assert violations("powercut.checkers.wal", "from powercut import process\n")
    # and lets the allowed ones through
    assert not violations("powercut.models", "from .errors import UsageError\nfrom .log import Entry\nimport re\n")
    assert not violations("powercut.workloads.wal", "import powercut\nfrom powercut import ack, begin\n")
    assert not violations("powercut.replay", "from .recording import load\n")


def test_every_module_has_a_docstring_and_stays_small() -> None:
    big = []
    for mod, path in modules():
        src = path.read_text()
        if path.name != "__init__.py":
            assert ast.get_docstring(ast.parse(src)), f"{mod} has no module docstring"
        if len(src.splitlines()) > 450:
            big.append(f"{mod}: {len(src.splitlines())} lines")
    assert not big, big
