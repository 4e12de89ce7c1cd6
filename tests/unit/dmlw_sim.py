"""A model of how dm-log-writes orders its log (drivers/md/dm-log-writes.c: log_writes_map,
normal_end_io, log_mark), driven by a random I/O history, for the property tests of ordered marks.

Events are applied in time order; the simulator keeps what the kernel keeps (the ``unflushed_blocks``
list, each in-flight flush's spliced list) and appends to ``log`` in the order the kernel's
``logging_blocks`` list would hold the entries.  Each data write gets its own sector, so an entry's
sector names the write."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from powercut.core.log.dmlog import FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry


@dataclass
class Block:
    flags: int
    sector: int = 0
    nr: int = 0
    mark: str | None = None
    spliced: list["Block"] = field(default_factory=list)


@dataclass
class Sim:
    log: list[Block] = field(default_factory=list)
    unflushed: list[Block] = field(default_factory=list)
    inflight: list[Block] = field(default_factory=list)
    completed_at_mark: dict[str, set[int]] = field(
        default_factory=dict
    )  # ack key -> writes completed before its call
    completed: set[int] = field(default_factory=set)
    next_sector: int = 8

    # -- the kernel ---------------------------------------------------------------------------------
    def submit(self, flags: int, nr: int = 1) -> Block:
        b = Block(flags, self.next_sector if nr else 0, nr)
        self.next_sector += max(nr, 1)
        if flags & FLUSH:  # log_writes_map: a PREFLUSH bio takes the unflushed list at submission
            b.spliced, self.unflushed = self.unflushed, []
        self.inflight.append(b)
        return b

    def complete(self, b: Block) -> None:
        self.inflight.remove(b)
        if b.nr:
            self.completed.add(b.sector)
        if b.flags & FLUSH:  # normal_end_io: its list, then itself
            self.log.extend(b.spliced)
            self.log.append(b)
        elif b.flags & FUA:
            self.log.append(b)
        else:
            self.unflushed.append(b)

    def mark(self, text: str) -> None:  # log_mark: straight onto logging_blocks
        self.log.append(Block(MARK, mark=text))

    # -- the workload --------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        return [Entry(i, b.flags, b.sector, b.nr, 0, b.mark) for i, b in enumerate(self.log)]


def history(
    seed: int, ordered: bool, steps: int = 40, concurrency: bool = True, quiesce: bool = True
) -> Sim:
    """A random history: plain and FUA writes, program flushes (empty and with data), completions in
    any order, begin and ack marks (ordered: the marking code's order mark + flush first).
    ``concurrency``: other I/O may complete while the marking code waits for its flush; ``quiesce``:
    after its flush the marking code waits for every bio in flight (a dm suspend and resume)."""
    rnd = random.Random(seed)
    sim = Sim()
    key = 0
    sim.complete(sim.submit(0, 2))  # mkfs, made durable before the workload starts
    sim.complete(sim.submit(FLUSH, 0))
    sim.mark("mkfs")

    def complete_some(k: int) -> None:
        for _ in range(k):
            if sim.inflight:
                sim.complete(rnd.choice(sim.inflight))

    for _ in range(steps):
        r = rnd.random()
        if r < 0.35:
            sim.submit(0, rnd.choice((1, 2, 8)))
        elif r < 0.42:
            sim.submit(FUA, 1)
        elif r < 0.50:
            sim.submit(FLUSH, 0)
        elif r < 0.53:
            sim.submit(FLUSH | FUA, 1)
        elif r < 0.78:
            complete_some(1)
        elif r < 0.84:
            key += 1
            sim.mark(f"begin:{key}")
        else:
            key += 1
            k = f"{key}"
            sim.completed_at_mark[k] = set(sim.completed)
            if ordered:
                sim.mark(ORDER_BEGIN)
                h = sim.submit(FLUSH, 0)
                if concurrency:
                    complete_some(rnd.choice((0, 0, 0, 1, 2)))
                if h in sim.inflight:
                    sim.complete(h)
                if concurrency:
                    complete_some(rnd.choice((0, 0, 0, 0, 1)))
                sim.mark(ORDER_END)
                if quiesce:  # suspend + resume: every bio in flight completes (in any order)
                    while sim.inflight:
                        sim.complete(rnd.choice(sim.inflight))
            sim.mark(f"ack:{k}")
    while sim.inflight:
        sim.complete(sim.inflight[0])
    sim.unflushed, tail = [], sim.unflushed  # log_writes_dtr: the rest, then the end mark
    sim.log.extend(tail)
    sim.mark("dm-log-writes-end")
    return sim
