"""The pytest plugin (registered under ``pytest11``): crash tests of a user's own program.

    import powercut, pytest

    def put_keys(mount, n=20):                  # runs in the guest, cwd = the filesystem under test
        for i in range(n):
            powercut.begin(i); kv_put(mount / "db", f"k{i}", f"v{i}"); powercut.ack(i)

    def check_keys(state):                      # runs on each recovered crash state
        db = kv_load(Path(state.mount) / "db")
        for key in state.acked:
            assert db.get(f"k{key}") == f"v{key}", f"acked k{key} lost"

    @pytest.mark.powercut(fs="ext4")
    def test_kv_survives_power_loss(crashtest):
        crashtest(put_keys, check_keys, params={"n": 20})

The ``crashtest`` fixture records the workload (a module-level function, or a shell command) in a
VM over dm-log-writes and judges every distinct crash state with the checker (a module-level
function, a command, or none: recovery and fsck only).  Settings, weakest first: the defaults, the
``powercut`` marker, the call's keywords, the command line (``--powercut-*``: the nightly's knobs).
A crash test that does not meet its expectation (``expect="pass"`` by default; ``"fail"`` or a
verdict for a known-broken variant) fails with the verdict, how many states failed out of how many,
the first failing state, each failure group's minimized state, blame and ``powercut repro`` command,
and where the artifacts are; JUnit gets them as properties.  A missing prerequisite (QEMU, the
guest image, root for host mode) is an error saying how to get it (``powercut doctor`` lists what
is missing, ``powercut setup`` installs it), or a skip with ``--powercut-skip-missing``.

Lying-disk models (``models=("lost-write", "corrupt-sector", ...)``, docs/lying-disks.md) ask
whether the program notices what the disk did: there a checker returns
``powercut.CheckResult("detected", (why,))`` when the program reported the damage (a pass under
those models) and ``"silent-corruption"`` when it served wrong data without a word.

``--powercut-shard I/N`` splits the crash tests (not their states: each test records its own
workload) over N runners.

Only the standard library and pytest are imported here; the harness loads when a crash test runs
(pytest loads this module in every session of a project that has powercut installed)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MARKER = "powercut"
SETTINGS = (
    "fs",
    "size_mb",
    "mkfs_opts",
    "mount_opts",
    "models",
    "params",
    "max_states",
    "expect",
    "shrink",
    "seed",
    "bound",
    "samples",
    "setup_samples",
    "torn_samples",
    "allow_no_acks",
    "require_exhaustive",
    "workload_timeout_s",
    "checker_timeout_s",
    "jobs",
    "check_in",
    "accel",
    "fault",
    "disk_latency",
    "lie_file",
    "nodes",
    "delay_sync",
)  # campaign/crashtest.CrashTest.of's words
_ran: list[tuple[str, str]] = []  # (node id, headline) of each crash test of this session


class CrashTestFailed(AssertionError):
    """A crash test whose outcome is not the expected one; ``outcome`` holds the campaign's result."""

    def __init__(self, outcome: Any) -> None:
        super().__init__(outcome.explain())
        self.outcome = outcome


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("powercut", "powercut crash tests")
    g.addoption(
        "--powercut-check-in",
        choices=("vm", "host"),
        default=None,
        help="judge crash states in checker VMs (default) or on this host (root, loop devices)",
    )
    g.addoption(
        "--powercut-models",
        default=None,
        metavar="M[,M...]",
        help="crash models for every crash test (overrides the marker; default flush,write-cache,torn-4k)",
    )
    g.addoption(
        "--powercut-max-states",
        type=int,
        default=None,
        metavar="N",
        help="judge at most N distinct states per model (0: all)",
    )
    g.addoption(
        "--powercut-jobs",
        type=int,
        default=None,
        metavar="N",
        help="checker VMs (or host workers) per crash test (0: one per core)",
    )
    g.addoption(
        "--powercut-seed",
        default=None,
        metavar="N|auto",
        help="seed of the sampled crash states for every crash test; auto: a new one each run (printed "
        "in each test's outcome), so a nightly's coverage grows night after night",
    )
    g.addoption(
        "--powercut-require-exhaustive",
        action="store_true",
        default=False,
        help="a crash test expected to pass fails when its check was not exhaustive (sampled, capped, "
        "weakened)",
    )
    g.addoption(
        "--powercut-accel",
        choices=("auto", "kvm", "tcg"),
        default=None,
        help="VM acceleration (auto: KVM when it works, else TCG)",
    )
    g.addoption(
        "--powercut-out",
        default=None,
        metavar="DIR",
        help="keep each crash test's recording, journal and repro bundles under DIR/<test> "
        "(default: pytest's tmp_path)",
    )
    g.addoption(
        "--powercut-disk-latency",
        default=None,
        metavar="SETTING",
        help="record every crash test's workload on a disk this slow: none, nvme, sata-ssd, hdd or "
        "write=TIME,flush=TIME (overrides the marker's disk_latency; docs/races.md)",
    )
    g.addoption(
        "--powercut-delay-sync",
        action="append",
        default=None,
        metavar="GLOB=TIME",
        help="hold every sync of the files matching GLOB for TIME while recording each crash test "
        "(repeatable; overrides the marker's delay_sync; docs/races.md)",
    )
    g.addoption(
        "--powercut-shard",
        default=None,
        metavar="I/N",
        help="run only shard I of N of the crash tests (1-based, round-robin over their sorted ids; the "
        "other tests run in shard 1): split a nightly's crash tests over N CI runners",
    )
    g.addoption(
        "--powercut-skip-missing",
        action="store_true",
        default=False,
        help="skip crash tests when QEMU, the guest image or root is missing (default: error); "
        "'powercut doctor' says what is missing, 'powercut setup' installs it",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**settings): crash-test settings for the crashtest fixture "
        f"({', '.join(SETTINGS)})",
    )


def _shard(config: pytest.Config) -> tuple[int, int] | None:
    text = config.getoption("powercut_shard")
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise pytest.UsageError(
            f"--powercut-shard wants I/N with 1 <= I <= N (e.g. 2/4), not {text!r}"
        )
    return int(m.group(1)), int(m.group(2))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--powercut-shard: each crash test runs in exactly one shard (a crash test records its own
    workload, so it is the unit a runner takes: its states cannot be split over runners that would
    each record again); the tests that are not crash tests run in shard 1."""
    shard = _shard(config)
    if shard is None:
        return
    index, total = shard
    crash = sorted(
        item.nodeid for item in items if "crashtest" in getattr(item, "fixturenames", ())
    )
    mine = set(crash[index - 1 :: total])
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        is_crash = "crashtest" in getattr(item, "fixturenames", ())
        (keep if (item.nodeid in mine if is_crash else index == 1) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _options(config: pytest.Config) -> dict[str, Any]:
    """The command line's settings (they override the tests')."""
    out: dict[str, Any] = {}
    if config.getoption("powercut_check_in"):
        out["check_in"] = config.getoption("powercut_check_in")
    models = config.getoption("powercut_models")
    if models:
        out["models"] = tuple(m.strip() for m in models.split(",") if m.strip())
    for opt, key in (
        ("powercut_max_states", "max_states"),
        ("powercut_jobs", "jobs"),
        ("powercut_accel", "accel"),
        ("powercut_disk_latency", "disk_latency"),
    ):
        if config.getoption(opt) is not None:
            out[key] = config.getoption(opt)
    if config.getoption("powercut_delay_sync"):
        out["delay_sync"] = tuple(config.getoption("powercut_delay_sync"))
    seed = config.getoption("powercut_seed")
    if seed is not None:
        if seed != "auto" and not seed.isdigit():
            raise pytest.UsageError(f"--powercut-seed wants a whole number or auto, not {seed!r}")
        out["seed"] = -1 if seed == "auto" else int(seed)  # -1: core.selection.SEED_AUTO
    if config.getoption("powercut_require_exhaustive"):
        out["require_exhaustive"] = True
    return out


def _fail(text: str) -> None:
    pytest.fail(text, pytrace=False)


class CrashTester:
    """The ``crashtest`` fixture's value: call it to run one crash test."""

    def __init__(self, request: pytest.FixtureRequest, out: Path) -> None:
        self.request, self.out = request, out
        self.marker: dict[str, Any] = {}
        for mark in reversed(list(request.node.iter_markers(MARKER))):  # the closest marker wins
            if mark.args:
                _fail(
                    f"powercut: @pytest.mark.{MARKER} takes keywords only ({', '.join(SETTINGS)})"
                )
            self.marker.update(mark.kwargs)
        self.runs = 0

    def __call__(
        self,
        workload: Callable[..., Any] | str,
        checker: Callable[..., Any] | str | None = None,
        **settings: Any,
    ) -> Any:
        """Record ``workload``, judge its crash states with ``checker``; the Outcome, or the test
        fails when it is not as expected."""
        # imported when a crash test runs, not at the top: pytest loads this plugin in every session
        # of every project that has powercut installed, most of which run no crash test
        from powercut._pycall import FunctionRef, workload_command
        from powercut.campaign import crashtest as ct
        from powercut.errors import PowercutError

        config = self.request.config
        merged = {**self.marker, **settings, **_options(config)}
        unknown = sorted(set(merged) - set(SETTINGS))
        if unknown:
            _fail(
                f"powercut: unknown crash-test setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}"
            )
        path = tuple(p for p in sys.path if p and os.path.isdir(p))
        error: PowercutError | None
        try:
            if isinstance(workload, str):
                cmd = workload
            else:
                cmd = workload_command(FunctionRef.of(workload, "workload"), path)
            kwargs: dict[str, Any] = {"checker_cmd": checker} if isinstance(checker, str) else {}
            if checker is not None and not isinstance(checker, str):
                kwargs["checker_function"] = FunctionRef.of(checker, "checker").text
            for key in ("models", "mkfs_opts"):
                if isinstance(merged.get(key), str):
                    merged[key] = (merged[key],)
                if key in merged:
                    merged[key] = tuple(merged[key])
            test = ct.CrashTest.of(self.request.node.nodeid, cmd, path=path, **kwargs, **merged)
        except PowercutError as e:
            error = e
        else:
            error = None
        if error is not None:
            _fail(f"powercut: {error.one_line()}")
        lacking = ct.missing(test)
        if lacking:
            _missing(config, lacking)
        self.runs += 1
        out = self.out if self.runs == 1 else self.out.with_name(f"{self.out.name}-{self.runs}")
        try:
            outcome = ct.run(test, out)
        except PowercutError as e:
            error = e
        else:
            error = None
        if (
            error is not None
        ):  # failed outside the except block: no "during handling" chain in the report
            _ran.append((self.request.node.nodeid, f"error: {error.one_line()}"))
            _fail(
                f"powercut could not finish the crash test: {type(error).__name__}: {error.one_line()}\n"
                f"artifacts: {out}"
            )
        _ran.append((self.request.node.nodeid, outcome.headline()))
        for name, value in outcome.properties():
            self.request.node.user_properties.append((name, value))
        if not outcome.as_expected:
            raise CrashTestFailed(outcome)
        return outcome


def _missing(config: pytest.Config, lacking: list[str]) -> None:
    text = (
        "powercut: cannot run crash tests here: "
        + "; ".join(lacking)
        + ". 'powercut doctor' says what this "
        "machine lacks and the command that fixes each; 'powercut setup' installs and builds it"
    )
    if config.getoption("powercut_skip_missing"):
        pytest.skip(text)
    _fail(text + " (or pass --powercut-skip-missing to skip crash tests where they cannot run)")


def _slug(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("_")[-120:] or "test"


@pytest.fixture
def crashtest(request: pytest.FixtureRequest, tmp_path: Path) -> CrashTester:
    """Run a crash test: ``crashtest(workload, checker, **settings)``; see powercut.pytest_plugin."""
    base = request.config.getoption("powercut_out")
    out = Path(base).absolute() / _slug(request.node.nodeid) if base else tmp_path / "powercut"
    return CrashTester(request, out)


class _Crash:
    """Where a crash test failed and its headline (pytest's short summary line, JUnit's message)."""

    def __init__(self, path: str, lineno: int, message: str) -> None:
        self.path = path
        self.lineno = lineno
        self.message = message


class _FailureText:
    """A failing crash test's report: its own words, not a traceback into the fixture."""

    def __init__(self, text: str, crash: _Crash) -> None:
        self.text, self.reprcrash = text, crash

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line, red=line.startswith("powercut:"), bold=line.startswith("powercut:"))

    def __str__(self) -> str:
        return self.text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = (yield).get_result()
    if (
        call.excinfo is not None
        and isinstance(call.excinfo.value, CrashTestFailed)
        and report.failed
    ):
        path, line, _ = item.location
        lineno = (line or 0) + 1
        text = str(call.excinfo.value)
        report.longrepr = _FailureText(
            f"{text}\n({path}:{lineno}: crash test {item.name})",
            _Crash(path, lineno, text.splitlines()[0]),
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ran:
        return
    terminalreporter.section("powercut crash tests")
    for nodeid, line in _ran:
        terminalreporter.write_line(f"{nodeid}: {line.removeprefix('powercut: ')}")
    _ran.clear()
