"""#52 item 2: a check's coverage tells its set-up windows (cuts before the program's first key mark:
filesystem creation, opening files; nothing begun or acknowledged) from its commit windows, and its
words lead with the commits.  Over random logs, models, bounds, caps and seeds: the two parts add up
to the whole, the set-up part is exactly the states before the first key mark, the commits are
called exhaustive only when none of their windows was sampled, none of their states left out and
no note weakens them; and the words on hand-made coverages."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.states.coverage import COMMITS, SETUP, Coverage, ModelCoverage, Part
from powercut.core.states.models import CrashSpace
from powercut.core.states.selection import SelectionSpec, select
from powercut.core.states.stateid import HONEST_MODELS
from tests.unit.core.test_selection import OPS, build

SPEC = st.builds(
    SelectionSpec,
    models=st.lists(st.sampled_from(HONEST_MODELS), min_size=1, max_size=3, unique=True).map(tuple),
    seed=st.integers(0, 3),
    bound=st.integers(0, 4),
    samples=st.integers(0, 3),
    torn_samples=st.integers(0, 2),
    max_states=st.sampled_from([0, 0, 1, 3, 7]),
    setup_samples=st.sampled_from([None, 0, 2]),
)


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    seed=st.integers(0, 3),
    bound=st.integers(0, 3),
    samples=st.integers(0, 3),
    setup_samples=st.integers(0, 3),
)
def test_setup_samples_change_the_setup_windows_alone(
    ops: list,
    seed: int,
    bound: int,
    samples: int,  # type: ignore[type-arg]
    setup_samples: int,
) -> None:
    """``setup_samples`` (the demo's 0) samples set-up windows on their own: the commit windows'
    states are the same states as with ``samples`` alone, the set-up windows' a subset or superset."""
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        base = dict(seed=seed, exhaustive_bound=bound, samples=samples)
        same = {s.id for s in sp.iter_states("write-cache", **base)}
        own = {s.id for s in sp.iter_states("write-cache", **base, setup_samples=setup_samples)}
        setup = {i for i in same | own if sp.key_version[int(i.split("@")[1].split("/")[0])] == 0}
        assert same - setup == own - setup
        if setup_samples <= samples:  # the first setup_samples of the same seeded sequence
            assert own & setup <= same & setup
        else:
            assert same & setup <= own & setup
        if setup_samples == samples:
            assert same == own


@settings(max_examples=300, deadline=None)
@given(ops=OPS, spec=SPEC)
def test_the_parts_add_up_and_the_setup_part_is_before_the_first_key_mark(
    ops: list, spec: SelectionSpec
) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        sel = select(sp, spec)
        cov = sel.coverage
        for m in cov.models:
            su, co = m.part(SETUP), m.part(COMMITS)
            assert su.distinct + co.distinct == m.distinct - m.earlier
            assert su.judged + co.judged == m.judged
            assert su.windows + co.windows == m.windows
            assert su.sampled_windows + co.sampled_windows == m.sampled_windows
            assert su.sampled_generated + co.sampled_generated == m.sampled_generated
            assert set(co.notes) <= set(m.notes) and set(su.notes) == set(m.notes)
            judged_setup = sum(
                1 for s in sel.states if s.model == m.model and sp.key_version[s.cut] == 0
            )
            assert su.judged == judged_setup
        if cov.commits_exhaustive:  # proven, never more than shown
            assert (
                all(m.part(COMMITS).words == ("exhaustive",) for m in cov.models) or not cov.split
            )
            assert not cov.split or all(
                not m.part(COMMITS).sampled_windows
                and not m.part(COMMITS).left_out
                and not m.part(COMMITS).notes
                for m in cov.models
            )
            assert cov.split or cov.exhaustive
        if cov.split and not cov.exhaustive:
            assert cov.phrase().startswith(
                "every commit window exhaustive (" if cov.commits_exhaustive else "commit windows "
            )
            assert "; set-up windows " in cov.phrase()
        if not sp.late.setup_only:  # a note that may reach a commit window weakens the commits
            assert all(set(m.part(COMMITS).notes) == set(m.notes) for m in cov.models)


def cov(setup: Part, commits: Part, notes: tuple[str, ...] = ()) -> Coverage:
    d, j = setup.distinct + commits.distinct, setup.judged + commits.judged
    return Coverage(
        (
            ModelCoverage(
                "write-cache",
                d,
                j,
                setup.windows + commits.windows,
                setup.sampled_windows + commits.sampled_windows,
                setup.sampled_generated + commits.sampled_generated,
                setup.sampled_space + commits.sampled_space,
                0,
                notes,
                setup,
                commits,
            ),
        ),
        seed=0,
    )


LATE = (
    "writes logged after 2 flushes before the next ordered key mark may have completed while they were in "
    "flight: states ... not generated; affects begin:0"
)


def test_exhaustive_commits_lead_and_the_setup_windows_follow():
    c = cov(
        Part("write-cache", 30, 30, 3, 3, 330, 2**62, (LATE,)),
        Part("write-cache", 412, 412, 40),
        (LATE,),
    )
    assert c.commits_exhaustive and not c.exhaustive and c.words == ("sampled", "weakened")
    assert c.phrase() == (
        "every commit window exhaustive (412 distinct states); set-up windows sampled (seed 0): "
        "3 of 3 write-cache windows (330 of >= 2^62 states); weakened: writes logged after 2 "
        "flushes before the next ordered key mark may have completed while they were in flight "
        "(affects begin:0)"
    )
    j = c.to_json()
    assert j["commits"] == {"words": ["exhaustive"], "distinct": 412, "judged": 412}
    assert j["setup"]["words"] == ["sampled", "weakened"]
    assert Coverage.from_json(j).phrase() == c.phrase()


def test_commits_not_exhaustive_say_so_first():
    c = cov(Part("write-cache", 3, 3, 1), Part("write-cache", 50, 40, 9, 2, 20, 100))
    assert not c.commits_exhaustive
    assert c.phrase() == (
        "commit windows capped: 40 of 50 distinct states judged; sampled (seed 0): 2 of 9 "
        "write-cache windows (20 of 100 states); set-up windows exhaustive"
    )


def test_a_note_of_the_whole_check_weakens_the_commits():
    c = cov(Part("write-cache", 3, 3, 1), Part("write-cache", 50, 50, 9)).with_note("no checker")
    assert not c.commits_exhaustive and c.phrase().startswith("commit windows weakened: no checker")


def test_old_output_without_parts_claims_nothing_more():
    c = Coverage((ModelCoverage("write-cache", 10, 10, 4, 1, 5, 64),), seed=0)
    assert not c.split and not c.commits_exhaustive
    assert c.phrase() == "sampled (seed 0): 1 of 4 write-cache windows (5 of 64 states)"
    assert Coverage.from_json(c.to_json()) == c


def test_a_note_of_both_parts_is_said_once_for_the_commits():
    other = "writes logged after 1 flush ... in flight: not generated; affects begin:3"
    c = cov(
        Part("write-cache", 3, 3, 1, 1, 9, 2**62, (LATE, other)),
        Part("write-cache", 50, 50, 9, 0, 0, 0, (other,)),
        (LATE, other),
    )
    assert c.phrase() == (
        "commit windows weakened: writes logged after 1 flush ... in flight (affects begin:3); "
        "set-up windows sampled (seed 0): 1 of 1 write-cache windows (9 of >= 2^62 states); "
        "weakened: writes logged after 2 flushes before the next ordered key mark may have "
        "completed while they were in flight (affects begin:0), and as the commit windows"
    )
    only = cov(
        Part("write-cache", 3, 3, 1, 0, 0, 0, (other,)),
        Part("write-cache", 50, 50, 9, 0, 0, 0, (other,)),
        (other,),
    )
    assert only.phrase().endswith("; set-up windows weakened as the commit windows")


def test_a_complete_run_keeps_its_parts_a_partial_one_claims_nothing_more():
    from powercut.core.states.coverage import judged_only

    c = cov(
        Part("write-cache", 30, 30, 3, 3, 330, 2**62, (LATE,)),
        Part("write-cache", 412, 412, 40),
        (LATE,),
    )
    assert judged_only(c, {"write-cache": 442}) == c and c.commits_exhaustive
    part = judged_only(c, {"write-cache": 400})
    assert (
        not part.split
        and not part.commits_exhaustive
        and part.phrase().startswith("capped: 400 of 442")
    )
    assert Coverage.from_json(part.to_json()) == part
    other = judged_only(c, {"write-cache": 42})
    from powercut.core.states.coverage import merge

    assert merge([part, other]) == c and merge([part]).phrase().startswith("capped: 400 of 442")


def test_a_sampled_setup_part_weakened_by_a_commit_note_says_both():
    other = "writes logged after 1 flush ... in flight: not generated; affects begin:3"
    c = cov(
        Part("write-cache", 3, 3, 1, 1, 9, 64, (other,)),
        Part("write-cache", 50, 50, 9, 0, 0, 0, (other,)),
        (other,),
    )
    assert c.phrase().endswith(
        "; set-up windows sampled (seed 0): 1 of 1 write-cache windows (9 of 64 states); "
        "weakened as the commit windows"
    )
    assert c.phrase(notes=False) == (
        "commit windows weakened (1 note below); set-up windows sampled (seed 0): 1 of 1 "
        "write-cache windows (9 of 64 states); weakened as the commit windows"
    )
