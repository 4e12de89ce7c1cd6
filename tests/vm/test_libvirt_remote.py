"""The libvirt backend through a remote URI, and the lifetime of its domains, against the real libvirtd
(ci/start-libvirtd.sh) and a throwaway sshd on 127.0.0.1 that this module starts itself: a
``qemu+ssh://`` URI is remote to powercut (powercut.vm.libvirt.is_local_uri) even though the
hypervisor is this host, so every path stays shared and a recording can be made through it.

Neither fixture skips: a CI machine that cannot run sshd or libvirtd fails these tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from powercut.config import FsSpec, ShareSpec, VmSpec, WorkloadSpec
from powercut.core.log.dmlog import open_log
from powercut.errors import VmError
from powercut.linux import process
from powercut.record.vm import RecordSpec, record
from powercut.vm import accel
from powercut.vm.libvirt import is_local_uri, run_vm_libvirt
from tests.margins import HOST_WAIT

pytestmark = [pytest.mark.vm, pytest.mark.libvirt]

LOCAL = "qemu:///system"
REPO = Path(__file__).resolve().parents[2]
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself: it must be started by its absolute path


@pytest.fixture(scope="module")
def libvirtd() -> str:
    res = process.run(["sh", str(REPO / "ci" / "start-libvirtd.sh")], timeout=120, check=False)
    if res.returncode != 0:
        pytest.fail(f"ci/start-libvirtd.sh exited {res.returncode}: {res.stderr.strip()}")
    try:
        import libvirt  # noqa: F401
    except ImportError:
        pytest.fail("libvirt-python is not installed (ci/setup.sh installs it)")
    return LOCAL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _root_locked() -> bool:
    """sshd without PAM refuses every login of an account whose password is locked ('!...')."""
    try:
        for line in Path("/etc/shadow").read_text().splitlines():
            if line.startswith("root:"):
                return line.split(":")[1].startswith("!")
    except OSError:
        pass
    return False


def _sshd_config(d: Path, port: int) -> str:
    use_pam = "yes" if _root_locked() and Path("/etc/pam.d/sshd").exists() else "no"
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {d}/host_ed25519",
            f"PidFile {d}/sshd.pid",
            f"AuthorizedKeysFile {d}/authorized_keys",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            f"UsePAM {use_pam}",
            "StrictModes no",  # the key files live under /tmp (mode 1777)
            "UseDNS no",
            "PrintMotd no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _client_files(d: Path, port: int) -> Path:
    """The ssh client libvirt runs (the URI's command=): this module's own config and known_hosts,
    nothing from ~/.ssh, strict host key checking against the key the fixture generated."""
    host_key = (d / "host_ed25519.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (d / "ssh_config").write_text(
        "\n".join(
            [
                "Host *",
                f"  UserKnownHostsFile {d}/known_hosts",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                f"  IdentityFile {d}/id_ed25519",
                "  IdentitiesOnly yes",
                "  BatchMode yes",
                "  ConnectTimeout 10",
                "  LogLevel ERROR",
                "",
            ]
        )
    )
    ssh = shutil.which("ssh") or pytest.fail("ssh not installed (Debian package openssh-client)")
    wrapper = d / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {ssh} -F {d}/ssh_config "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture(scope="module")
def ssh_uri(libvirtd, tmp_path_factory):
    """sshd on a free port of 127.0.0.1 with throwaway host and client keys; the qemu+ssh URI to the
    local libvirtd through it."""
    if not os.access(SSHD, os.X_OK):
        pytest.fail(f"{SSHD} missing: install openssh-server (ci/setup.sh does)")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_ed25519", "id_ed25519"):
        process.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"powercut-test-{key}",
                "-f",
                str(d / key),
            ],
            timeout=30,
        )
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    os.makedirs(
        "/run/sshd", mode=0o755, exist_ok=True
    )  # privilege separation dir (systemd makes it)
    port = _free_port()
    (d / "sshd_config").write_text(_sshd_config(d, port))
    process.run([SSHD, "-t", "-f", str(d / "sshd_config")], timeout=30)
    wrapper = _client_files(d, port)
    log = open(d / "sshd.log", "wb")
    with process.Spawned(
        [SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log
    ) as sshd:
        deadline = time.monotonic() + HOST_WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if sshd.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"sshd did not start: {(d / 'sshd.log').read_text()[-500:]}")
                time.sleep(0.1)
        probe = process.run(
            [str(wrapper), "-p", str(port), "root@127.0.0.1", "true"], timeout=30, check=False
        )
        if probe.returncode != 0:
            pytest.fail(
                f"ssh to the test sshd failed: {probe.stderr.strip()[-300:]} "
                f"(sshd log: {(d / 'sshd.log').read_text()[-300:]})"
            )
        yield (
            f"qemu+ssh://root@127.0.0.1:{port}/system?keyfile={quote(str(d / 'id_ed25519'))}"
            f"&command={quote(str(wrapper))}&no_tty=1"
        )
    log.close()


def domains(prefix: str) -> list[str]:
    """Names of the domains (running or defined) on the local daemon that start with ``prefix``."""
    res = process.run(["virsh", "-c", LOCAL, "list", "--all", "--name"], timeout=60)
    return [n for n in res.stdout.split() if n.startswith(prefix)]


def test_ssh_uri_is_remote(ssh_uri):
    assert not is_local_uri(ssh_uri) and is_local_uri(LOCAL)


def test_record_through_ssh_probes_kvm_there(ssh_uri, tmp_path, monkeypatch):
    """accel auto on the remote URI: the probe boots a kvm domain through libvirt (never the local
    QEMU probe), caches its verdict for that URI, and the recording runs with it.  The hypervisor is
    this host, so the verdict must be the local probe's (tcg here: /dev/kvm cannot run a guest)."""
    from powercut.images.build import build_image

    image = build_image()
    expected = accel.resolve_accel(
        "auto", image.kernel, image.initrd
    )  # the local probe (cached per machine)
    cache = tmp_path / "accel.json"
    monkeypatch.setattr(accel, "_cache_file", lambda: cache)
    monkeypatch.setattr(accel, "probe_kvm", lambda *a, **kw: pytest.fail("the local KVM probe ran"))
    spec = RecordSpec(
        fs=FsSpec(fstype="ext4", size_mb=256),
        workload=WorkloadSpec(name="append-fsync", params={"n": 3}),
        backend="libvirt",
        libvirt_uri=ssh_uri,
        accel="auto",
        timeout_s=600,
    )
    start = time.monotonic()
    rec = record(spec, tmp_path / "rec")
    wall = time.monotonic() - start
    assert rec.ok and rec.manifest["recording"]["backend"] == "libvirt"
    with open_log(rec.log_path, strict=True) as index:
        assert [k for _, k in index.acks()] == ["0", "1", "2"]
    (verdict,) = accel.cached_verdicts().values()
    # the verdict is the remote probe's, for that URI, whichever way KVM failed or worked there (a domain
    # that pauses, a QEMU that aborts at start, no agent within the timeout): the reason names the URI
    assert (
        verdict["where"] == ssh_uri
        and ssh_uri in verdict["reason"]
        and "\n" not in verdict["reason"]
    )
    assert rec.manifest["recording"]["accel"] == verdict["accel"] == expected
    assert (rec.dir / "accel-probe-console.log").exists()
    assert (
        domains(f"powercut-record-{os.getpid()}-") == [] and domains("powercut-accel-probe-") == []
    )
    print(f"\nremote recording: {wall:.1f} s wall ({verdict['reason']})")


def test_kvm_domain_that_cannot_run_is_an_error_not_a_hang(ssh_uri, tmp_path, monkeypatch):
    """--accel kvm where KVM cannot run a guest: a VmError naming the URI and the accel within the
    boot timeout, not a wait for the VM timeout.  (Where KVM works the guest simply runs.)"""
    from powercut.images.build import build_image

    image = build_image()
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "8")
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sh").write_text("exit 0\n")
    spec = VmSpec(
        kernel=image.kernel,
        initrd=image.initrd,
        memory_mb=256,
        name="pctest-kvm",
        shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(job), readonly=False)),
        console_path=str(tmp_path / "console.log"),
        timeout_s=600,
    )
    start = time.monotonic()
    try:
        res = run_vm_libvirt(spec, uri=ssh_uri, accel="kvm", rundir=tmp_path / "run")
        assert res.exit_status == 0 and res.accel == "kvm"
    except (
        VmError
    ) as e:  # behaviour, not wording: KVM pauses, aborts at start or never boots, by host
        assert ssh_uri in str(e) and "(accel kvm)" in str(e) and "\n" not in e.one_line()
    assert time.monotonic() - start < 60
    assert domains("pctest-kvm-") == []


def _wait_gone(name: str, limit: float) -> float:
    """Seconds until the local daemon no longer knows domain ``name`` (polled every 20 ms)."""
    import libvirt

    start = time.monotonic()
    conn = libvirt.open(LOCAL)
    try:
        while time.monotonic() - start < limit:
            try:
                conn.lookupByName(name)
            except libvirt.libvirtError:
                break
            time.sleep(0.02)
    finally:
        conn.close()
    return time.monotonic() - start


CHILD = """
import sys
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record
record(RecordSpec(fs=FsSpec(fstype="ext4", size_mb=256), workload=WorkloadSpec(cmd="sleep 600"),
                  backend="libvirt", libvirt_uri=sys.argv[2], accel="tcg", timeout_s=900), sys.argv[1])
"""


@pytest.mark.parametrize("via", ["local", "ssh"])
def test_kill_9_of_powercut_leaves_no_domain(via, libvirtd, request, tmp_path):
    """SIGKILL of the recording process (no finally runs): libvirtd destroys the domain by itself
    when the connection drops (AUTODESTROY)."""
    uri = LOCAL if via == "local" else request.getfixturevalue("ssh_uri")
    out = tmp_path / "rec"
    log = open(tmp_path / "child.log", "wb")
    child = process.Spawned([sys.executable, "-c", CHILD, str(out), uri], stdout=log, stderr=log)
    prefix = f"powercut-record-{child.pid}-"
    try:
        deadline = time.monotonic() + 240
        while not ((out / "job" / "started").exists() and domains(prefix)):
            if child.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"the recording never started its job: {(tmp_path / 'child.log').read_text()[-500:]}"
                )
            time.sleep(0.2)
        (name,) = domains(prefix)
        os.kill(child.pid, signal.SIGKILL)  # that process alone, as `kill -9 <pid>` would
        gone_s = _wait_gone(name, 15)
        assert child.wait(10) == -signal.SIGKILL
        assert domains(prefix) == [], f"{name} still there {gone_s:.1f} s after kill -9"
        assert gone_s < 10
        print(f"\n{via}: libvirtd removed {name} {gone_s:.2f} s after kill -9")
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the child's own group (its ssh, if still there)
        except ProcessLookupError:
            pass
        child.kill()
        log.close()


def verdicts(out):
    """Each state's verdict and reasons in a check output's journal."""
    from powercut.campaign.journal import Journal

    j = Journal(out / "journal.jsonl", resume=True)
    try:
        return {v.state: (v.verdict, v.reasons) for v in j}
    finally:
        j.close()


def test_checker_vms_on_a_remote_host_through_ssh(ssh_uri, tmp_path, monkeypatch):
    """--check-uri qemu+ssh://...: the image and the recording are shipped to the host's remote root by
    hash (nothing is read from this host's paths: the root is new), each checker VM's console and
    progress are mirrored back over ssh, every remote run directory and domain is gone at the end, and
    the verdicts equal the host-mode check of the same states, verdict for verdict, failures included."""
    from powercut.campaign.run import CampaignSpec, run_campaign
    from powercut.vm.remote import sha256_file

    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4", size_mb=256),
            workload=WorkloadSpec(name="append-fsync", params={"n": 3, "ack_early": True}),
            accel="auto",
            timeout_s=600,
        ),
        tmp_path / "rec",
    )
    assert rec.ok
    root = tmp_path / "remote-root"
    monkeypatch.setenv("POWERCUT_REMOTE_ROOT", str(root))
    how = dict(models=("flush", "write-cache"), max_states=10, shrink=0, accel="tcg")
    start = time.monotonic()
    remote, _ = run_campaign(
        rec.dir,
        CampaignSpec.of(check_in="vm", jobs=1, check_uris=(ssh_uri,), **how),
        tmp_path / "remote-check",
    )
    wall = time.monotonic() - start
    local, _ = run_campaign(
        rec.dir, CampaignSpec.of(check_in="host", jobs=1, **how), tmp_path / "host-check"
    )

    seen, expected = verdicts(tmp_path / "remote-check"), verdicts(tmp_path / "host-check")
    assert len(seen) == remote.total == local.total >= 10
    assert seen == expected
    assert local.failures and len(remote.failures) == len(
        local.failures
    )  # failures, not only passes
    sha = sha256_file(rec.log_path)
    assert (root / "recordings" / sha / rec.log_path.name).read_bytes() == rec.log_path.read_bytes()
    assert list((root / "images").glob("*/.complete")), "the image was not shipped"
    assert list((root / "runs").iterdir()) == []  # every boot's run removed
    consoles = list((tmp_path / "remote-check").rglob("console.log"))
    assert consoles and any(b"powercut-" in c.read_bytes() for c in consoles)  # mirrored back here
    assert domains(f"powercut-check-{os.getpid()}-") == []
    print(f"\nremote check of 10 states through ssh: {wall:.1f} s (first boot ships the image)")


@pytest.mark.nightly
def test_cluster_checker_vms_on_a_remote_host_through_ssh(
    ssh_uri, replog_unsynced, tmp_path, monkeypatch
):
    """--check-uri on a cluster recording (the one campaign, issue 49): every node's log is shipped
    into one directory keyed by the logs' hashes, the checker VM there judges every node of each
    state, and the verdicts equal the host-mode check's, failures included."""
    import hashlib

    from powercut.campaign.run import CampaignSpec, run_campaign
    from powercut.record import recording
    from powercut.vm.remote import sha256_file

    root = tmp_path / "remote-root"
    monkeypatch.setenv("POWERCUT_REMOTE_ROOT", str(root))
    # A recording's timing differs run to run, so which of its states fail does too; the flush
    # model's states are not seeded: --max-states spreads its picks evenly over them, so another
    # count picks other states.  Host mode (seconds) finds a count whose picks include a failure.
    for q in range(8, 24):
        how = dict(models=("flush",), max_states=q, seed=0, shrink=0, confirm=False, accel="tcg")
        local, _ = run_campaign(
            replog_unsynced,
            CampaignSpec.of(check_in="host", jobs=1, force=True, **how),
            tmp_path / "host-check",
        )
        if local.failures:
            break
    assert local.failures, (
        "no count in 8..23 picks a failing state of replog fsync=false: the fixture lost its bug"
    )
    remote, _ = run_campaign(
        replog_unsynced,
        CampaignSpec.of(check_in="vm", jobs=1, check_uris=(ssh_uri,), **how),
        tmp_path / "remote-check",
    )

    seen = verdicts(tmp_path / "remote-check")
    assert remote.nodes == 3 and len(seen) == remote.total == local.total and 8 <= local.total <= q
    assert seen == verdicts(
        tmp_path / "host-check"
    )  # failures included (the seed was chosen for one)
    logs = recording.load(replog_unsynced).node_logs
    key = hashlib.sha256("+".join(sha256_file(p) for p in logs).encode()).hexdigest()
    for p in logs:
        assert (root / "recordings" / key / p.name).read_bytes() == p.read_bytes()
    assert list((root / "runs").iterdir()) == []
    assert domains(f"powercut-check-{os.getpid()}-") == []
