"""Every subprocess goes through the one runner, linux/process.py (docs/internals.md, Conventions):
no other module of the tree (harness/, vm-images/, workloads/, checkers/, ci/, bench/) imports
``subprocess`` or ``pty``, or calls ``os.system``, ``os.popen``, ``os.exec*``, ``os.spawn*``,
``os.fork*`` or ``asyncio.create_subprocess_*`` -- except the modules of ``ALLOWED``, each with the
reason it cannot.  A deliberate violation is caught, and an exception no longer needed is too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("harness", "vm-images", "workloads", "checkers", "ci", "bench")
RUNNER = "harness/linux/process.py"
MODULES = {"subprocess", "pty"}
OS_CALLS = ("system", "popen", "exec", "spawn", "fork", "posix_spawn")

# the exceptions, each with its reason (a path relative to the repository)
PLUGIN = (
    "a plug-in: workloads/ and checkers/ import only powercut's public API (docs/plugins.md), "
    "and the runner (powercut.linux.process) is not part of it"
)
ALLOWED = {
    "workloads/postgres.py": PLUGIN,
    "workloads/pgsync.py": PLUGIN,
    "workloads/pgserver.py": PLUGIN,
    "workloads/gotwofile.py": PLUGIN,
    "workloads/gobuild.py": PLUGIN,
    "workloads/etcdcluster.py": PLUGIN,
    "checkers/postgres.py": PLUGIN,
    "checkers/etcd.py": PLUGIN,
    "bench/bench_scale.py": "its peak-memory figure is os.wait4's rusage of one child, which the runner does not "
    "return (the recording it makes goes through the runner)",
    "bench/baseline482.py": "fstests' generic/482 loop reproduced as its shell runs it, the tools' output "
    "redirected to the seqres file descriptor: the baseline the judge is measured against",
}


def uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of each way ``source`` starts a process without the runner."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [
                (node.lineno, f"import {a.name}")
                for a in node.names
                if a.name.split(".")[0] in MODULES
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] in MODULES
        ):
            out.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            out += [
                (node.lineno, f"from os import {a.name}")
                for a in node.names
                if a.name.startswith(OS_CALLS)
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr.startswith(OS_CALLS):
                out.append((node.lineno, f"os.{node.attr}"))
            elif node.value.id == "asyncio" and node.attr.startswith("create_subprocess"):
                out.append((node.lineno, f"asyncio.{node.attr}"))
    return out


def files() -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for t in TREES
        for p in (ROOT / t).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def test_only_the_runner_starts_processes() -> None:
    bad = [
        f"{path}:{line}: {what}"
        for path in files()
        if path != RUNNER and path not in ALLOWED
        for line, what in uses((ROOT / path).read_text())
    ]
    assert bad == [], (
        "start processes through powercut.linux.process (or add the module to ALLOWED, "
        "with its reason):\n" + "\n".join(bad)
    )


def test_every_exception_is_still_needed() -> None:
    """An exception whose module no longer starts a process directly is dropped from the list."""
    stale = [
        path
        for path in ALLOWED
        if not (ROOT / path).is_file() or not uses((ROOT / path).read_text())
    ]
    assert stale == []


def test_the_runner_is_where_the_check_looks() -> None:
    assert uses((ROOT / RUNNER).read_text())


def test_a_deliberate_violation_is_caught() -> None:
    assert uses("import subprocess\n") == [(1, "import subprocess")]
    assert uses("from subprocess import run\n") == [(1, "from subprocess import ...")]
    assert uses("import os\nos.system('mount -t tracefs nodev /sys/kernel/tracing')\n") == [
        (2, "os.system")
    ]
    assert uses("import os\nos.execvp('sh', ['sh'])\n") == [(2, "os.execvp")]
    assert uses("from os import popen\n") == [(1, "from os import popen")]
    assert uses("import asyncio\nasyncio.create_subprocess_exec('ls')\n") == [
        (2, "asyncio.create_subprocess_exec")
    ]
    assert uses("import pty\n") == [(1, "import pty")]
    # the runner's own users pass
    assert (
        uses(
            "from powercut.linux import process\nprocess.run(['ls'], timeout=5)\nimport os\nos.getpid()\n"
        )
        == []
    )
