"""The corpus and crash, recover, crash again, in real VMs (docs/corpus.md).

One corpus entry in the README's test command (the nightly runs every entry as the corpus file
says): redb 0.16.0's panic on reopening a database whose writer crashed, caught; 0.17.0 passing
every state judged -- both releases built from crates.io into the cache by ci/setup.sh, recorded
and judged through the entry's driver -- under the flush model only (every flush state: the
entry's write-cache states are the nightly's), from a copy of the corpus file (``--file``).

Crash, recover, crash again: a second recording from a crash state of a first one starts from that
state's image (its states before the workload's first write pass: the first run's records are
there), and the first crash's acks must survive the second recording (a workload that deletes
them fails ``lost-ack``; its repro bundle carries the image and still fails)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from powercut.campaign import corpus as run
from powercut.config import FsSpec, WorkloadSpec, dumps_toml
from powercut.record.vm import RecordSpec, record
from powercut.report import corpus

pytestmark = pytest.mark.vm
ENTRY = "redb-reopen-after-crash"
# a checker for the second recording: at least as many append-fsync records as keys acked
CHECKER = """import json, os, sys
d = json.load(sys.stdin)
data = open("append.log", "rb").read() if os.path.exists("append.log") else b""
have, need = data.count(b"PCREC1 "), len(set(d["acked"]))
print(json.dumps({"verdict": "pass" if have >= need else "lost-ack",
                  "reasons": [f"{have} records in append.log, {need} keys acked"]}))
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=1800
    )


def test_the_readme_corpus_entry_is_caught_and_its_fix_passes(tmp_path: Path) -> None:
    (entry,) = corpus.choose(corpus.load(), [ENTRY])
    if not shutil.which("cargo") and not all(
        run.is_built(entry.program, v) for _, v in entry.releases()
    ):
        pytest.skip("no cargo to build redb's releases (ci/setup.sh builds them where cargo is)")
    doc = tomllib.loads(corpus.default_path().read_text())
    (quick,) = [d for d in doc["entry"] if d["name"] == ENTRY]
    quick.update(models=["flush"], max_states=0)
    short = tmp_path / "corpus.toml"
    short.write_text(dumps_toml({"entry": [quick]}))
    r = cli("corpus", ENTRY, "--file", str(short), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    (res,) = json.loads((tmp_path / "out" / "corpus.json").read_text())["results"]
    assert res["status"] == "reproduced" and res["as_recorded"]
    buggy, fixed = res["buggy"], res["fixed"]
    assert buggy["failing"] > 0 and buggy["message_seen"]
    assert "Tried to repair an empty database" in buggy["first_reason"]
    assert fixed["verdict"] == "pass" and fixed["judged"] > 0 and fixed["failing"] == 0
    assert fixed["coverage"].startswith("exhaustive")
    table = (tmp_path / "out" / "corpus.md").read_text()
    assert f"[{ENTRY}]" in table and "0.16.0 → 0.17.0" in table
    assert "reproduces 1 of 1 published bugs" in r.stdout


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """append-fsync n=3 on ext4, and the last flush state holding all three acks."""
    out = tmp_path_factory.mktemp("first") / "rec"
    record(
        RecordSpec(
            fs=FsSpec(size_mb=64), workload=WorkloadSpec(name="append-fsync", params={"n": 3})
        ),
        out,
    )
    r = cli("states", str(out), "--model", "flush", "--json")
    assert r.returncode == 0, r.stderr
    states = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    done = [s for s in states if len(s["acks"]) == 3 and not set(s["begun"]) - set(s["acks"])]
    return out, done[0]["id"]


def second(tmp_path: Path, first: tuple[Path, str], cmd: str) -> subprocess.CompletedProcess[str]:
    checker = tmp_path / "check.py"
    checker.write_text(CHECKER)
    rec, state = first
    return cli(
        "run",
        "--cmd",
        cmd,
        "--from",
        str(rec),
        "--state",
        state,
        "--checker",
        f"{sys.executable} {checker}",
        "--check-in",
        "host",
        "--model",
        "flush",
        "--model",
        "write-cache",
        "-o",
        str(tmp_path / "second"),
    )


def test_a_second_recording_starts_from_the_state_and_must_keep_its_acks(
    tmp_path: Path, first: tuple[Path, str]
) -> None:
    r = second(tmp_path, first, "sync && rm append.log && sync")
    assert r.returncode == 3, r.stdout + r.stderr
    summary = json.loads((tmp_path / "second" / "check" / "summary.json").read_text())
    assert summary["from"]["state"] == first[1]
    assert summary["from"]["recording"] == str(first[0]) and summary["from"]["acked"] == 3
    assert (tmp_path / "second" / "initial.img").is_file()
    # before the removal every state holds the first recording's three records: the states are
    # rebuilt on the first crash state's image (on zeros there would be no filesystem at all)
    assert summary["by_model"]["flush"].get("pass", 0) > 0
    # after it, the first crash's acks are lost: a finding of the second recording
    assert {f["verdict"] for f in summary["failures"]} == {"lost-ack"}
    said = [f["reasons"][0] for f in summary["failures"]]
    assert any("0 records in append.log, 3 keys acked" in x for x in said)
    bundle = Path(summary["groups"][0]["bundle"])
    assert (bundle / "initial.img").is_file()
    again = cli("repro", str(bundle), "--check-in", "host")
    assert again.returncode == 3, again.stdout + again.stderr
    assert "still fails" in again.stdout
