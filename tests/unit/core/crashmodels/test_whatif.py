"""What-if states (core/crashmodels/whatif.py): any data entry before the cut may be left out, even
across flushes; the keys are those before the keys' cut; ids round-trip; what does not fit is one
UsageError; the model enumerates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.core.crashmodels.whatif import WHAT_IF, what_if_id
from powercut.core.states.models import space
from powercut.errors import UsageError
from tests.unit.logops import build_log

# 0 mkfs, 1 w, 2 flush, 3 begin:1, 4 w, 5 flush, 6 ack:1, 7 begin:2, 8 w, 9 w, 10 flush, 11 ack:2, 12 w
OPS = [
    ("m", "mkfs"),
    ("w", 8, 1, 0, 1),
    ("f",),
    ("m", "begin:1"),
    ("w", 16, 1, 0, 2),
    ("f",),
    ("m", "ack:1"),
    ("m", "begin:2"),
    ("w", 24, 1, 0, 3),
    ("w", 32, 1, 0, 4),
    ("f",),
    ("m", "ack:2"),
    ("w", 40, 1, 0, 5),
]


@pytest.fixture
def sp(tmp_path: Path):
    return space(build_log(tmp_path / "log.bin", OPS))


def test_a_what_if_state_keeps_its_keys_and_drops_across_flushes(sp) -> None:
    st = WHAT_IF.make(sp, 13, 7, [4, 9])
    assert st.id == "what-if@13/a7/d4,9" and st.model == "what-if"
    assert tuple(st.acks) == ("1",) and st.begun == (
        "2",
    )  # acked before entry 7: 1; 2 begun (and acked) later
    data = [e.changes_device for e in sp.entries]
    assert [i for i, _ in st.kept(data)] == [1, 8, 12]  # 4 dropped before a flush, 9 after one
    again = sp.state_from_id(st.id)
    assert (again.cut, again.dropped, tuple(again.acks), again.begun) == (
        13,
        (4, 9),
        ("1",),
        ("2",),
    )
    assert sp.state_from_id(what_if_id(9, 9, ())).begun == ("2",)


@pytest.mark.parametrize(
    "sid, words",
    [
        ("what-if@13/a7/d5", "not data entries"),  # a flush
        ("what-if@9/a10", "keys' cut (10) <= its cut (9)"),
        ("what-if@13/a7/d13", "out of range"),
        ("what-if@14/a7", "<= 13"),
        ("what-if@13/d4", "what-if@CUT/aKEYS_CUT"),
        ("what-if@13/a7/k4", "what-if@CUT/aKEYS_CUT"),
    ],
)
def test_what_does_not_fit_is_one_usage_error_naming_the_id(sp, sid: str, words: str) -> None:
    with pytest.raises(UsageError, match="what-if") as e:
        sp.state_from_id(sid)
    assert words in str(e.value)


def test_the_model_enumerates_nothing_and_cannot_be_selected(sp) -> None:
    with pytest.raises(UsageError, match="unknown crash model"):
        sp.states("what-if")
    assert list(WHAT_IF.iter_states(sp, None, None)) == []  # type: ignore[arg-type]
