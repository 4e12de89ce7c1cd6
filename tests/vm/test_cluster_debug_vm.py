"""A failing cluster check end to end (docs/clusters.md, "When a cluster fails"): three replog nodes
whose replicas answer before their fsync, recorded once; the check groups the lost acks, confirms
the group alone, minimizes its first state node by node (it still fails; no node keeps a later cut
or loses more writes), blames each node and writes a cluster repro bundle that ``powercut repro
--check-in host`` re-judges to the same verdict (as does a repro of the recording with the minimized
id) -- and refuses once a node's log is altered; `--keep-image` writes each node's crash image,
`--shell` opens a shell with every node mounted; in checker VMs the diagnosis, blame per node
included, runs in the check's VM as one disk's does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(os.geteuid() != 0, reason="host-mode checks need root"),
]


def powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def checked(
    replog_unsynced: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any], str]:
    d = tmp_path_factory.mktemp("cluster")
    chk = powercut(
        "check",
        str(replog_unsynced),
        "--check-in",
        "host",
        "--max-states",
        "60",
        "-o",
        str(d / "out"),
    )
    assert chk.returncode == 3, chk.stdout + chk.stderr
    return d / "out", json.loads((d / "out" / "summary.json").read_text()), chk.stdout


def test_the_failure_group_is_confirmed_minimized_per_node_and_bundled(
    checked: tuple[Path, dict[str, Any], str],
) -> None:
    out, summary, stdout = checked
    g = summary["groups"][0]
    why = json.dumps(summary["groups"], indent=1)[:4000] + stdout[-3000:]
    assert g["verdict"] == "lost-ack" and sum(x["count"] for x in summary["groups"]) == sum(
        c.get("lost-ack", 0) for c in summary["by_model"].values()
    ), why
    assert g["confirmed_alone"] >= 1 and g["unconfirmed"] == 0 and summary["flaky"] == 0, why
    assert g["minimized"].split("~")[0] == g["first"].split("~")[0] and g["minimized_confirmed"], (
        why
    )
    for sh in g["node_shrink"]:
        assert sh["cut"][1] <= sh["cut"][0] and sh["lost"][1] <= sh["lost"][0], why
    assert any("replog.log" in c for node in g["node_culprits"] for c in node), why
    assert (
        "GROUP 1: lost-ack" in stdout
        and "node 2: cut" in stdout
        and "repro: powercut repro" in stdout
    ), why
    bundle = Path(g["bundle"])
    doc = json.loads((bundle / "bundle.json").read_text())
    assert doc["nodes"] == 3 and doc["minimized"] == g["minimized"] and len(doc["blame"]) == 3
    assert sorted(p.name for p in bundle.glob("log*.bin")) == ["log0.bin", "log1.bin", "log2.bin"]
    rep = powercut("repro", str(bundle), "--check-in", "host")
    assert rep.returncode == 3, rep.stdout + rep.stderr
    assert (
        "lost-ack" in rep.stdout and "still fails: the same verdict as in the bundle" in rep.stdout
    )
    vm = powercut("repro", str(bundle))  # the default: in a checker VM
    assert vm.returncode == 3 and "still fails: the same verdict as in the bundle" in vm.stdout, (
        vm.stdout + vm.stderr
    )
    rec = powercut("repro", summary["recording"], "--state", g["minimized"], "--check-in", "host")
    assert rec.returncode == 3 and f"{g['minimized']} (recording " in rec.stdout, (
        rec.stdout + rec.stderr
    )


def test_the_diagnosis_runs_in_the_checker_vm_with_blame_per_node(
    replog_unsynced: Path, tmp_path: Path
) -> None:
    """In checker VMs (the default) the diagnosis runs whole in the check's warm VM, as one disk's
    does: minimized node by node, each node blamed with the filesystem's tools in the guest (it was
    host mode only), the cause line naming the nodes' files."""
    chk = powercut(
        "check",
        str(replog_unsynced),
        "--model",
        "write-cache",
        "--max-states",
        "24",
        "--shrink",
        "1",
        "--no-confirm",
        "-j",
        "1",
        "-o",
        str(tmp_path / "out"),
    )
    assert chk.returncode == 3, chk.stdout + chk.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    g = summary["groups"][0]
    why = json.dumps(g, indent=1)[:4000] + chk.stdout[-3000:]
    assert (
        summary["check_in"] == "vm"
        and g["verdict"] == "lost-ack"
        and g["minimized"].startswith("write-cache~")
    ), why
    assert len(g["node_shrink"]) == 3 and "diagnosis_error" not in g and "blame_note" not in g, why
    assert any("replog.log" in c for node in g["node_culprits"] for c in node), why
    assert "replog.log" in g["cause"] and "node 0:" in g["cause"], why


def test_a_bundle_with_an_altered_node_log_is_refused(
    checked: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    out, summary, _ = checked
    bundle = tmp_path / "b"
    shutil.copytree(summary["groups"][0]["bundle"], bundle)
    log2 = bundle / "log2.bin"
    data = bytearray(log2.read_bytes())
    data[len(data) // 2] ^= 0xFF
    log2.write_bytes(bytes(data))
    rep = powercut("repro", str(bundle), "--check-in", "host")
    assert rep.returncode == 1 and "node 2's log log2.bin was altered" in rep.stderr, (
        rep.stdout + rep.stderr
    )
    assert "Traceback" not in rep.stderr


def test_keep_image_writes_each_nodes_crash_image(
    checked: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    """``repro --keep-image PATH`` of a cluster bundle: each node's image as the crash left it (before
    recovery) at PATH.n<i>, the verdict as without it."""
    _, summary, _ = checked
    rep = powercut(
        "repro",
        summary["groups"][0]["bundle"],
        "--check-in",
        "host",
        "--keep-image",
        str(tmp_path / "state.img"),
    )
    assert rep.returncode == 3 and "still fails: the same verdict as in the bundle" in rep.stdout, (
        rep.stdout + rep.stderr
    )
    imgs = [tmp_path / f"state.img.n{i}" for i in range(3)]
    assert (
        f"images, one per node (as the crash left them, before recovery): {', '.join(map(str, imgs))}"
        in rep.stdout
    ), rep.stdout
    size = json.loads((Path(summary["groups"][0]["bundle"]) / "bundle.json").read_text())[
        "data_size"
    ]
    for img in imgs:
        assert img.stat().st_size == size
        with open(img, "rb") as f:  # an ext4 superblock: the node's filesystem, not zeros
            f.seek(1024 + 56)
            assert f.read(2) == b"\x53\xef", img
    assert not (tmp_path / "state.img").exists()


def test_shell_on_a_cluster_state_mounts_every_node(
    checked: tuple[Path, dict[str, Any], str],
) -> None:
    """``repro --shell`` of a cluster bundle, input piped (held until the guest's shell is ready; its
    end of file ends the shell): every node recovered and mounted at n<i> below the shell's cwd."""
    _, summary, _ = checked
    p = subprocess.run(
        [sys.executable, "-m", "powercut.cli", "repro", summary["groups"][0]["bundle"], "--shell"],
        input=b"ls n0 n1 n2 && echo nodes-$((6*7))\n",
        capture_output=True,
        timeout=900,
    )
    out = p.stdout.decode(errors="replace")
    assert (
        "recovered and mounted at /run/powercut/mnt/n0, /run/powercut/mnt/n1, /run/powercut/mnt/n2"
        in out
    ), out[-3000:] + p.stderr.decode(errors="replace")[-2000:]
    assert "nodes-42" in out and out.count("replog.log") >= 3, out[-3000:]
    assert p.returncode == 3 and "still fails: the same verdict as in the bundle" in out, out[
        -2000:
    ]
