"""report.html of a check of N > 1 disks (host; issue 40): the one page (report/html.py) with one
band per node on the timeline (report/clustertimeline.py) and one column per node for the failing
states."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from powercut.core.dmlog import LogIndex
from powercut.report import clustertimeline, html
from powercut.report.summary import Summary

log = logging.getLogger(__name__)


def write_html(s: Summary, outdir: str | Path, logs: Sequence[LogIndex]) -> Path:
    """``outdir/report.html`` of a check of ``logs``' disks (opened, node 0 first); the timeline is left
    out, with a word, if it cannot be drawn."""
    picture = None
    try:
        picture = clustertimeline.of_logs(list(logs), s.failures)
    except Exception as e:   # noqa: BLE001 -- a report never fails for want of its picture
        log.warning("report.html without the cluster timeline: %s", e)
    return html.write(s, Path(outdir), [], picture=picture, nodes=len(logs))
