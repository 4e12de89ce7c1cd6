"""The workload registry and parameters."""

from __future__ import annotations

import zlib

import pytest

from powercut.errors import UsageError
from powercut.workload import get, names, parse_params


def test_registry_finds_builtin_through_entry_points() -> None:
    assert "append-fsync" in names()
    w = get("append-fsync")
    assert w.name == "append-fsync"


def test_params_are_typed_and_checked() -> None:
    w = get("append-fsync")
    p = w.params({"n": "5", "fsync": "false"})
    assert p["n"] == 5 and p["fsync"] is False and p["size"] == w.defaults["size"]
    with pytest.raises(UsageError, match="unknown parameter"):
        w.params({"bogus": 1})
    with pytest.raises(UsageError, match="wants an int"):
        w.params({"n": "many"})


@pytest.mark.parametrize(
    "name,key,bad,says",
    [
        ("append-fsync", "fsync", "maybe", "true or false"),  # #25: never False for a typo
        ("append-fsync", "fsync", "ture", "true or false"),
        ("append-fsync", "n", "-3", "at least 1"),
        ("append-fsync", "n", "0", "at least 1"),
        ("append-fsync", "seed", "-1", "at least 0"),
        ("filestorage", "fsync", "3", "one of 0, 1, 2"),
        ("osync", "mode", "o_sinc", "one of o_sync"),
        ("osync", "bs", "0", "at least 1"),
        ("sqlite", "journal_mode", "wall", "one of DELETE"),
        ("wal", "variant", "corect", "one of correct"),
        ("wal", "group", "0", "at least 1"),
        ("zodb", "n", "x", "wants an int"),
    ],
)
def test_mistyped_or_out_of_range_params_are_refused(
    name: str, key: str, bad: str, says: str
) -> None:
    with pytest.raises(UsageError, match=f"parameter {key} .*{says}"):
        get(name).params({key: bad})


def test_params_accept_every_spelling_of_a_boolean_and_normalize_choices() -> None:
    w = get("append-fsync")
    for text, want in (
        ("true", True),
        ("YES", True),
        ("on", True),
        ("1", True),
        ("False", False),
        ("no", False),
        ("off", False),
        ("0", False),
    ):
        assert w.params({"ack_early": text})["ack_early"] is want
    assert get("sqlite").params({"journal_mode": "wal"})["journal_mode"] == "WAL"
    assert get("filestorage").params({"fsync": "2"})["fsync"] == 2


def test_unknown_workload() -> None:
    with pytest.raises(UsageError, match="unknown workload 'nope'"):
        get("nope")


def test_parse_params() -> None:
    assert parse_params(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(UsageError):
        parse_params(["novalue"])


def test_append_fsync_records_are_self_describing(tmp_path, monkeypatch) -> None:
    marks = []
    monkeypatch.setattr("powercut.mark", lambda text, dm_name=None: marks.append(text))
    monkeypatch.setattr("powercut.ack", lambda k: marks.append(f"ack:{k}"))
    monkeypatch.setattr("powercut.begin", lambda k: marks.append(f"begin:{k}"))
    monkeypatch.chdir(tmp_path)
    w = get("append-fsync")
    assert w.main(w.params({"n": 3, "size": 100})) == 0
    data = (tmp_path / "append.log").read_bytes()
    pos = 0
    for i in range(3):
        header, _, rest = data[pos:].partition(b"\n")
        tag, idx, size, crc = header.split()
        assert tag == b"PCREC1" and int(idx) == i and int(size) == 100
        assert zlib.crc32(rest[:100]) == int(crc, 16)
        pos += len(header) + 1 + 100
    assert pos == len(data)
    assert marks == ["begin:0", "ack:0", "begin:1", "ack:1", "begin:2", "ack:2"]
