"""The corpus file and its outcomes (report/corpus.py): every entry of the shipped corpus loads, a
mistake in an entry is one line naming it, and an outcome is called reproduced, not reproduced,
a false alarm or an error exactly as the two releases' runs say."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.errors import UsageError
from powercut.report import corpus
from powercut.report.corpus import Entry, Release, Result, Second

ENTRY = """
[[entry]]
name = "kv-lost-fsync"
program = "kv"
title = "a compaction output never synced"
bug = "https://example.org/issues/1"
fix = "https://example.org/pull/2"
kinds = ["lost-fsync"]
buggy = "1.0.0"
fixed = "1.0.1"
expect = "corrupt-data"
message = "FileTooSmall"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "corpus.toml"
    p.write_text(text)
    return p


def entry(**kw: object) -> Entry:
    base = dict(
        name="kv-lost-fsync",
        program="kv",
        title="t",
        bug="https://example.org/1",
        fix="https://example.org/2",
        kinds=("lost-fsync",),
        buggy="1.0.0",
        fixed="1.0.1",
        expect="corrupt-data",
        message="FileTooSmall",
    )
    return Entry(**{**base, **kw})  # type: ignore[arg-type]


def caught(version: str = "1.0.0", **kw: object) -> Release:
    base = dict(
        version=version,
        verdict="corrupt-data",
        judged=40,
        failing=3,
        verdicts=("corrupt-data",),
        message_seen=True,
        first_reason="open failed: FileTooSmall",
        cause="no-fsync",
        proof="proven",
        seconds=61.0,
    )
    return Release(**{**base, **kw})  # type: ignore[arg-type]


def passed(version: str = "1.0.1") -> Release:
    return Release(version, "pass", judged=40, coverage="exhaustive", seconds=59.0)


def test_the_shipped_corpus_loads_and_every_program_has_a_build_script() -> None:
    entries = corpus.load()
    assert entries, "the corpus is empty"
    for e in entries:
        assert (corpus.program_dir(e.program) / "build.sh").is_file(), e.program
        assert e.bug.startswith("https://"), e.name
        assert e.outcome == "reproduced" or e.why, e.name


def test_an_entry_loads_with_its_defaults(tmp_path: Path) -> None:
    (e,) = corpus.load(write(tmp_path, ENTRY))
    assert e.releases() == (("buggy", "1.0.0"), ("fixed", "1.0.1"))
    assert (e.fs, e.nodes, e.models, e.check_in, e.outcome) == (
        "ext4",
        1,
        ("flush",),
        "host",
        "reproduced",
    )
    assert e.second is None


@pytest.mark.parametrize(
    "change, names",
    [
        ('kinds = ["lost-fsync"]', 'kinds = ["slow"]'),
        ('expect = "corrupt-data"', 'expect = "maybe"'),
        ('fixed = "1.0.1"', 'fixed = "1.0.0"'),
        ('fixed = "1.0.1"', 'fixed = "1.0 1"'),
        ('name = "kv-lost-fsync"', 'name = "KV lost"'),
        ('message = "FileTooSmall"', 'message = "x"\ncolour = "red"'),
        ('message = "FileTooSmall"', 'message = "x"\nmodels = ["no-such"]'),
        ('message = "FileTooSmall"', 'message = "x"\noutcome = "not reproduced"'),
        ('message = "FileTooSmall"', 'message = "x"\noutcome = "maybe"\nwhy = "w"'),
        ('message = "FileTooSmall"', 'message = "x"\nfixed_expect = "lost-ack"'),
        ('message = "FileTooSmall"', 'message = "x"\ncause = "bad-luck"'),
        ('message = "FileTooSmall"', 'message = "x"\nsecond = { model = "flush", when = 1 }'),
    ],
)
def test_a_mistake_is_one_line_naming_the_entry(tmp_path: Path, change: str, names: str) -> None:
    with pytest.raises(UsageError) as e:
        corpus.load(write(tmp_path, ENTRY.replace(change, names)))
    assert "kv-lost-fsync" in str(e.value) or "KV lost" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_key_and_a_duplicate_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="`fix` is missing"):
        corpus.load(write(tmp_path, ENTRY.replace('fix = "https://example.org/pull/2"\n', "")))
    with pytest.raises(UsageError, match="the same entry name twice: kv-lost-fsync"):
        corpus.load(write(tmp_path, ENTRY + ENTRY))
    with pytest.raises(UsageError, match="not a valid corpus file"):
        corpus.load(write(tmp_path, "[[entry]\n"))


def test_choose_by_entry_or_program_and_an_unknown_name_is_refused() -> None:
    a, b = entry(), entry(name="other-bug", program="db")
    assert corpus.choose([a, b], []) == [a, b]
    assert corpus.choose([a, b], ["db"]) == [b]
    assert corpus.choose([a, b], ["kv-lost-fsync"]) == [a]
    with pytest.raises(UsageError, match="no corpus entry nope; entries: kv-lost-fsync, other-bug"):
        corpus.choose([a, b], ["nope"])


def test_reproduced_needs_the_verdict_the_message_and_a_passing_fix() -> None:
    e = entry()
    assert Result(e, caught(), passed()).status == "reproduced"
    assert Result(e, caught(), passed()).as_recorded
    # the verdict differs from what the issue reports
    other = caught(verdicts=("lost-ack",), verdict="lost-ack")
    assert Result(e, other, passed()).status == "not reproduced"
    # the recovery message the issue reports is not among the reasons
    assert Result(e, caught(message_seen=False), passed()).status == "not reproduced"
    # "fail" takes any finding; no message asked: none needed
    loose = entry(expect="fail", message="")
    assert Result(loose, caught(verdicts=("lost-ack",), message_seen=False), passed()).caught


def test_a_recorded_cause_must_be_named_and_proven() -> None:
    e = entry(cause="no-fsync")
    assert Result(e, caught(), passed()).as_recorded  # caught() names no-fsync, proven
    unproven = Result(e, caught(proof="not proven"), passed())
    assert unproven.status == "reproduced" and not unproven.as_recorded
    assert "the corpus records its cause as no-fsync (proven)" in unproven.line()
    other = Result(e, caught(cause="unordered-writes"), passed())
    assert not other.as_recorded
    assert Result(entry(), caught(cause="", proof=""), passed()).as_recorded  # no cause recorded


def test_a_failing_fix_is_a_false_alarm_and_an_unfinished_run_an_error() -> None:
    e = entry()
    assert Result(e, caught(), caught("1.0.1")).status == "false alarm"
    never = Release("1.0.1", "pass", judged=0)
    assert Result(e, caught(), never).status == "false alarm"  # judged nothing: proves nothing
    broken = Release("1.0.0", "error", error="cannot build kv 1.0.0: cargo exited 101")
    res = Result(e, broken, passed())
    assert res.status == "error" and not res.as_recorded
    assert "cannot build kv 1.0.0" in res.line()


def test_a_fixed_release_failing_for_another_bug_tells_the_entry_apart_by_its_message() -> None:
    e = entry(outcome="told apart", fixed_expect="corrupt-data", why="the fix has bug #642 too")
    other = caught("1.0.1", message_seen=False, first_reason="panicked: unreachable")
    res = Result(e, caught(), other)
    assert res.status == "told apart" and res.as_recorded
    # the entry's own message in the fixed release: the bug is not told apart
    assert Result(e, caught(), caught("1.0.1")).status == "not reproduced"
    # the fixed release passing after all is news: the entry could count as reproduced
    assert Result(e, caught(), passed()).status == "not reproduced"
    assert corpus.count_line([res]) == "reproduces 0 of 1 published bugs"
    assert "told apart" in corpus.markdown([res]).splitlines()[2]


def test_an_entry_recorded_as_not_reproduced_is_news_when_it_is_caught() -> None:
    e = entry(outcome="not reproduced", why="ext4's ordered mode hides it")
    quiet = Release("1.0.0", "pass", judged=40, coverage="exhaustive")
    assert Result(e, quiet, passed()).as_recorded
    loud = Result(e, caught(), passed())
    assert loud.status == "reproduced" and not loud.as_recorded
    assert "the corpus records it as not reproduced" in loud.line()


def test_two_crashes_are_judged_by_the_second_runs() -> None:
    e = entry(second=Second("torn-4k"))
    first_quiet = Release("1.0.0", "pass", judged=10, coverage="exhaustive")
    res = Result(e, first_quiet, passed(), caught(states="flush@9"), passed())
    assert res.status == "reproduced"
    assert [role for role, _ in res.runs()] == [
        "buggy",
        "fixed",
        "buggy, second crash",
        "fixed, second crash",
    ]
    assert Result(e, first_quiet, passed(), None, passed()).status == "not reproduced"
    assert Result(e, first_quiet, passed(), caught(), caught("1.0.1")).status == "false alarm"
    assert set(res.to_json()) >= {"buggy", "fixed", "buggy_second_crash", "fixed_second_crash"}


def test_a_release_round_trips_through_json() -> None:
    r = caught()
    assert Release.from_json(r.to_json()) == r
    assert Release.from_json({**r.to_json(), "later": 1}) == r  # a later key is ignored


def test_the_table_has_a_row_per_entry_with_its_links_and_verdicts() -> None:
    e = entry()
    text = corpus.markdown([Result(e, caught(), passed())])
    lines = text.splitlines()
    assert lines[0].startswith("| Bug | Kind | Buggy → fixed |")
    row = lines[2]
    assert "[kv-lost-fsync](https://example.org/1)" in row
    assert "1.0.0 → 1.0.1" in row and "corrupt-data in 3 of 40 states" in row
    assert "no-fsync (proven)" in row and "2 min 00 s" in row
    quiet = corpus.markdown([Result(e, Release("1.0.0", "pass", judged=40), passed())])
    assert "not reproduced" in quiet.splitlines()[2]
    assert corpus.count_line([Result(e, caught(), passed())]) == "reproduces 1 of 1 published bugs"
