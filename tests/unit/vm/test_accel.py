"""powercut.vm.accel (the KVM probes and their verdict cache) and the life of a libvirt domain around
them, with fake libvirt-python objects: no process, no libvirtd, no VM."""

from __future__ import annotations

import ast
import json
import os
import time
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from powercut import config as paths
from powercut.config import VmSpec
from powercut.errors import GuestHang, VmError
from powercut.vm import accel
from powercut.vm import libvirt as lv

REMOTE = "qemu+ssh://root@hv1.example/system"

# ---------------------------------------------------------------- a fake libvirt-python


class FakeError(Exception):
    def __init__(self, msg: str, code: int = 1) -> None:
        super().__init__(msg)
        self.code = code

    def get_error_message(self) -> str:
        return str(self)

    def get_error_code(self) -> int:
        return self.code


FAKE = types.SimpleNamespace(
    libvirtError=FakeError,
    VIR_DOMAIN_START_AUTODESTROY=2,
    VIR_DOMAIN_EVENT_ID_LIFECYCLE=0,
    VIR_DOMAIN_RUNNING=1,
    VIR_DOMAIN_PAUSED=3,
    VIR_DOMAIN_SHUTOFF=5,
    VIR_DOMAIN_PAUSED_UNKNOWN=0,
    VIR_DOMAIN_PAUSED_USER=1,
    VIR_DOMAIN_PAUSED_IOERROR=5,
    VIR_DOMAIN_PAUSED_SHUTTING_DOWN=8,
    VIR_DOMAIN_PAUSED_CRASHED=10,
    VIR_DOMAIN_PAUSED_STARTING_UP=11,
    VIR_DOMAIN_EVENT_STOPPED=5,
    VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN=0,
    VIR_DOMAIN_EVENT_STOPPED_DESTROYED=1,
    VIR_DOMAIN_EVENT_STOPPED_CRASHED=2,
    VIR_DOMAIN_EVENT_STOPPED_FAILED=5,
    VIR_ERR_NO_DOMAIN=42,
    VIR_ERR_OPERATION_INVALID=55,
)
RUNNING = (FAKE.VIR_DOMAIN_RUNNING, 1)
PAUSED_CRASHED = (FAKE.VIR_DOMAIN_PAUSED, FAKE.VIR_DOMAIN_PAUSED_CRASHED)


class FakeDom:
    def __init__(self, conn: "FakeConn", xml: str) -> None:
        root = ET.fromstring(xml)
        self.conn, self.xml, self.type = conn, xml, root.get("type")
        self._name = root.findtext("name")
        self.console = Path(root.find("devices/serial/source").get("path"))
        self.cmdline = root.findtext("os/cmdline")
        self.destroyed = 0
        self.alive = True

    def name(self) -> str:
        return self._name

    def state(self):
        if not self.alive:
            raise FakeError("no domain", FAKE.VIR_ERR_NO_DOMAIN)
        return self.conn.guest.state(self)

    def destroy(self) -> None:
        self.destroyed += 1
        if not self.alive:
            raise FakeError("no domain", FAKE.VIR_ERR_NO_DOMAIN)
        self.alive = False

    def stop(self, detail: int = 0) -> None:  # the guest ended: libvirt's lifecycle event
        self.alive = False
        for cb in self.conn.callbacks:
            cb(self.conn, self, FAKE.VIR_DOMAIN_EVENT_STOPPED, detail, None)


class Guest:
    """What a started domain does: ``boot(dom)`` once at createXML, ``state(dom)`` on every poll."""

    def __init__(self, console: bytes = b"", state=RUNNING, stop: bool = False) -> None:
        self.console, self._state, self.stop = console, state, stop

    def boot(self, dom: FakeDom) -> None:
        with open(dom.console, "ab") as f:
            f.write(self.console)
        if self.stop:
            dom.stop()

    def state(self, dom: FakeDom):
        if isinstance(self._state, BaseException):
            raise self._state
        return self._state


class FakeConn:
    def __init__(self, *guests: Guest) -> None:
        self.guests = list(guests)
        self.guest = guests[0]
        self.domains: list[FakeDom] = []
        self.flags: list[int] = []
        self.callbacks: list = []
        self.closed = False

    def createXML(self, xml: str, flags: int) -> FakeDom:
        self.guest = self.guests.pop(0) if len(self.guests) > 1 else self.guests[0]
        dom = FakeDom(self, xml)
        self.domains.append(dom)
        self.flags.append(flags)
        self.guest.boot(dom)
        return dom

    def domainEventRegisterAny(self, _dom, _event, cb, _opaque) -> int:
        self.callbacks.append(cb)
        return len(self.callbacks)

    def domainEventDeregisterAny(self, _cid: int) -> None:
        pass

    def getVersion(self) -> int:
        return 7002000

    def close(self) -> int:
        self.closed = True
        return 0


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The verdict cache in tmp; the local probe must not run unless a test allows it."""
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(accel, "probe_kvm", lambda *a, **kw: pytest.fail("the local probe ran"))
    return tmp_path / "cache" / "accel.json"


@pytest.fixture
def files(tmp_path) -> types.SimpleNamespace:
    kernel, initrd = tmp_path / "vmlinuz", tmp_path / "initrd"
    kernel.write_bytes(b"kernel")
    initrd.write_bytes(b"initrd")
    return types.SimpleNamespace(kernel=str(kernel), initrd=str(initrd), dir=tmp_path)


def run(
    conn: FakeConn,
    monkeypatch,
    files,
    *,
    uri: str = "qemu:///system",
    accel_: str | None = "tcg",
    timeout_s: float = 30,
    spec_accel: str = "auto",
):
    monkeypatch.setattr(lv, "_import_libvirt", lambda: FAKE)
    monkeypatch.setattr(lv, "_ensure_event_loop", lambda _lv: None)
    monkeypatch.setattr(FAKE, "open", lambda u: conn, raising=False)
    spec = VmSpec(
        kernel=files.kernel,
        initrd=files.initrd,
        console_path=str(files.dir / "console.log"),
        name="pc",
        timeout_s=timeout_s,
        accel=spec_accel,
    )  # type: ignore[arg-type]
    return lv.run_vm_libvirt(spec, uri=uri, accel=accel_, rundir=files.dir / "run")


# ---------------------------------------------------------------- the domain's lifetime (libvirt.py)


def test_domains_start_with_autodestroy_and_are_destroyed_and_closed_at_a_normal_end(
    monkeypatch, files
):
    conn = FakeConn(Guest(b"powercut-init: modules loaded\npowercut-exit=0\n", stop=True))
    res = run(conn, monkeypatch, files)
    assert res.exit_status == 0 and res.accel == "tcg"
    assert conn.flags == [FAKE.VIR_DOMAIN_START_AUTODESTROY]
    assert conn.domains[0].destroyed == 1 and conn.closed


def test_paused_domain_is_an_error_at_once_naming_uri_and_accel(monkeypatch, files):
    conn = FakeConn(Guest(state=PAUSED_CRASHED))
    start = time.monotonic()
    with pytest.raises(
        VmError,
        match=r"at qemu\+ssh://root@hv1.example/system \(accel kvm\) is paused "
        r"\(crashed\): KVM cannot run this guest there",
    ) as exc:
        run(conn, monkeypatch, files, uri=REMOTE, accel_="kvm", timeout_s=600)
    assert time.monotonic() - start < 5
    assert "\n" not in str(exc.value)
    assert conn.domains[0].destroyed == 1 and conn.closed


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(1), RuntimeError("bug")])
def test_interrupted_wait_destroys_the_domain_and_closes(monkeypatch, files, exc):
    conn = FakeConn(Guest(state=exc))
    with pytest.raises(type(exc)):
        run(conn, monkeypatch, files)
    assert conn.domains[0].destroyed == 1 and conn.closed


def test_silent_domain_is_a_boot_timeout_naming_uri_and_accel(monkeypatch, files):
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "0.3")
    conn = FakeConn(Guest(b"early kernel noise\n"))
    start = time.monotonic()
    with pytest.raises(
        GuestHang,
        match=r"libvirt domain pc-\w+ at qemu:///system \(accel kvm\) did not reach "
        r"the guest init within 0.3 s.*try --accel tcg",
    ):
        run(conn, monkeypatch, files, accel_="kvm", timeout_s=600)
    assert time.monotonic() - start < 3
    assert conn.domains[0].destroyed == 1 and conn.closed


def test_a_guest_that_booted_is_not_a_boot_timeout(monkeypatch, files):
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "0.2")
    conn = FakeConn(Guest(b"powercut-init: modules loaded at 1.0s\n"))
    with pytest.raises(GuestHang, match="VM did not finish within 1.5 s"):
        run(conn, monkeypatch, files, timeout_s=1.5)
    assert conn.domains[0].destroyed == 1


def test_paused_reason_ignores_the_pauses_of_start_and_shutdown():
    assert lv.paused_reason(FAKE, PAUSED_CRASHED) == "crashed"
    assert (
        lv.paused_reason(FAKE, (FAKE.VIR_DOMAIN_PAUSED, FAKE.VIR_DOMAIN_PAUSED_IOERROR))
        == "ioerror"
    )
    assert lv.paused_reason(FAKE, (FAKE.VIR_DOMAIN_PAUSED, 99)) == "reason 99"
    for reason in (FAKE.VIR_DOMAIN_PAUSED_STARTING_UP, FAKE.VIR_DOMAIN_PAUSED_SHUTTING_DOWN):
        assert lv.paused_reason(FAKE, (FAKE.VIR_DOMAIN_PAUSED, reason)) is None
    assert lv.paused_reason(FAKE, RUNNING) is None and lv.paused_reason(FAKE, None) is None


# ---------------------------------------------------------------- remote probe: decision, key, cache


def test_remote_auto_probes_there_as_kvm_domain_then_runs_tcg(monkeypatch, files, cache):
    conn = FakeConn(
        Guest(b"", state=PAUSED_CRASHED), Guest(b"powercut-init: x\npowercut-exit=0\n", stop=True)
    )
    res = run(conn, monkeypatch, files, uri=REMOTE, accel_=None)
    probe, real = conn.domains
    assert probe.type == "kvm" and "powercut.probe=1" in probe.cmdline and probe.destroyed == 1
    assert probe.console == files.dir / "run" / "accel-probe-console.log"
    assert real.type == "qemu" and res.accel == "tcg"
    assert conn.flags == [FAKE.VIR_DOMAIN_START_AUTODESTROY] * 2
    (entry,) = json.loads(cache.read_text()).values()
    assert (
        entry["accel"] == "tcg"
        and entry["where"] == REMOTE
        and "paused (crashed)" in entry["reason"]
    )


def test_remote_verdict_is_cached_per_uri_no_second_boot(monkeypatch, files, cache):
    ok = Guest(accel.PROBE_OK + b"\n")
    conn = FakeConn(ok)
    calls = []

    def probe():
        calls.append(1)
        return lv.probe_kvm_libvirt(FAKE, conn, files.kernel, files.initrd, files.dir, uri=REMOTE)

    for _ in range(2):
        assert (
            accel.resolve_remote_accel("auto", uri=REMOTE, kernel=files.kernel, probe=probe)
            == "kvm"
        )
    assert len(calls) == 1 and len(conn.domains) == 1
    other = "qemu+ssh://root@hv2.example/system"
    assert (
        accel.resolve_remote_accel(
            "auto", uri=other, kernel=files.kernel, probe=lambda: (False, "no")
        )
        == "tcg"
    )
    assert {v["where"]: v["accel"] for v in json.loads(cache.read_text()).values()} == {
        REMOTE: "kvm",
        other: "tcg",
    }


def test_remote_explicit_accel_never_probes(files, cache):
    for want in ("kvm", "tcg"):
        got = accel.resolve_remote_accel(
            want, uri=REMOTE, kernel=files.kernel, probe=lambda: pytest.fail("probed")
        )
        assert got == want
    assert not cache.exists()


def test_remote_key_is_per_uri_hypervisor_and_guest_kernel(files):
    k = accel.remote_key(REMOTE, files.kernel, 7002000)
    assert k == accel.remote_key(REMOTE, files.kernel, 7002000)
    assert k != accel.remote_key("qemu+ssh://root@hv2.example/system", files.kernel, 7002000)
    assert k != accel.remote_key(REMOTE, files.kernel, 8000000)
    os.utime(files.kernel, ns=(1, 1))
    assert k != accel.remote_key(REMOTE, files.kernel, 7002000)


def test_local_uri_uses_the_local_probe_not_a_domain(files, monkeypatch):
    seen = []
    monkeypatch.setattr(
        accel, "resolve_accel", lambda req, kernel, initrd: seen.append(req) or "tcg"
    )
    conn = FakeConn(Guest())
    for uri in ("qemu:///system", "qemu:///session", "qemu+unix:///system?socket=/run/x.sock"):
        assert (
            lv.resolve_libvirt_accel(
                FAKE,
                conn,
                "auto",
                uri=uri,
                kernel=files.kernel,
                initrd=files.initrd,
                workdir=files.dir,
            )
            == "tcg"
        )
    assert seen == ["auto"] * 3 and conn.domains == []


@pytest.mark.parametrize(
    "guest,ok,reason",
    [
        (Guest(accel.PROBE_OK + b"\n", stop=True), True, "booted in"),
        (Guest(b"", state=PAUSED_CRASHED), False, "paused (crashed)"),
        (Guest(b"", stop=True), False, "stopped without booting"),
        (Guest(b"no answer"), False, "did not boot within 0.3 s"),
    ],
)
def test_probe_domain_verdicts(files, guest, ok, reason):
    conn = FakeConn(guest)
    got, why = lv.probe_kvm_libvirt(
        FAKE, conn, files.kernel, files.initrd, files.dir, uri=REMOTE, timeout=0.3
    )
    assert got is ok and reason in why and REMOTE in why
    assert conn.flags == [FAKE.VIR_DOMAIN_START_AUTODESTROY] and conn.domains[0].destroyed == 1


class AbortingConn(FakeConn):
    """A hypervisor whose QEMU aborts as it starts a KVM guest (e.g. "failed to set MSR 0x10a",
    kvm_buf_set_msrs: Assertion failed): createXML fails, no domain exists."""

    def createXML(self, xml: str, flags: int) -> FakeDom:
        raise FakeError(
            "internal error: qemu unexpectedly closed the monitor: 2026-11-24T03:10:12.1Z\n"
            "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x0\nqemu-system-x86_64: "
            "kvm.c:3183: kvm_buf_set_msrs: Assertion `ret == nmsrs' failed."
        )


def test_probe_of_a_qemu_that_aborts_at_start_is_a_tcg_verdict_naming_the_uri(files, cache):
    conn = AbortingConn(Guest())
    got, why = lv.probe_kvm_libvirt(
        FAKE, conn, files.kernel, files.initrd, files.dir, uri=REMOTE, timeout=0.3
    )
    assert got is False and REMOTE in why and "\n" not in why
    probe = lambda: lv.probe_kvm_libvirt(  # noqa: E731
        FAKE, conn, files.kernel, files.initrd, files.dir, uri=REMOTE
    )
    assert accel.resolve_remote_accel("auto", uri=REMOTE, kernel=files.kernel, probe=probe) == "tcg"
    assert json.loads(cache.read_text()).popitem()[1]["where"] == REMOTE


@pytest.mark.parametrize(
    "conn",
    [
        AbortingConn(Guest()),
        FakeConn(Guest(b"", state=PAUSED_CRASHED)),
        FakeConn(Guest(b"")),
        FakeConn(Guest(b"", stop=True)),
    ],
    ids=["aborts-at-start", "pauses", "no-agent", "stops-without-booting"],
)
def test_every_way_kvm_fails_is_a_vm_error_naming_uri_and_accel(monkeypatch, files, conn):
    """Behaviour, not wording: whichever way KVM fails on a host, an explicit --accel kvm run ends at
    once (within the boot timeout) in a VmError that names the URI and the accel, in one line."""
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "0.3")
    start = time.monotonic()
    with pytest.raises(VmError) as exc:
        run(conn, monkeypatch, files, uri=REMOTE, accel_="kvm", timeout_s=600)
    assert (
        REMOTE in str(exc.value)
        and "(accel kvm)" in str(exc.value)
        and "\n" not in exc.value.one_line()
    )
    assert time.monotonic() - start < 10
    assert all(d.destroyed == 1 for d in conn.domains)


def test_probe_that_loses_libvirt_caches_nothing(files, cache):
    conn = FakeConn(Guest(state=FakeError("end of file while reading data")))
    probe = lambda: lv.probe_kvm_libvirt(  # noqa: E731
        FAKE, conn, files.kernel, files.initrd, files.dir, uri=REMOTE
    )
    with pytest.raises(VmError, match="lost libvirt at .* during the KVM probe"):
        accel.resolve_remote_accel("auto", uri=REMOTE, kernel=files.kernel, probe=probe)
    assert not cache.exists() and conn.domains[0].destroyed == 1


def test_local_verdict_cache_is_keyed_and_reused(files, monkeypatch, tmp_path):
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "c"))
    qemu = tmp_path / "qemu"
    qemu.write_bytes(b"q")
    calls = []
    monkeypatch.setattr(accel.process, "require", lambda *a: str(qemu))
    monkeypatch.setattr(accel, "probe_kvm", lambda *a: calls.append(a) or (False, "no kvm"))
    assert [accel.resolve_accel("auto", files.kernel, files.initrd) for _ in range(2)] == [
        "tcg",
        "tcg",
    ]
    assert len(calls) == 1
    assert accel.cached_verdicts()[accel.local_key(str(qemu), files.kernel)]["where"] == "local"


# ---------------------------------------------------------------- the cache's place, the layering


def test_cache_root_env_rules(monkeypatch):
    from powercut.images import build

    assert build.cache_root is paths.cache_root  # the image builder re-exports it
    monkeypatch.delenv("POWERCUT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert paths.cache_root() == Path("/x/cache/powercut")
    monkeypatch.setenv("POWERCUT_CACHE", "/pc")
    assert paths.cache_root() == Path("/pc") and accel._cache_file() == Path("/pc/accel.json")
    monkeypatch.delenv("POWERCUT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert paths.cache_root() == Path(os.path.expanduser("~/.cache/powercut"))


def test_vm_package_never_imports_the_image_builder():
    vm_dir = Path(lv.__file__).parent
    for source in sorted(vm_dir.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any("images" in n for n in names), f"{source.name} imports {names}"
