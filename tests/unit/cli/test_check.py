"""cli/check.py: the console's count of how the groups' causes were proven."""

from __future__ import annotations

from powercut.cli.check import proofs_words


def test_the_groups_line_says_how_many_causes_were_proven_recovery_bugs_or_not_proven() -> None:
    assert proofs_words({}) == "" and proofs_words({"groups": 0, "untried": 2}) == ""
    assert (
        proofs_words({"groups": 3, "verified": 1, "replaced": 1, "recovery": 0, "unproven": 1})
        == "; causes: 2 proven by counterfactual, 1 not proven"
    )
    assert (
        proofs_words({"groups": 1, "verified": 0, "replaced": 0, "recovery": 1, "unproven": 0})
        == "; causes: 0 proven by counterfactual, 1 a recovery bug (a process kill fails too)"
    )
