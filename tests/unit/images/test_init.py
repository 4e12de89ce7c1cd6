"""init.sh and the template agent mount one table (vm-images/mounts.txt) alike: init.sh's own
``mount_table`` (its functions, run by busybox sh with ``mount``/``mkdir``/``finish`` recording what
they are asked) and guest/template.py's ``mount_host`` over ``linux/mounts.guest_mounts`` (with
``mount``/``os.makedirs`` recording) make the same calls, in the same order, stop at the same
failure, for each kind of kernel command line; and the 9p options are written once."""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

import pytest

from powercut.guest import template
from powercut.linux import process
from powercut.linux.mounts import MountError, guest_mounts

ROOT = Path(__file__).resolve().parents[3]
INIT = (ROOT / "vm-images" / "init.sh").read_text()
TABLE = resources.files("powercut.images").joinpath("mounts.txt").read_text()
BUSYBOX = "/bin/busybox"

# a table with what the real one does not use: options on a bind, '-' on a share, '%' mid-word
ODD_TABLE = """\
9p-options  trans=virtio,msize=4096
always  hostroot  /          9p     -
always  -         /a/b       dir    -
share   %         /s/%/x     9p     ro,cache=none
keep    /tmp      /kt        bind   ro
kept    /kt%      /tmp%      bind   -
if-dir  configfs  /cfg       configfs  -
always  tmpfs     /last      tmpfs  size=1m,mode=700
"""

STUBS = r"""
mount() {
    printf 'mount'; printf ' %s' "$@"; printf '\n'
    [ -n "$FAIL" ] && case "$*" in *"$FAIL"*) return 32 ;; esac
    return 0
}
mkdir() { [ "$1" = -p ] && shift; printf 'mkdir %s\n' "$1"; }
finish() { echo "finish $1"; exit "$1"; }
"""


def init_functions() -> str:
    """init.sh's mount_table and the functions it calls, as written there."""
    out = []
    for name in ("fill", "mount_one", "mount_table"):
        m = re.search(rf"^{name}\(\) \{{.*?^\}}$", INIT, re.S | re.M)
        assert m, f"init.sh has no function {name}"
        out.append(m.group(0))
    return "\n".join(out)


def shell_calls(
    table: str, root: Path, args: dict[str, str], fail: str, tmp_path: Path
) -> list[str]:
    (tmp_path / "table").write_text(table)
    script = STUBS + init_functions() + '\nmount_table "$ROOT" "$TABLE"\necho done\n'
    env = {
        "PATH": "/usr/bin:/bin",
        "ROOT": str(root),
        "TABLE": str(tmp_path / "table"),
        "FAIL": fail,
        "transport": args.get("powercut.transport", ""),
        "keep": args.get("powercut.keep", ""),
        "extra_mounts": args.get("powercut.mount", ""),
    }
    res = process.run(
        [process.require(BUSYBOX, "busybox-static"), "sh", "-c", script],
        env=env,
        timeout=30,
        check=False,
    )
    assert res.returncode in (0, 125), res.stderr
    return [
        line
        for line in res.stdout.splitlines()
        if line.split(" ", 1)[0] in ("mount", "mkdir", "finish", "done")
    ]


def agent_calls(
    table: str, root: Path, args: dict[str, str], fail: str, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    calls: list[str] = []

    def mount(source: str, target: str, fstype: str, options: str = "", **kw: object) -> None:
        assert not kw
        calls.append(
            " ".join(["mount", "-t", fstype, *(["-o", options] if options else []), source, target])
        )
        if fail and fail in calls[-1][len("mount ") :]:
            raise MountError(f"cannot mount {source}")

    monkeypatch.setattr(template, "mount", mount)
    monkeypatch.setattr(os, "makedirs", lambda path, exist_ok=False: calls.append(f"mkdir {path}"))
    try:
        template.mount_host(guest_mounts(table, str(root), args))
    except MountError:
        return calls + ["finish 125"]
    finally:
        monkeypatch.undo()
    return calls + ["done"]


CASES = {
    "bare": ({}, "", False),
    "9p-keep-shares": (
        {
            "powercut.transport": "9p",
            "powercut.keep": "/tmp/co,/home/x,/tmp/venv/a",
            "powercut.mount": "t1,t2",
        },
        "",
        True,
    ),
    "virtiofs-keep-outside-tmp": (
        {"powercut.transport": "virtiofs", "powercut.keep": "/home/x", "powercut.mount": "t1"},
        "",
        False,
    ),
    "job-share-fails": ({"powercut.mount": "t1"}, "/run/powercut/job", True),
    "kept-bind-fails": ({"powercut.keep": "/tmp/a,/tmp/b"}, "hosttmp/b", True),
    "optional-fails": ({}, "configfs", True),
}


@pytest.mark.parametrize("table", [TABLE, ODD_TABLE], ids=["mounts.txt", "odd"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_init_and_the_template_agent_mount_the_table_alike(
    case: str, table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, fail, configfs = CASES[case]
    root = tmp_path / "root"
    root.mkdir()
    if configfs:
        (root / "sys" / "kernel" / "config").mkdir(parents=True)
        (root / "cfg").mkdir()
    sh = shell_calls(table, root, args, fail, tmp_path)
    py = agent_calls(table, root, args, fail, monkeypatch)
    assert sh == py
    assert sum(c.startswith("mount") for c in sh) >= 2
    if table == TABLE:
        assert sh[-1] == ("finish 125" if fail and fail != "configfs" else "done")


def test_the_real_table_mounts_what_a_job_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spot check of the walk itself (the test above only proves the two sides agree)."""
    r = tmp_path / "root"
    r.mkdir()
    calls = agent_calls(
        TABLE, r, {"powercut.keep": "/tmp/co", "powercut.mount": "tools"}, "", monkeypatch
    )
    mounts = [c for c in calls if c.startswith("mount")]
    ninep = "trans=virtio,version=9p2000.L,msize=262144"
    assert mounts[0] == f"mount -t 9p -o {ninep},ro,cache=loose hostroot {r}"
    assert f"mount -t none -o bind {r}/tmp {r}/run/powercut/hosttmp" in mounts
    assert (
        mounts.index(f"mount -t none -o bind {r}/tmp {r}/run/powercut/hosttmp")
        < mounts.index(f"mount -t tmpfs -o mode=1777 tmpfs {r}/tmp")
        < mounts.index(f"mount -t none -o bind {r}/run/powercut/hosttmp/co {r}/tmp/co")
    )
    assert f"mount -t 9p -o {ninep},rw job {r}/run/powercut/job" in mounts
    assert f"mount -t 9p -o {ninep},ro tools {r}/run/powercut/tools" in mounts
    assert f"mkdir {r}/run/powercut/mnt" in calls


def test_the_9p_options_are_written_once() -> None:
    hits = [
        str(p.relative_to(ROOT))
        for top in ("harness", "vm-images")
        for p in (ROOT / top).rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and "9p2000.L" in p.read_text(errors="replace")
    ]
    assert hits == ["vm-images/mounts.txt"]


def test_the_template_root_gets_the_table() -> None:
    """The template's init copies the table where the agent reads it (guest/template.TABLE)."""
    m = re.search(r"^if \[ -n \"\$template\" \]; then$.*?^fi$", INIT, re.S | re.M)
    assert m and f"cp /etc/powercut/mounts /pcroot{template.TABLE}" in m.group(0)
    chroot = m.group(0).index("chroot /pcroot")
    assert m.group(0).index("cp /etc/powercut/mounts") < chroot
