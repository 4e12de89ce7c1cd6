"""The page a person reads (host): one self-contained ``report.html`` per check output -- the
verdict in one sentence, the states per model, the log's timeline with the failing cuts, the
failure groups (minimized state, blame, repro command to copy, the kernel's words for a mount
failure), flaky states and the environment -- rendered by Jinja2 from ``templates/report.html.j2``
with inline CSS, SVG and a few lines of script: nothing is loaded from anywhere, so the file opens
from an unzipped CI artifact.  ``check``, ``run`` and ``merge`` write it beside summary.json."""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import jinja2

from powercut.core.verdict import SEVERITY
from powercut.record import recording as rec_mod
from powercut.report import timeline
from powercut.report.summary import Summary

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("powercut.report", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


def sentence(s: Summary) -> str:
    """The verdict in one sentence."""
    where = f"{s.workload} on {s.fstype}: {s.total} distinct crash states judged in {s.check_in}"
    if s.shard:
        where += f" (shard {s.shard})"
    if s.failures:
        conf = sum(f.confirmed for f in s.failures)
        text = (f"{where}; {len(s.failures)} fail ({', '.join(sorted({f.verdict for f in s.failures}, key=SEVERITY.index))}), "
                f"{conf} confirmed alone, {len(s.flaky)} flaky.")
    elif s.flaky:
        text = f"{where}; none fails, {len(s.flaky)} flaky (judged twice with different verdicts: a harness problem)."
    else:
        text = f"{where}; every one passes."
    notes = s.notes()
    return text + (" Not a pass: " + notes[0] if notes and not s.failures else "")


def _environment(recording: Path) -> list[tuple[str, str]]:
    try:
        m = rec_mod.load(recording).manifest
    except Exception:   # noqa: BLE001 -- the page still says what it can
        return [("recording", f"{recording} (not readable here)")]
    r, vm, fs = m.get("recording", {}), m.get("vm", {}), m.get("fs", {})
    return [("recording", str(recording)), ("VM acceleration", str(r.get("accel", "?"))),
            ("guest kernel", str(r.get("kernel_release", "?"))), ("QEMU disk cache", str(vm.get("disk_cache", "?"))),
            ("disk bus", str(vm.get("bus", "?"))), ("guest write cache", "on" if vm.get("write_cache") else "off"),
            ("filesystem", f"{fs.get('fstype', '?')} {' '.join(fs.get('mkfs_opts', []))} "
                           f"{fs.get('mount_opts', '')}".strip()),
            ("recorded", str(r.get("created", "?")))]


def _groups(s: Summary, outdir: Path) -> list[dict[str, Any]]:
    out = []
    for k, g in enumerate(s.groups, 1):
        first = next((f for f in s.failures if f.state == g.get("first")), None)
        reasons = list(first.reasons) if first else []
        bundle = g.get("bundle") or ""
        out.append({**g, "k": k, "reasons": [r for r in reasons if not r.startswith("kernel:")][:8],
                    "kernel": [r.removeprefix("kernel: ") for r in reasons if r.startswith("kernel:")],
                    "repro": f"powercut repro {shlex.quote(bundle)}" if bundle else
                    f"powercut repro {shlex.quote(s.recording)} --state {shlex.quote(str(g.get('first', '')))}",
                    "bundle_rel": os.path.relpath(bundle, outdir) if bundle else ""})
    return out


def write(s: Summary, outdir: Path, verdicts: list[Any]) -> Path:
    """Render ``outdir/report.html`` for the summary ``s`` of that output."""
    rec = Path(s.recording)
    tl = timeline.from_log(rec / "log.bin", s.failures) if (rec / "log.bin").is_file() else None
    seen = [v for v in SEVERITY if any(v in c for c in s.by_model.values())]
    models = [{"name": m, "counts": s.counts.get(m, {}), "verdicts": s.by_model.get(m, {})}
              for m in dict.fromkeys([*s.counts, *s.by_model])]
    page = _ENV.get_template("report.html.j2").render(
        s=s, sentence=sentence(s), verdict=s.verdict, ok=s.ok, seen=seen, models=models, groups=_groups(s, outdir),
        failures=s.failures[:50], more=max(0, len(s.failures) - 50), flaky=s.flaky[:50],
        timeline=tl.svg() if tl else "", timeline_entries=tl.entries if tl else 0,
        environment=_environment(rec), notes=s.notes(),
        summary_json=json.dumps(s.to_json().get("states", {})))
    path = outdir / "report.html"
    path.write_text(page)
    return path
