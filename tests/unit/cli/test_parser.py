"""cli/parser.py: every option's default is written once (docs/settings.md).  Each option with a
default either takes it from the one place the library has it (``SOURCES``: a spec's field, a
constant, a function's keyword) or is the parser's own (``OWN``, with why); a help text that quotes
a default quotes the option's real one.  A deliberately wrong default, a wrong quote and an option
in neither table are each caught."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from powercut import config
from powercut.bench.run import BenchRequest, BenchVmSpec
from powercut.campaign import matrix
from powercut.campaign.demo import DemoSpec
from powercut.campaign.run import CampaignSpec
from powercut.check.place import Place
from powercut.cli import parser as cliparser
from powercut.config import FsSpec, WorkloadSpec
from powercut.core.recording import syncdelay
from powercut.images.build import ImageSpec
from powercut.record.vm import RecordSpec


def field(cls: type, name: str) -> Callable[[], Any]:
    """The default of a dataclass field (read when the test runs)."""

    def get() -> Any:
        f = {f.name: f for f in dataclasses.fields(cls)}[name]
        return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]

    return get


RECORD = ("run", "record")
CHECK = ("run", "check")
# (commands, option dest) -> where its default is written
SOURCES: dict[tuple[tuple[str, ...], str], Callable[[], Any]] = {
    (RECORD, "accel"): field(RecordSpec, "accel"),
    (RECORD, "backend"): field(RecordSpec, "backend"),
    (RECORD, "libvirt_uri"): field(RecordSpec, "libvirt_uri"),
    (RECORD, "memory"): field(RecordSpec, "memory_mb"),
    (RECORD, "cpus"): field(RecordSpec, "cpus"),
    (RECORD, "bus"): field(RecordSpec, "bus"),
    (RECORD, "transport"): field(RecordSpec, "transport"),
    (RECORD, "vm_timeout"): field(RecordSpec, "timeout_s"),
    (RECORD, "log_size"): field(RecordSpec, "log_size_mb"),
    (RECORD, "disk_latency"): lambda: str(field(RecordSpec, "latency")()),
    (RECORD, "fault"): field(WorkloadSpec, "fault"),
    (("run",), "explore_delay"): lambda: syncdelay.EXPLORE_DELAY,
    (("run",), "budget"): lambda: syncdelay.EXPLORE_BUDGET,
    (RECORD, "workload_timeout"): field(WorkloadSpec, "timeout_s"),
    (RECORD + ("bench",), "fs"): field(FsSpec, "fstype"),
    (RECORD + ("bench",), "mkfs_opts"): field(FsSpec, "mkfs_opts"),
    (RECORD + ("bench",), "mount_opts"): field(FsSpec, "mount_opts"),
    (RECORD + ("bench",), "size"): field(FsSpec, "size_mb"),
    (RECORD + ("bench", "image build", "image info"), "kernel_package"): field(
        ImageSpec, "kernel_package"
    ),
    (("image build",), "kernel"): field(ImageSpec, "kernel"),
    (("image build",), "modules"): field(ImageSpec, "modules_dir"),
    (CHECK + ("repro",), "check_in"): field(Place, "check_in"),
    (("check", "repro", "matrix", "corpus"), "accel"): field(Place, "accel"),
    (CHECK + ("matrix",), "jobs"): field(Place, "jobs"),
    (CHECK, "state_timeout"): field(Place, "state_timeout_s"),
    (CHECK, "checker"): field(CampaignSpec, "checker_command"),
    (CHECK, "checker_timeout"): field(CampaignSpec, "checker_timeout_s"),
    (CHECK, "ledger"): field(CampaignSpec, "ledger"),
    (CHECK, "confirm_mode"): field(CampaignSpec, "confirm_mode"),
    (CHECK, "confirm_sample"): field(CampaignSpec, "confirm_sample"),
    (CHECK, "shrink"): field(CampaignSpec, "shrink"),
    (CHECK, "shrink_budget"): field(CampaignSpec, "shrink_budget"),
    (("check", "run"), "node_bound"): field(CampaignSpec, "node_bound"),
    (("bench",), "accel"): field(BenchVmSpec, "accel"),
    (("bench",), "memory"): field(BenchVmSpec, "memory_mb"),
    (("bench",), "qemu_cache"): field(BenchVmSpec, "qemu_cache"),
    (("bench",), "vm_timeout"): field(BenchVmSpec, "timeout_s"),
    (("bench",), "disk_dir"): field(BenchVmSpec, "disk_dir"),
    (("bench",), "workload"): field(BenchRequest, "workload"),
    (("bench",), "out"): field(BenchRequest, "out"),
    (("bench",), "on_host"): field(BenchRequest, "on_host"),
    (("report",), "accel"): field(matrix.Timing, "accel"),
    (("demo",), "check_in"): field(DemoSpec, "check_in"),
    (("demo",), "accel"): field(DemoSpec, "accel"),
    (("demo",), "jobs"): field(DemoSpec, "jobs"),
}
# (commands, option dest) -> why the default is the parser's own
OWN: dict[tuple[tuple[str, ...], str], str] = {
    (("",), "verbose"): "console verbosity, a command-line matter",
    (("run",), "out"): "MAIN_DEFAULT_OUT: where the default campaign writes",
    (("run",), "repeat"): "run's schedules: one recording per setting unless asked",
    (("record", "run"), "nodes"): "1: one disk (a cluster recording is asked for)",
    (("states",), "model"): "states lists one model's states: the cheap preset unless named",
    (("bench",), "cache"): "both: cli/bench.py maps it onto BenchRequest.caches",
    (("replay",), "size"): "0: the recording's size (only a bare log file needs it)",
    (("report",), "file"): "empty: the built-in matrix file",
    (("report",), "out"): "empty: MATRIX/report",
    (("repro",), "state"): "empty: a bundle's minimized state",
    (("repro",), "keep_image"): "empty: no image written",
    (("matrix",), "file"): "empty: the built-in checkers/matrix.toml",
    (("matrix",), "out"): "where the matrix command writes",
    (("demo",), "out"): "where the demo command writes",
    (
        ("record", "run"),
        "start_from",
    ): "empty: an empty disk (a crash state to start from is asked for)",
    (("record", "run"), "start_state"): "empty: goes with --from",
    (("corpus",), "file"): "empty: the built-in workloads/corpus/corpus.toml",
    (("corpus",), "out"): "where the corpus command writes",
    (("corpus",), "cache"): "empty: campaign/corpus.CACHE, where the releases are built",
}


def options(p: argparse.ArgumentParser, command: str = "") -> Iterator[tuple[str, argparse.Action]]:
    """(command, action) of every option of the parser and its subcommands (``image build``)."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from options(sub, f"{command} {name}".strip())
        elif not isinstance(a, argparse._HelpAction):
            yield command, a


def has_default(a: argparse.Action) -> bool:
    """A default the parser sets: not None, a flag's False or a repeated option's empty list."""
    return not (a.default is None or a.default is False or a.default == [])


def value(a: argparse.Action) -> Any:
    """The default as the program sees it (argparse applies the type to a string default)."""
    d = a.default
    return a.type(d) if isinstance(d, str) and callable(a.type) else d  # type: ignore[operator]


def shown(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def lookup(table: dict[tuple[tuple[str, ...], str], Any], command: str, dest: str) -> Any:
    return next((v for (cmds, d), v in table.items() if d == dest and command in cmds), None)


QUOTES = (
    re.compile(r"\(default ([^;,()\s]+)[;,)]"),  # (default 120); "default: ..." describes one
    re.compile(r"[(;] default ([^;,()\s]+)[;,)]"),  # ...; default bar)
    re.compile(r"'?([\w./:-]+)'? \(default\)"),
)  # none (default)


def quoted(text: str) -> list[str]:
    """The one-word defaults a help text names (a descriptive 'default: one per core' is not one)."""
    return [m.group(1) for rx in QUOTES for m in rx.finditer(text)]


def problems(p: argparse.ArgumentParser) -> list[str]:
    bad = []
    for command, a in options(p):
        name = f"{command or 'powercut'} {a.option_strings[-1] if a.option_strings else a.dest}"
        source = lookup(SOURCES, command, a.dest)
        if has_default(a):
            if source is not None:
                if value(a) != source():
                    bad.append(f"{name}: default {value(a)!r}, but the one place says {source()!r}")
            elif lookup(OWN, command, a.dest) is None:
                bad.append(
                    f"{name}: default {a.default!r} is neither read from the one place (SOURCES) "
                    "nor the parser's own (OWN)"
                )
        real = shown(a.default) if has_default(a) else None
        for q in quoted(a.help or ""):
            if q != real and not (real is None and not has_default(a)):
                bad.append(f"{name}: help quotes default {q!r}, the option's is {real!r}")
    return bad


def test_every_default_is_written_once() -> None:
    assert problems(cliparser.build_parser()) == []


def test_every_table_entry_names_a_real_option() -> None:
    have = {(c, a.dest) for c, a in options(cliparser.build_parser()) if has_default(a)}
    stale = [(cmds, d) for cmds, d in (*SOURCES, *OWN) if not all((c, d) in have for c in cmds)]
    assert stale == []


def test_the_quotes_found() -> None:
    assert quoted("the checker's limit per state (default 120); a checker") == ["120"]
    assert quoted("QEMU cache mode: none, writeback (default none; never unsafe)") == ["none"]
    assert quoted("'group' (default) a sample") == ["group"]
    assert quoted("checker VMs at once (default: one per core)") == []
    assert quoted("pin the guest kernel package (default: linux-image-amd64's)") == []


def test_a_wrong_default_is_caught() -> None:
    p = cliparser.build_parser()
    record = next(a for c, a in options(p) if c == "record" and a.dest == "memory")
    record.default = 2048
    assert any("record --memory: default 2048" in x for x in problems(p))


def test_a_default_written_twice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser reading a constant the spec does not (the spec's field kept its own literal)."""
    monkeypatch.setattr(config, "STATE_TIMEOUT_S", 600.0)
    bad = problems(cliparser.build_parser())
    assert any(
        "check --state-timeout: default 600.0, but the one place says 300.0" in x for x in bad
    )


def test_a_wrong_quote_is_caught() -> None:
    p = cliparser.build_parser()
    for c, a in options(p):
        if c == "check" and a.dest == "checker_timeout":
            a.help = "the checker's limit per state (default 60)"
    assert problems(p) == [
        "check --checker-timeout: help quotes default '60', the option's is '120'"
    ]


def test_an_option_in_neither_table_is_caught() -> None:
    p = cliparser.build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["check"].add_argument("--new-limit", type=int, default=5, help="a new option")
    assert any("check --new-limit: default 5 is neither" in x for x in problems(p))


def literal_defaults(source: str) -> list[tuple[str, Any]]:
    """(dest, value) of each ``add_argument(..., default=<literal>)`` in the parser's source whose
    value is more than "nothing given" (None, False, 0, "", []): a value that may be a copy."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            kw = {k.arg: k.value for k in node.keywords}
            d = kw.get("default")
            if isinstance(d, ast.Constant) and d.value:
                names = [
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
                dest = (
                    kw["dest"].value
                    if isinstance(kw.get("dest"), ast.Constant)
                    # type: ignore[union-attr]
                    else (
                        next((n for n in names if n.startswith("--")), names[0] if names else "")
                        .lstrip("-")
                        .replace("-", "_")
                    )
                )
                out.append((dest, d.value))
    return out


OWN_DESTS = {d for _, d in OWN}


def test_the_parser_writes_no_literal_default_but_its_own() -> None:
    source = Path(cliparser.__file__).read_text()
    assert [(d, v) for d, v in literal_defaults(source) if d not in OWN_DESTS] == []


def test_a_repeated_literal_is_caught() -> None:
    """main's --memory and --cpus before issue 49 step 4: config's 1024 and 1 written again."""
    snippet = (
        'g.add_argument("--memory", type=at_least(64), default=1024, metavar="MB")\n'
        'g.add_argument("--cpus", type=at_least(1), default=1)\n'
        'g.add_argument("--confirm", default="group", dest="confirm_mode")\n'
        'p.add_argument("--nodes", type=at_least(1), default=1)\n'
    )
    assert [(d, v) for d, v in literal_defaults(snippet) if d not in OWN_DESTS] == [
        ("memory", 1024),
        ("cpus", 1),
        ("confirm_mode", "group"),
    ]


@pytest.mark.parametrize("cmd", ["check", "run"])
def test_the_node_bound_keeps_its_old_name_as_an_alias(cmd: str) -> None:
    """--node-bound was --cluster-bound before one word per idea: users' scripts keep working."""
    from powercut.cli.parser import build_parser

    p = build_parser()
    args = ["rec"] if cmd == "check" else ["--workload", "append-fsync"]
    assert p.parse_args([cmd, *args, "--cluster-bound", "3"]).node_bound == 3
    assert p.parse_args([cmd, *args, "--node-bound", "5"]).node_bound == 5
