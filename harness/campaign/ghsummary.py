"""The GitHub Action's two ends (host, no VM; ``ci/action/shard.sh`` and ``merge.sh`` call them).

    python -m powercut.campaign.ghsummary shard OUT --shard I/N --accel auto|kvm|tcg --pytest-status RC
    python -m powercut.campaign.ghsummary merge SHARD_OUT... -o DIR [--step-summary FILE] [--artifact-prefix P]

``shard``, after ``pytest --powercut-shard I/N --powercut-out OUT/tests --junitxml OUT/junit.xml``,
writes ``OUT/shard.json``: the shard, pytest's exit status and the acceleration each crash test's
recording VM really used (its manifest's ``recording.accel``); KVM asked for and TCG used is an
error.  ``merge`` refuses two outputs of one shard or different shard counts, names a missing shard
(never a pass) and writes into DIR one ``junit.xml`` (each case with its shard; the runners'
absolute paths made relative to DIR), ``tests/<test>/`` (each crash test's check output and repro
bundles), ``report.html``, ``summary.md`` (the job summary: verdict, tests, failure groups with
their repro commands, artifacts) and ``summary.json``.  Exit status, of both: 0 every test passed,
3 a test failed, 1 an error (a missing shard, a pytest that did not finish, TCG where KVM was asked
for), 2 a bad argument."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from powercut.campaign.ghreport import STATUS_WORDS, TESTS, Case, Merged, markdown, page
from powercut.core.states.shard import Shard
from powercut.errors import UsageError

SHARD_JSON = "shard.json"
# a recording's logs and final data images, one disk's or every node's (record/vm.disk_files):
# large, and no repro needs them (a bundle keeps its own logs)
BIG = re.compile(r"log(-n\d+)?\.bin|data(-n\d+)?-final\.img")


def annotate(level: str, text: str) -> None:
    """One line on stderr; a GitHub annotation (``::error::``) when run by GitHub Actions."""
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::{level}::{text}", file=sys.stderr)
    else:
        print(f"powercut: {level}: {text}", file=sys.stderr)


# ---------------------------------------------------------------- one shard


def recording_accels(tests_dir: Path) -> dict[str, str]:
    """{test slug: the acceleration its recording VM ran under} for every crash test in ``tests_dir``."""
    out: dict[str, str] = {}
    if not tests_dir.is_dir():
        return out
    for manifest in sorted(tests_dir.glob("*/recording/manifest.toml")):
        try:
            accel = tomllib.loads(manifest.read_text()).get("recording", {}).get("accel")
        except (OSError, ValueError):
            accel = None
        out[manifest.parent.parent.name] = str(accel or "unknown")
    return out


def shard_status(pytest_status: int) -> tuple[int, str]:
    """(status, what it means) for pytest's exit status."""
    if pytest_status == 0:
        return 0, "every test passed"
    if pytest_status == 5:
        return 0, "no test in this shard"
    if pytest_status == 1:
        return 3, "a test failed"
    words = {
        2: "interrupted",
        3: "an internal error",
        4: "a usage error (pytest refused its arguments)",
    }
    return 1, f"pytest ended with {words.get(pytest_status, f'exit status {pytest_status}')}"


def finish_shard(
    out: Path, shard: Shard, accel: str, pytest_status: int, *, prune: bool = True
) -> dict[str, Any]:
    """Write ``out/shard.json`` for a finished pytest shard; drop the recordings' disk and log files
    (``prune``)."""
    if accel not in ("auto", "kvm", "tcg"):
        raise UsageError(f"--accel wants auto, kvm or tcg, not {accel!r}")
    if not out.is_dir():
        raise UsageError(f"{out}: no such directory (the shard's pytest did not run?)")
    tests_dir = out / TESTS
    accels = recording_accels(tests_dir)
    status, meaning = shard_status(pytest_status)
    problems = []
    if not (out / "junit.xml").is_file() and pytest_status != 5:
        problems.append(f"shard {shard}: pytest wrote no junit.xml ({meaning})")
        status = 1
    tcg = sorted(t for t, a in accels.items() if a != "kvm")
    if accel == "kvm" and tcg:
        problems.append(
            f"shard {shard}: KVM was asked for, but {len(tcg)} of {len(accels)} crash test(s) ran their "
            f"VM under {'/'.join(sorted({accels[t] for t in tcg}))} ({', '.join(tcg[:3])}"
            f"{', ...' if len(tcg) > 3 else ''}): the runner has no working /dev/kvm"
        )
        status = 1
    if status == 1 and not problems:
        problems.append(f"shard {shard}: {meaning}")
    if prune and tests_dir.is_dir():
        for f in tests_dir.glob("*/recording/*"):
            if BIG.fullmatch(f.name):
                f.unlink()
    doc = {
        "shard": str(shard),
        "pytest_status": pytest_status,
        "status": status,
        "meaning": meaning,
        "accel_asked": accel,
        "accels": accels,
        "problems": problems,
        "tests_dir": str(tests_dir.absolute()),
    }
    (out / SHARD_JSON).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# ---------------------------------------------------------------- the merge


def _load_shard(path: Path) -> dict[str, Any]:
    if not (path / SHARD_JSON).is_file():
        raise UsageError(f"{path}: not a shard output of the powercut action (no {SHARD_JSON})")
    try:
        doc = json.loads((path / SHARD_JSON).read_text())
        doc["_shard"] = Shard.parse(str(doc["shard"]))
    except UsageError as e:
        raise UsageError(f"{path}/{SHARD_JSON}: {e.one_line()}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}/{SHARD_JSON} is unreadable ({e})") from None
    doc["_dir"] = path
    return doc


def _nodeid(case: ET.Element) -> str:
    """pytest's node id back from a JUnit case (classname a.b.test_x, name test_y -> a/b/test_x.py::test_y)."""
    cls, name = case.get("classname", ""), case.get("name", "")
    parts = cls.split(".")
    for k in range(len(parts), 0, -1):  # the module is the longest prefix; the rest are classes
        if parts[k - 1].startswith("test") or k == 1:
            return "::".join(["/".join(parts[:k]) + ".py", *parts[k:], name])
    return f"{cls}::{name}"


def _cases(doc: dict[str, Any], into: ET.Element) -> list[Case]:
    """The shard's test cases, copied into the merged suite ``into`` with its absolute paths made
    relative to the merge."""
    junit = doc["_dir"] / "junit.xml"
    if not junit.is_file():
        return []
    old = str(doc.get("tests_dir") or "").rstrip("/")
    text = junit.read_text()
    if old:
        text = text.replace(old + "/", TESTS + "/")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise UsageError(f"{junit}: not readable JUnit ({e})") from None
    out = []
    for el in root.iter("testcase"):
        props_el = el.find("properties")
        if props_el is None:
            props_el = ET.Element("properties")
            el.insert(0, props_el)
        ET.SubElement(props_el, "property", name="powercut_shard", value=str(doc["_shard"]))
        props = {p.get("name", ""): p.get("value", "") for p in props_el.iter("property")}
        result, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            bad = el.find(tag)
            if bad is not None:
                result = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (
                    (bad.get("message") or bad.text or "").strip().splitlines()[0]
                    if (bad.get("message") or bad.text)
                    else tag
                )
                break
        artifacts = props.get("powercut_artifacts", "")
        slug = (
            artifacts.removeprefix(TESTS + "/").split("/")[0]
            if artifacts.startswith(TESTS + "/")
            else ""
        )
        out.append(Case(_nodeid(el), str(doc["_shard"]), result, message, props, slug))
        into.append(el)
    return out


def _groups(check: Path) -> list[dict[str, Any]]:
    """The failure groups of one crash test's check (summary.json), bundle paths relative to the merge."""
    try:
        summary = json.loads((check / "summary.json").read_text())
    except (OSError, ValueError):
        return []
    out = []
    for g in summary.get("groups", []):
        bundle = str(g.get("bundle") or "")
        m = re.search(r"/check/bundles/([^/]+)$", bundle)
        out.append(
            {
                "verdict": g.get("verdict", "?"),
                "count": g.get("count", 0),
                "cause": str(g.get("cause") or g.get("reason_class") or "").removeprefix(
                    f"{g.get('verdict')}: "
                ),
                "first": g.get("first", ""),
                "minimized": g.get("minimized", ""),
                "blame": [str(c) for c in g.get("culprits", [])[:2]],
                "bundle": f"{TESTS}/{check.parent.name}/check/bundles/{m.group(1)}" if m else "",
            }
        )
    return out


def _recording_files(where: str, names: list[str]) -> list[str]:
    """copytree's ignore: a recording's logs and data images (a repro bundle keeps its own logs)."""
    return [n for n in names if BIG.fullmatch(n)] if Path(where).name == "recording" else []


def merge(paths: list[str | Path], out: str | Path, *, artifact_prefix: str = "powercut") -> Merged:
    if not paths:
        raise UsageError("give the shards' outputs to merge")
    docs = sorted((_load_shard(Path(p)) for p in paths), key=lambda d: d["_shard"].index)
    total = docs[0]["_shard"].total
    seen: dict[int, Path] = {}
    for d in docs:
        if d["_shard"].total != total:
            raise UsageError(
                f"{docs[0]['_dir']} is shard {docs[0]['_shard']}, {d['_dir']} is shard {d['_shard']}: "
                "different shard counts cannot be merged"
            )
        if d["_shard"].index in seen:
            raise UsageError(
                f"{seen[d['_shard'].index]} and {d['_dir']} are both shard {d['_shard']}: give each once"
            )
        seen[d["_shard"].index] = d["_dir"]
    outdir = Path(out)
    if any(outdir.resolve() == d["_dir"].resolve() for d in docs):
        raise UsageError(f"{outdir} is one of the shards: merge into another -o")
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "summary.md").exists():
        raise UsageError(f"{outdir} exists and is not a merge output; choose another -o")
    if outdir.exists():
        shutil.rmtree(outdir)
    (outdir / TESTS).mkdir(parents=True)
    missing = [f"{i}/{total}" for i in range(1, total + 1) if i not in seen]
    problems = [
        f"shard {m}: missing (its job did not upload an output: see that job's log)"
        for m in missing
    ]
    suite = ET.Element("testsuite", name="powercut crash tests")
    cases: list[Case] = []
    for d in docs:
        problems.extend(str(p) for p in d.get("problems", []))
        cases.extend(_cases(d, suite))
        src = d["_dir"] / TESTS
        if src.is_dir():
            for t in sorted(src.iterdir()):
                if t.is_dir() and not (outdir / TESTS / t.name).exists():
                    shutil.copytree(t, outdir / TESTS / t.name, ignore=_recording_files)
    for c in cases:
        if c.slug:
            c.groups = _groups(outdir / TESTS / c.slug / "check")
            try:  # the test's own node id (JUnit's classname only guesses at the file's path)
                c.nodeid = str(
                    json.loads((outdir / TESTS / c.slug / "crashtest.json").read_text())["test"]
                )
            except (OSError, ValueError, KeyError):
                pass
    _write_junit(suite, cases, outdir / "junit.xml")
    statuses = {int(d.get("status", 1)) for d in docs}
    if missing or problems or 1 in statuses or any(c.result == "error" for c in cases):
        status = 1
    elif 3 in statuses or any(c.result == "failed" for c in cases):
        status = 3
    else:
        status = 0
    merged = Merged(
        cases,
        [str(d["_shard"]) for d in docs],
        missing,
        problems,
        status,
        "",
        [f"{artifact_prefix}-shard-{d['_shard'].index}-of-{total}" for d in docs],
    )
    merged.headline = _headline(merged, total)
    (outdir / "summary.json").write_text(json.dumps(merged.to_json(), indent=1) + "\n")
    (outdir / "summary.md").write_text(markdown(merged, artifact_prefix=artifact_prefix))
    (outdir / "report.html").write_text(page(merged))
    return merged


def _write_junit(suite: ET.Element, cases: list[Case], path: Path) -> None:
    counts = {
        "tests": len(cases),
        "failures": sum(c.result == "failed" for c in cases),
        "errors": sum(c.result == "error" for c in cases),
        "skipped": sum(c.result == "skipped" for c in cases),
    }
    seconds = sum(float(el.get("time") or 0) for el in suite.iter("testcase"))
    for k, v in counts.items():
        suite.set(k, str(v))
    suite.set("time", f"{seconds:.3f}")
    root = ET.Element(
        "testsuites",
        {
            "name": "powercut crash tests",
            "time": f"{seconds:.3f}",
            **{k: str(v) for k, v in counts.items()},
        },
    )
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _headline(m: Merged, total: int) -> str:
    crash = [c for c in m.cases if c.crash]
    failed = [c for c in m.cases if c.result in ("failed", "error")]
    parts = [
        f"{len(crash)} crash test{'s' * (len(crash) != 1)}"
        + (
            f" and {len(m.cases) - len(crash)} other test{'s' * (len(m.cases) - len(crash) != 1)}"
            if len(m.cases) > len(crash)
            else ""
        )
        + f" in {len(m.shards)} of {total} shard{'s' * (total != 1)}"
    ]
    if failed:
        parts.append(
            f"{len(failed)} failed ({', '.join(c.nodeid for c in failed[:3])}"
            f"{', ...' if len(failed) > 3 else ''})"
        )
    else:
        passed = sum(c.result == "passed" for c in m.cases)
        skipped = sum(c.result == "skipped" for c in m.cases)
        parts.append(f"{passed} passed" + (f", {skipped} skipped" if skipped else ""))
    if m.missing:
        parts.append(f"shard{'s' * (len(m.missing) != 1)} {', '.join(m.missing)} missing")
    if m.problems and not m.missing:
        parts.append(f"{len(m.problems)} problem{'s' * (len(m.problems) != 1)}")
    return f"{STATUS_WORDS[m.status]}: " + "; ".join(parts)


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m powercut.campaign.ghsummary",
        description="the powercut GitHub Action's shard and merge steps",
    )
    sub = p.add_subparsers(dest="step", required=True)
    s = sub.add_parser(
        "shard", help="after one pytest shard: write OUT/shard.json, check the VMs' acceleration"
    )
    s.add_argument(
        "out", help="the shard's output directory (pytest's --powercut-out is OUT/tests)"
    )
    s.add_argument("--shard", required=True, metavar="I/N")
    s.add_argument("--accel", default="auto", help="what the action asked for: auto, kvm or tcg")
    s.add_argument("--pytest-status", type=int, required=True, metavar="RC")
    s.add_argument(
        "--keep-recordings", action="store_true", help="keep the recordings' disk and log files"
    )
    m = sub.add_parser(
        "merge", help="merge the shards' outputs into one JUnit, report.html and job summary"
    )
    m.add_argument("shards", nargs="+", metavar="SHARD_OUT")
    m.add_argument("-o", "--out", required=True, metavar="DIR")
    m.add_argument(
        "--step-summary",
        default="",
        metavar="FILE",
        help="append summary.md to FILE ($GITHUB_STEP_SUMMARY)",
    )
    m.add_argument("--artifact-prefix", default="powercut", metavar="NAME")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.step == "shard":
            shard = Shard.parse(args.shard)
            doc = finish_shard(
                Path(args.out),
                shard,
                args.accel,
                args.pytest_status,
                prune=not args.keep_recordings,
            )
            for p in doc["problems"]:
                annotate("error", p)
            print(
                f"powercut: shard {doc['shard']}: {STATUS_WORDS[doc['status']]} ({doc['meaning']}; "
                f"VMs: {', '.join(sorted(set(doc['accels'].values()))) or 'none'})"
            )
            return int(doc["status"])
        merged = merge(args.shards, args.out, artifact_prefix=args.artifact_prefix)
        if args.step_summary:
            with open(args.step_summary, "a") as f:
                f.write((Path(args.out) / "summary.md").read_text())
        for p in merged.problems:
            annotate("error", p)
        print(f"powercut: {merged.headline}")
        print(f"report: {Path(args.out) / 'report.html'}")
        return merged.status
    except UsageError as e:
        print(f"powercut: error: {e.one_line()}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"powercut: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
