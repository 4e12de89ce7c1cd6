"""Shipping by hash and mirroring for remote checker hosts (powercut.vm.remote), with a local shell
standing in for ssh: the same scripts run, only the transport differs."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from powercut.check.hosts import CheckHost, validate_uri
from powercut.check.place import Place
from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import process
from powercut.vm.remote import Mirror, Shipper, SshTarget, code_digest

LOCAL_SH = SshTarget("qemu+ssh://test/system", ("sh", "-c"), "test")


def test_ssh_argv_from_libvirt_uri():
    t = SshTarget.from_uri(
        "qemu+ssh://alice@db7.example:2201/system?keyfile=%2Fk%2Fid&command=%2Fopt%2Fssh&no_tty=1"
    )
    assert t.argv[0] == "/opt/ssh" and t.argv[-1] == "db7.example" and t.host == "db7.example"
    argv = " ".join(t.argv)
    assert (
        "-p 2201" in argv and "-i /k/id" in argv and "-l alice" in argv and "BatchMode=yes" in argv
    )
    bare = SshTarget.from_uri("qemu+ssh://host9/system")
    assert bare.argv[0] == "ssh" and "-p" not in bare.argv and "-l" not in bare.argv


@pytest.mark.parametrize(
    "uri", ["qemu+tcp://h/system", "qemu+tls://h/system", "qemu+ssh:///system", "http://h/", "h"]
)
def test_unusable_check_uris_are_one_line_usage_errors(uri):
    with pytest.raises(UsageError) as e:
        validate_uri(uri)
    assert "\n" not in e.value.one_line() and "check-uri" in str(e.value)


def test_place_refuses_uris_with_host_mode_and_twice_the_same_host():
    with pytest.raises(UsageError, match="check-in vm"):
        Place("host", uris=("qemu+ssh://h/system",))
    with pytest.raises(UsageError, match="twice"):
        Place("vm", uris=("qemu+ssh://h/system", "qemu+ssh://h/system"))
    assert not CheckHost("qemu:///system").remote and CheckHost("qemu+ssh://h/system").remote


def test_ship_file_once_then_found_by_hash(tmp_path):
    log = tmp_path / "here" / "log.bin"
    log.parent.mkdir()
    log.write_bytes(bytes(range(256)) * 1000)
    sh = Shipper(LOCAL_SH, str(tmp_path / "remote"))
    remote = sh.ship_file(log)
    sha = hashlib.sha256(log.read_bytes()).hexdigest()
    assert remote == f"{tmp_path}/remote/recordings/{sha}/log.bin"
    assert Path(remote).read_bytes() == log.read_bytes() and sh.shipped == [str(log)]
    assert sh.ship_file(log) == remote and sh.shipped == [str(log)]  # found there: not copied again
    with pytest.raises(EnvironmentNotReady, match="damaged"):  # the hash it was asked to have
        Shipper(LOCAL_SH, str(tmp_path / "other")).ship_file(log, "0" * 64)


def test_ship_tree_and_new_run_and_remove(tmp_path):
    img = tmp_path / "img"
    (img / "bin").mkdir(parents=True)
    (img / "vmlinuz").write_bytes(b"k" * 5000)
    (img / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    sh = Shipper(LOCAL_SH, str(tmp_path / "remote"))
    d = sh.ship_tree(img, "abc123")
    assert Path(d, "vmlinuz").read_bytes() == b"k" * 5000 and Path(d, "bin", "tool").exists()
    assert sh.ship_tree(img, "abc123") == d and sh.shipped == [str(img)]
    run = sh.new_run("r1", {"job/job.json": b"{}", "console.log": b""}, {"scratch.img": 1 << 30})
    assert Path(run, "job", "job.json").read_bytes() == b"{}"
    assert (
        Path(run, "scratch.img").stat().st_size == 1 << 30
        and Path(run, "scratch.img").stat().st_blocks == 0
    )
    sh.remove(run)
    assert not Path(run).exists()
    sh.remove(str(tmp_path))  # never outside <root>/runs/
    assert tmp_path.exists()


def test_mirror_fetches_appended_bytes_and_whole_files(tmp_path):
    remote = tmp_path / "remote"
    (remote / "job").mkdir(parents=True)
    con = remote / "console.log"
    con.write_bytes(b"boot\x00\xff line 1\n")
    m = Mirror(
        LOCAL_SH,
        str(remote),
        tmp_path / "local",
        ("console.log", "job/progress.jsonl"),
        ("job/result.json",),
    )
    m.sync()
    assert m.local(str(con)).read_bytes() == b"boot\x00\xff line 1\n"
    with open(con, "ab") as f:
        f.write(b"line 2 with\nnewlines\n")
    (remote / "job" / "progress.jsonl").write_text('{"begin": "s1"}\n')
    m.sync()
    assert m.local(str(con)).read_bytes() == con.read_bytes()
    assert (tmp_path / "local" / "job" / "progress.jsonl").read_text() == '{"begin": "s1"}\n'
    assert not (tmp_path / "local" / "job" / "result.json").exists()  # whole files only at the end
    (remote / "job" / "result.json").write_text('{"ok": true}')
    m.sync(final=True)
    assert (tmp_path / "local" / "job" / "result.json").read_text() == '{"ok": true}'
    assert m.offsets["console.log"] == con.stat().st_size


def test_a_lost_round_trip_refetches_from_the_same_offset(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "console.log").write_bytes(b"abc")
    broken = SshTarget("qemu+ssh://x/system", ("false",), "x")
    m = Mirror(broken, str(remote), tmp_path / "local", ("console.log",))
    m.sync()
    assert m.offsets["console.log"] == 0
    m.target = LOCAL_SH
    m.sync()
    assert m.local(str(remote / "console.log")).read_bytes() == b"abc"


def test_a_host_with_other_code_is_refused_before_anything_ships(tmp_path, monkeypatch):
    host = CheckHost("qemu+ssh://h/system", str(tmp_path / "remote"))
    host.shipper.target = SshTarget("qemu+ssh://h/system", ("sh", "-c"), "h")
    monkeypatch.setattr("powercut.check.hosts.sys.executable", "/nonexistent/python3")
    from powercut.check.context import LogSource

    with pytest.raises(EnvironmentNotReady, match="has no /nonexistent/python3"):
        host.stage(LogSource(tmp_path / "log", 1 << 20), "/img/vmlinuz", "/img/initrd", "", ())
    assert not (tmp_path / "remote").exists()
    assert len(code_digest()) == 16


def _host(tmp_path) -> CheckHost:
    host = CheckHost("qemu+ssh://h/system", str(tmp_path / "remote"))
    host.shipper.target = SshTarget("qemu+ssh://h/system", ("sh", "-c"), "h")
    return host


def test_stage_ships_the_image_and_the_recording_once(tmp_path):
    from powercut.check.context import LogSource

    img = tmp_path / "images" / "0123abcd"
    (img / "bin").mkdir(parents=True)
    for name in ("vmlinux", "initrd.cpio", "bin/powercut-mark"):
        (img / name).write_bytes(name.encode() * 100)
    log = tmp_path / "rec" / "log.bin"
    log.parent.mkdir()
    log.write_bytes(b"\x01" * 4096)
    host = _host(tmp_path)
    st = host.stage(
        LogSource(log, 1 << 20),
        str(img / "vmlinux"),
        str(img / "initrd.cpio"),
        str(img / "bin"),
        (),
    )
    root = tmp_path / "remote"
    assert (
        st.kernel == f"{root}/images/0123abcd/vmlinux"
        and Path(st.initrd).read_bytes() == b"initrd.cpio" * 100
    )
    assert (
        st.tools_dir == f"{root}/images/0123abcd/bin"
        and Path(st.rec_dir, "log.bin").read_bytes() == log.read_bytes()
    )
    assert host.stage(LogSource(log, 1 << 20), "x", "y", "z", ()) is st  # once per host and run
    again = _host(tmp_path)
    again.stage(
        LogSource(log, 1 << 20),
        str(img / "vmlinux"),
        str(img / "initrd.cpio"),
        str(img / "bin"),
        (),
    )
    assert again.shipper.shipped == []  # found there by hash
    with pytest.raises(UsageError, match="same path"):
        _host(tmp_path).stage(
            LogSource(log, 1 << 20),
            str(img / "vmlinux"),
            str(img / "initrd.cpio"),
            "",
            (str(tmp_path / "not-there"),),
        )


@pytest.mark.parametrize("root", ["", "/", "relative/dir"])
def test_the_remote_root_is_an_absolute_directory_other_than_slash(root):
    with pytest.raises(UsageError, match="remote root"):
        Shipper(LOCAL_SH, root)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ssh_runs_through_the_process_runner_timeout_kills_its_group(tmp_path):
    """ssh runs in its own process group: a timeout kills what it started too (subprocess.run would
    kill only the child and leave the grandchild running)."""
    pidfile = tmp_path / "pid"
    with pytest.raises(EnvironmentNotReady, match=r"test: no answer over ssh within 0.5 s"):
        LOCAL_SH.run(f"sleep 60 & echo $! > {pidfile}; wait", timeout=0.5)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def test_an_interrupt_kills_a_running_ssh(tmp_path):
    """A running ssh is one of the runner's live groups, so the interrupt handler's kill_all ends it."""
    out: list[object] = []
    started = tmp_path / "started"
    t = threading.Thread(
        target=lambda: out.append(LOCAL_SH.run(f"touch {started}; sleep 60", check=False))
    )
    t.start()
    deadline = time.monotonic() + 10
    while not (started.exists() and process.live_groups()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.live_groups()
    assert process.kill_all() >= 1
    t.join(10)
    assert not t.is_alive()
    res = out[0]
    assert (
        isinstance(res, process.Result)
        and res.returncode == -signal.SIGKILL
        and res.argv[:2] == ("sh", "-c")
    )


def test_a_missing_ssh_program_is_one_line_naming_the_host():
    with pytest.raises(
        EnvironmentNotReady, match=r"cannot run /nonexistent/ssh to reach h9: not found"
    ):
        SshTarget("qemu+ssh://h9/system", ("/nonexistent/ssh", "h9"), "h9").run("true")
