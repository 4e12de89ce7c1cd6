"""A check's output directory: where it is by default, an earlier check or a foreign directory
refused unless asked, replaced with --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.campaign.outdir import check_outdir, prepare_out
from powercut.core.states.shard import Shard
from powercut.errors import UsageError


def test_where_a_check_writes(tmp_path: Path) -> None:
    assert check_outdir(tmp_path, Shard(), None) == tmp_path / "check"
    assert check_outdir(tmp_path, Shard(2, 3), None) == tmp_path / "check-shard-2-of-3"
    assert check_outdir(tmp_path, Shard(2, 3), tmp_path / "o") == tmp_path / "o"


def test_prepare_out_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("x")
    with pytest.raises(UsageError, match="not a check output"):
        prepare_out(tmp_path, resume=False)
    assert (tmp_path / "precious.txt").exists()
    out = tmp_path / "check"
    prepare_out(out, resume=False)
    (out / "journal.jsonl").write_text('{"state": "flush@3"}\n')
    (out / "summary.json").write_text("{}")
    with pytest.raises(
        UsageError, match="holds an earlier check .1 verdicts.: --resume .* --force"
    ):
        prepare_out(out, resume=False)  # #25: an earlier check is not discarded silently
    assert (out / "summary.json").exists()
    prepare_out(out, resume=False, force=True)  # replaced only when asked
    assert not (out / "summary.json").exists()
