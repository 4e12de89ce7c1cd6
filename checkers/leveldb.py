"""Checker for leveldb: LevelDB's own recovery (opening the database replays its log), then every
acked put there, byte-exact, and no key that was never begun.

What was written is rebuilt from the parameters (workloads/leveldb.py): put ``i`` stores
``value_bytes`` bytes from (seed, i) under key ``k%08d``.  Reads verify the blocks' checksums.

* corrupt-data -- LevelDB refuses to open or to read (``Corruption``, an I/O error: with
  ``paranoid_checks`` a damaged log record or table block is an error), a key's value is not what
  was written, or a key never begun is there; under a lying-disk model (``CheckInput.noticed``)
  LevelDB's own error is ``detected`` (it noticed), while a wrong value it returned without an
  error stays corrupt-data (``silent-corruption`` there);
* lost-ack -- an acked key absent (or the database absent while something was acked);
* pass -- otherwise (a begun-not-acked key may be there or not); also a database that does not open
  when no put has begun (a crash while it was being created: nothing was promised yet)."""

from __future__ import annotations

import os
import random
from typing import Any

from powercut import Checker, CheckInput, CheckResult

DEFAULTS: dict[str, Any] = {"seed": 0, "dir": "app.ldb", "value_bytes": 1000, "paranoid": True}


def _value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"leveldb:{seed}:{i}").randbytes(size)


def _ids(keys: list[int]) -> str:
    return ", ".join(map(str, keys[:8])) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def check(inp: CheckInput) -> CheckResult:
    import plyvel  # noqa: PLC0415 -- only this checker needs it (pip install 'powercut[apps]')

    p = {**DEFAULTS, **inp.params}
    path = os.path.join(inp.mount, str(p["dir"]))
    acked, begun = sorted(int(k) for k in inp.acked), {int(k) for k in inp.begun}
    if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "CURRENT")):
        if acked:
            return CheckResult(
                "lost-ack", (f"{p['dir']} is missing but put(s) {_ids(acked)} were acked",)
            )
        return CheckResult("pass", ("no database and nothing acked",))
    try:
        db = plyvel.DB(path, create_if_missing=False, paranoid_checks=bool(p["paranoid"]))
    except (plyvel.Error, OSError) as e:
        if (
            not acked and not begun
        ):  # a crash while the database was being created: nothing promised yet
            return CheckResult(
                "pass",
                (
                    f"LevelDB does not open ({e}), but no put has begun: its creation "
                    "need not be durable yet",
                ),
            )
        return CheckResult(inp.noticed, (f"LevelDB does not open: {type(e).__name__}: {e}",))
    try:
        seen: dict[int, bytes] = {}
        for k, v in db.iterator(verify_checksums=True, fill_cache=False):
            if not (k.startswith(b"k") and k[1:].isdigit()):
                return CheckResult("corrupt-data", (f"a key never written: {k[:40]!r}",))
            seen[int(k[1:])] = v
    except (plyvel.Error, OSError) as e:
        return CheckResult(
            inp.noticed, (f"LevelDB cannot read its tables: {type(e).__name__}: {e}",)
        )
    finally:
        db.close()
    size, seed = int(p["value_bytes"]), int(p["seed"])
    bad = []
    for i, v in sorted(seen.items()):
        if i not in begun and i not in set(acked):
            return CheckResult("corrupt-data", (f"key {i} is there, but put {i} never began",))
        if v != _value(seed, i, size):
            at = next(
                (j for j, (a, b) in enumerate(zip(v, _value(seed, i, size))) if a != b),
                min(len(v), size),
            )
            bad.append(f"put {i}: its value differs from byte {at} ({len(v)} bytes)")
    if bad:
        return CheckResult("corrupt-data", tuple(bad[:5]))
    lost = [i for i in acked if i not in seen]
    if lost:
        return CheckResult(
            "lost-ack", (f"acked put(s) {_ids(lost)} lost: the database holds {len(seen)} key(s)",)
        )
    return CheckResult("pass", (f"{len(acked)} acked put(s) there, byte-exact",))


CHECKER = Checker(
    name="leveldb",
    description="LevelDB's recovery (paranoid checks), every acked put there and "
    "byte-exact, no key never begun",
    check=check,
)
