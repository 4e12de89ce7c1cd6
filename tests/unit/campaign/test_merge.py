"""Shards and merge (campaign/merge.py) on the synthetic recording of test_campaign, in host mode:
three shards merged equal the unsharded campaign verdict for verdict (summary, JUnit, groups with
their minimization and bundle), and what cannot be merged is refused with one line.  Needs root."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from powercut.campaign.merge import merge
from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.cli import main
from powercut.core.states.shard import Shard
from powercut.errors import UsageError
from tests.unit.campaign.test_run import STRICT, synthetic  # noqa: F401  (the fixture)

# key 2 "always lost": every state that acks 2 fails, a group of confirmed lost-acks
MODELS = ("flush", "write-cache")


def spec(**kw) -> CampaignSpec:
    return CampaignSpec.of(
        models=MODELS,
        check_in="host",
        jobs=2,
        checker_command=STRICT,
        bound=3,
        samples=4,
        shrink=1,
        **kw,
    )


def junit_cases(path: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        out[f"{case.get('classname')}::{case.get('name')}"] = (
            bad.get("type") if bad is not None else "pass"
        )
    return out


@pytest.fixture(scope="module")
def campaigns(synthetic: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("merge")
    whole, whole_paths = run_campaign(synthetic, spec(), d / "whole")
    for i in (1, 2, 3):
        run_campaign(synthetic, spec(shard=Shard(i, 3)), d / f"shard{i}")
    merged, merged_paths = merge([d / "shard3", d / "shard1", d / "shard2"], d / "merged")
    return {
        "dir": d,
        "whole": whole,
        "whole_paths": whole_paths,
        "merged": merged,
        "merged_paths": merged_paths,
    }


def test_three_shards_merge_to_the_unsharded_campaign(campaigns) -> None:
    whole, merged, d = campaigns["whole"], campaigns["merged"], campaigns["dir"]
    assert whole.failures, "the strict checker makes findings: the comparison must include failures"
    v1 = {
        o["state"]: o["verdict"]
        for o in map(json.loads, (d / "whole" / "journal.jsonl").read_text().splitlines())
    }
    v2 = {
        o["state"]: o["verdict"]
        for o in map(json.loads, (d / "merged" / "journal.jsonl").read_text().splitlines())
    }
    assert v1 == v2
    assert (
        merged.total,
        merged.by_model,
        merged.counts,
        merged.verdict,
        merged.ok,
        merged.status,
    ) == (whole.total, whole.by_model, whole.counts, whole.verdict, whole.ok, whole.status)
    # every failure confirmed in both; alone or by its group's sample may differ (each shard samples its part)
    assert [(f.state, f.verdict, f.confirmation != "unconfirmed") for f in merged.failures] == [
        (f.state, f.verdict, True) for f in whole.failures
    ]
    key = ("verdict", "reason_class", "count", "first")
    assert [{k: g[k] for k in key} for g in merged.groups] == [
        {k: g[k] for k in key} for g in whole.groups
    ]
    assert junit_cases(campaigns["merged_paths"]["junit"]) == junit_cases(
        campaigns["whole_paths"]["junit"]
    )
    # each shard judged a third, disjoint
    parts = [
        set(
            map(
                lambda line: json.loads(line)["state"],
                (d / f"shard{i}" / "journal.jsonl").read_text().splitlines(),
            )
        )
        for i in (1, 2, 3)
    ]
    assert not (parts[0] & parts[1] or parts[1] & parts[2] or parts[0] & parts[2])
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_merged_groups_keep_their_diagnosis_and_bundle(campaigns) -> None:
    g = campaigns["merged"].groups[0]
    assert g["minimized"] and g["bundle"] and Path(g["bundle"], "bundle.json").is_file()
    assert Path(g["bundle"]).is_relative_to(campaigns["dir"] / "merged")


def test_each_shard_says_it_is_one(campaigns) -> None:
    d = campaigns["dir"]
    s = json.loads((d / "shard2" / "summary.json").read_text())
    assert (
        s["shard"] == "2/3"
        and json.loads((d / "shard2" / "campaign.json").read_text())["shard"] == "2/3"
    )
    assert "shard" not in json.loads((d / "whole" / "campaign.json").read_text())


def test_a_missing_shard_is_never_a_pass(campaigns, tmp_path) -> None:
    d = campaigns["dir"]
    s, _ = merge([d / "shard1", d / "shard3"], tmp_path / "m")
    assert not s.ok and s.missing_shards == ("2/3",) and "shard 2/3 is missing" in s.notes()[0]
    assert s.verdict in ("incomplete", *{f.verdict for f in s.failures})
    junit = (tmp_path / "m" / "junit.xml").read_text()
    assert "<error" in junit


def _copy(src: Path, dest: Path, **settings) -> Path:
    shutil.copytree(src, dest)
    doc = json.loads((dest / "campaign.json").read_text())
    doc.update(settings)
    (dest / "campaign.json").write_text(json.dumps(doc))
    return dest


@pytest.mark.parametrize(
    "change, words",
    [
        ({"log_sha256": "0" * 64}, "shards of different recordings"),
        ({"seed": 7}, "different settings (seed: 0 vs 7)"),
        ({"shard": "2/4"}, "different shard counts"),
        ({"shard": "1/3"}, "are both shard 1/3"),
    ],
)
def test_what_cannot_be_merged_is_refused(campaigns, tmp_path, change, words) -> None:
    d = campaigns["dir"]
    odd = _copy(d / "shard2", tmp_path / "odd", **change)
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        merge([d / "shard1", odd, d / "shard3"], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_merge_command_line(campaigns, tmp_path, capsys) -> None:
    d = campaigns["dir"]
    assert (
        main(
            [
                "merge",
                str(d / "shard1"),
                str(d / "shard2"),
                str(d / "shard3"),
                "-o",
                str(tmp_path / "m"),
            ]
        )
        == 3
    )
    assert "lost-ack" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "nothing"), "-o", str(tmp_path / "m3")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a check output" in err[0]
    assert main(["merge", str(d / "shard1"), "-o", str(d / "shard1")]) == 1
    assert "is one of the shards" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0/3", "4/3", "x"])
def test_bad_shard_option_exits_2(value, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["check", "rec", "--shard", value])
    assert e.value.code == 2 and "--shard" in capsys.readouterr().err


def _matrix_shard(d: Path, shard: str, rows: list, chosen: list[str], file: str = "") -> Path:
    from powercut.report import matrix

    cells = [matrix.Cell(r.id, m, r.expect[m], judged=4) for r in rows for m in r.models]
    matrix.write_results(
        d, rows, cells, [{"row": r.id} for r in rows], shard=shard, chosen=chosen, file=file
    )
    return d


def test_matrix_shards_merge_in_row_order_and_refuse_mixtures(tmp_path) -> None:
    from powercut.campaign.merge import is_matrix, merge_matrix
    from powercut.core.states.shard import Shard as S
    from powercut.report import matrix

    chosen = matrix.choose(matrix.load(), ["wal/*"])[:5]
    ids = [r.id for r in chosen]
    outs = [
        _matrix_shard(tmp_path / f"m{i}", f"{i}/2", list(S(i, 2).take(chosen)), ids) for i in (2, 1)
    ]
    assert is_matrix(outs) and not is_matrix([tmp_path])
    rows, cells, paths, missing = merge_matrix(outs, tmp_path / "merged")
    assert [r.id for r in rows] == ids and not missing
    assert list(dict.fromkeys(c.row for c in cells)) == ids
    doc = json.loads(paths["json"].read_text())
    assert doc["cells_total"] == sum(len(r.models) for r in chosen) and doc["as_expected"] == sum(
        c.ok for c in cells
    )
    _, _, _, missing = merge_matrix(outs[1:], tmp_path / "half")
    assert missing == ("2/2",)
    other = _matrix_shard(tmp_path / "other", "2/2", chosen[1:2], ids[:4])
    with pytest.raises(UsageError, match="different matrix runs"):
        merge_matrix([outs[1], other], tmp_path / "x")
    dup = _matrix_shard(tmp_path / "dup", "1/2", list(S(1, 2).take(chosen)), ids)
    with pytest.raises(UsageError, match="both matrix shard 1/2"):
        merge_matrix([outs[1], dup], tmp_path / "y")
