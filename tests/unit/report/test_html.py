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

from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog_writer import LogWriter
from powercut.report import timeline
from tests.unit.campaign.test_merge import campaigns  # noqa: F401  (the fixture)
from tests.unit.campaign.test_run import synthetic  # noqa: F401  (the fixture)


class Outside(HTMLParser):
    """Every reference a page makes to something outside itself."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if (
                name in ("src", "href", "action", "srcset", "data")
                and value
                and not value.startswith("#")
            ):
                self.refs.append(f"<{tag} {name}={value}>")
        if tag == "link":
            self.refs.append("<link>")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: ci/setup.sh installs the Debian package"
    return found


def test_check_and_merge_write_a_self_contained_page(campaigns) -> None:
    for out in ("whole", "merged"):
        page = (campaigns["dir"] / out / "report.html").read_text()
        p = Outside()
        p.feed(page)
        assert not p.refs, p.refs
        assert not re.search(r"url\(|@import|https?://", page)
        assert "group 1:" in page and "powercut repro " in page and "<svg" in page


def test_the_page_in_a_browser_shows_the_verdict_groups_and_repro(campaigns, tmp_path) -> None:
    page = campaigns["dir"] / "merged" / "report.html"
    s = campaigns["merged"]
    dom = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-500:]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    text = re.sub(r"\s+", " ", text)
    assert f"{s.total} distinct crash states judged in host" in text
    assert f"{len(s.failures)} fail" in text and s.verdict in text
    assert f"group 1: {s.groups[0]['verdict']} × {s.groups[0]['count']}" in text
    assert "powercut repro " in text
    shot = tmp_path / "report.png"
    res = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1280,1600",
            f"file://{page}",
        ],
        capture_output=True,
        timeout=120,
    )
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
    fail = [
        Verdict(f"flush@{c}", "flush", c, "lost-ack", ("x",), 1, 0, 0.1) for c in (100, 5000, 9000)
    ]
    tl = timeline.from_log(path, fail)
    assert tl is not None and tl.entries > 10_000
    svg = tl.svg()
    assert len(svg) < 1_500_000 and svg.count('class="cut"') == 3
    assert len(tl.lanes["ack"]) == 200 and len(tl.lanes["flush"]) == 200


def test_unreadable_log_gives_no_timeline(tmp_path) -> None:
    (tmp_path / "log.bin").write_bytes(b"not a log")
    assert timeline.from_log(tmp_path / "log.bin") is None


# -- the matrix page (matrix, merge of matrix shards, report) ----------------------------------------
def matrix_page(tmp_path: Path, with_cost: bool) -> tuple[Path, list]:
    from powercut.bench.results import BenchEntry
    from powercut.report import cost, html, matrix

    rows = matrix.choose(matrix.load(), ["filestorage/*/ext4"])
    cells = []
    for r in rows:
        for m in r.models:
            failing = (
                {}
                if r.expect[m] == "pass"
                else {r.expect[m] if r.expect[m] != "fail" else "corrupt-data": 3}
            )
            cells.append(
                matrix.Cell(
                    r.id,
                    m,
                    r.expect[m],
                    judged=40,
                    failing=failing,
                    first="write-cache@9/d3" if failing else "",
                )
            )
    bad = matrix.Cell(
        rows[0].id,
        rows[0].models[0],
        rows[0].expect[rows[0].models[0]],
        judged=40,
        failing={"lost-ack": 2},
        first="flush@17",
        first_reason="ack 4 acknowledged but missing",
    )
    cells[0] = bad  # a surprise: a durable configuration caught
    (tmp_path / rows[1].slug / "check").mkdir(parents=True)
    (tmp_path / rows[1].slug / "check" / "report.html").write_text("<html></html>")
    view = None
    if with_cost:

        def entry(wc: bool, rate: float) -> BenchEntry:
            return BenchEntry("report", "x", "workload", wc, commits_per_s=rate, p99_us=1500.0)

        lines = [
            cost.Line(
                r,
                tuple(c.to_json() for c in cells if c.row == r.id),
                entry(True, 100.0 * (k + 1)),
                entry(False, 40.0 * (k + 1)),
            )
            for k, r in enumerate(rows)
        ]
        svg = tmp_path / "plot.svg"
        svg.write_text(
            '<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>'
        )
        view = cost.view(lines, "timed in a VM (tcg)", svg)
    page = html.write_matrix(tmp_path, rows, cells, [], cost=view)
    return page, rows


def test_the_matrix_page_shows_the_grid_surprises_and_cost(tmp_path) -> None:
    page, rows = matrix_page(tmp_path, with_cost=True)
    text = page.read_text()
    p = Outside()
    p.feed(text)
    # the only references are links to the rows' own pages in the same output
    assert all(r == f"<a href={rows[1].slug}/check/report.html>" for r in p.refs), p.refs
    assert not re.search(r"url\(|@import|<script src|<link", text)
    assert "<?xml" not in text and "<svg" in text  # the plot inlined without its XML prolog
    dom = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-500:]
    seen = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout))
    n = sum(len(r.models) for r in rows)
    assert (
        f"{len(rows)} configurations, {n} cells (configuration x crash model): {n - 1} as expected, 1 surprise"
        in seen
    )
    assert "SURPRISES" in seen and "Durability vs cost" in seen and "commits/s cache off" in seen
    assert f"{rows[0].id} · {rows[0].models[0]}: expected pass, seen lost-ack" in seen
    shot = tmp_path / "matrix.png"
    res = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1280,1600",
            f"file://{page}",
        ],
        capture_output=True,
        timeout=120,
    )
    assert res.returncode == 0 and shot.stat().st_size > 20_000


def test_a_matrix_without_surprises_or_cost_is_as_expected(tmp_path) -> None:
    from powercut.report import html, matrix

    rows = matrix.choose(matrix.load(), ["wal/correct/ext4"])
    cells = [matrix.Cell(rows[0].id, m, "pass", judged=10) for m in rows[0].models]
    text = html.write_matrix(tmp_path, rows, cells, []).read_text()
    assert 'id="verdict">AS EXPECTED<' in text and "Durability vs cost" not in text
    missing = html.write_matrix(tmp_path, rows, cells, [], missing=("2/3",)).read_text()
    assert 'id="verdict">INCOMPLETE<' in missing and "Shards missing: 2/3" in missing


def test_the_matrix_sentence_counts_the_passes_on_sampled_commit_windows() -> None:
    from types import SimpleNamespace as NS

    from powercut.report.html import matrix_sentence

    ok = NS(ok=True, proven=True, row="a", model="flush")
    weak = NS(ok=True, proven=False, row="b", model="write-cache")
    one = matrix_sentence([1, 2], [ok, weak])
    assert one.endswith(
        "1 of the passes stands on commit windows that were not exhaustive (sampled, capped or "
        "weakened: hover a cell for its coverage)."
    )
    assert " 2 of the passes stand on " in matrix_sentence([1, 2], [ok, weak, weak])
    assert "passes" not in matrix_sentence([1], [ok])


def test_a_groups_cause_says_not_proven_first_and_what_recovery_read() -> None:
    from powercut.core.cause.causes import Cause
    from powercut.report.html import _ENV

    cause = _ENV.get_template("cause.html.j2")
    why = Cause(
        "no-fsync",
        "cause not proven; candidates: no-fsync (/wal); the trace shows: ack:1 was given after "
        "changing /wal",
        (),
        proof="not proven: no-fsync (/wal): with /wal's data ... still fails",
        read="recovery read idx (0 of 100 bytes present), then stopped",
    ).to_json() | {"proven": False}
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cause.render(g={"k": 1, "why": why})))
    assert (
        "cause not proven (no-fsync is what the trace shows first): candidates: no-fsync (/wal); the trace"
        in text
    )
    assert "recovery read idx (0 of 100 bytes present)" in text and "proof: not proven" in text
    assert "cause (no-fsync):" not in text
    proven = cause.render(
        g={"k": 1, "why": Cause("no-fsync", "ack:1 was given", ()).to_json() | {"proven": True}}
    )
    assert "cause (no-fsync):</b> ack:1 was given" in proven
