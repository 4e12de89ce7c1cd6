"""A check's output directory (host): where it is (``--out``, or beside the recording, one per
shard) and made ready for a run -- refused when it holds something else or an earlier check that
neither ``--resume`` nor ``--force`` allows.  While a run works in it, it holds the directory's
run lock (linux/runlock), so a second run on the same host is refused before it touches anything,
and the stale-run cleanup under it only meets what a dead run left."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from powercut.core.states.shard import Shard
from powercut.errors import UsageError


def check_outdir(rec_dir: Path, shard: Shard, out: str | os.PathLike[str] | None) -> Path:
    """Where a check writes: ``out``, or beside the recording (one directory per shard)."""
    if out:
        return Path(out)
    return rec_dir / ("check" if shard.whole else f"check-shard-{shard.index}-of-{shard.total}")


def prepare_out(outdir: Path, resume: bool, force: bool = False) -> None:
    if outdir.exists() and not resume:
        if not outdir.is_dir():
            raise UsageError(f"{outdir} exists and is not a directory")
        journal = outdir / "journal.jsonl"
        if not journal.exists() and any(outdir.iterdir()):
            raise UsageError(f"{outdir} exists and is not a check output; choose another --out")
        if journal.exists() and not force:
            n = sum(1 for line in journal.read_text(errors="replace").splitlines() if line.strip())
            raise UsageError(
                f"{outdir} holds an earlier check ({n} verdicts): --resume to go on with it, --force "
                "to replace it, or another --out"
            )
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
