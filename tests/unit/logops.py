"""Test helper: build a dm-log-writes log from a list of operations (shared by the model, selection,
replay and snapshot tests).  ops: ("w", sector, nr, flags, fill) | ("f",) | ("d", sector, nr) |
("m", text); each written sector gets distinct data derived from ``fill``."""

from __future__ import annotations

from pathlib import Path

from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.log.dmlog_writer import LogWriter


def build_log(path: Path, ops: list[tuple], ss: int = 512) -> LogIndex:  # type: ignore[type-arg]
    with LogWriter(path, ss) as w:
        for op in ops:
            if op[0] == "w":
                w.write(
                    op[1],
                    b"".join(bytes([(op[4] + k) % 251 + 1]) * ss for k in range(op[2])),
                    op[3],
                )
            elif op[0] == "f":
                w.flush()
            elif op[0] == "d":
                w.discard(op[1], op[2])
            else:
                w.mark(op[1])
    return open_log(path, strict=True)
