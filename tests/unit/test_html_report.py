"""report.html (report/html.py, report/timeline.py): written by check and merge, self-contained
(nothing loaded from outside), and what a person sees in a browser -- the verdict sentence, a
failure group, the repro command -- checked in headless Chromium on a real host-mode campaign with
failures (test_merge's synthetic recording).  The timeline stays small for a 10^4-entry log."""
from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from powercut.core.dmlog_writer import LogWriter
from powercut.core.verdict import Verdict
from powercut.report import timeline
from test_campaign import synthetic  # noqa: F401  (the fixture)
from test_merge import campaigns  # noqa: F401  (the fixture)


class Outside(HTMLParser):
    """Every reference a page makes to something outside itself."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset", "data") and value and not value.startswith("#"):
                self.refs.append(f"<{tag} {name}={value}>")
        if tag == "link":
            self.refs.append("<link>")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: ci/setup.sh installs the Debian package"
    return found


def test_check_and_merge_write_a_self_contained_page(campaigns) -> None:  # noqa: F811
    for out in ("whole", "merged"):
        page = (campaigns["dir"] / out / "report.html").read_text()
        p = Outside()
        p.feed(page)
        assert not p.refs, p.refs
        assert not re.search(r"url\(|@import|https?://", page)
        assert "group 1:" in page and "powercut repro " in page and "<svg" in page


def test_the_page_in_a_browser_shows_the_verdict_groups_and_repro(campaigns, tmp_path) -> None:  # noqa: F811
    page = campaigns["dir"] / "merged" / "report.html"
    s = campaigns["merged"]
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          f"file://{page}"], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-500:]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    text = re.sub(r"\s+", " ", text)
    assert f"{s.total} distinct crash states judged in host" in text
    assert f"{len(s.failures)} fail" in text and s.verdict in text
    assert f"group 1: {s.groups[0]['verdict']} × {s.groups[0]['count']}" in text
    assert "powercut repro " in text
    shot = tmp_path / "report.png"
    res = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                          "--window-size=1280,1600", f"file://{page}"], capture_output=True, timeout=120)
    assert res.returncode == 0 and shot.stat().st_size > 20_000


def test_timeline_of_a_large_log_stays_small(tmp_path) -> None:
    path = tmp_path / "log.bin"
    with LogWriter(path) as w:
        w.mark("mkfs")
        for i in range(10_000):
            w.write(8 * (i % 500), bytes(4096))
            if i % 50 == 49:
                w.flush()
                w.mark(f"ack:{i // 50}")
    fail = [Verdict(f"flush@{c}", "flush", c, "lost-ack", ("x",), 1, 0, 0.1) for c in (100, 5000, 9000)]
    tl = timeline.from_log(path, fail)
    assert tl is not None and tl.entries > 10_000
    svg = tl.svg()
    assert len(svg) < 1_500_000 and svg.count('class="cut"') == 3
    assert len(tl.lanes["ack"]) == 200 and len(tl.lanes["flush"]) == 200


def test_unreadable_log_gives_no_timeline(tmp_path) -> None:
    (tmp_path / "log.bin").write_bytes(b"not a log")
    assert timeline.from_log(tmp_path / "log.bin") is None
