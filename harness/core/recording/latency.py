"""The data disk's latency during a recording (pure, host and guest): ``none``, a preset (``nvme``,
``sata-ssd``, ``hdd``) or explicit figures (``write=0.1ms,flush=8ms``), and the dm-delay table that
makes a disk at least that slow.

**Where the delay sits.**  The recording's guest stack is filesystem -> fault layer (``<name>-fs``)
-> delay layer (``<name>-delay``, dm-delay) -> dm-log-writes -> data and log disks.  The delay is
*above* dm-log-writes, as the fault layer is: a bio waits in dm-delay before the logged device sees
it, so the log still holds exactly the bios the filesystem sent, each logged at its completion and
every plain write at the next flush (the log's meaning does not change).  An ack that a program
sends while its fsync's flush is still waiting is logged *before* that flush: the log shows the race
as it happened, and a crash state between the two is generated.  Below dm-log-writes the race would
be hidden: an ordered mark (marks.py) suspends the log-writes target, which waits for every bio in
flight there -- the flush included -- so the ack would be logged after it.

**What the kernel can do.**  dm-delay's table (Linux >= 4.x, the 9-argument form)
``<dev> <off> <read_ms> <dev> <off> <write_ms> <dev> <off> <flush_ms>`` delays reads, writes and
flushes (a bio with REQ_PREFLUSH; device-mapper splits a PREFLUSH write into an empty flush, then
the write) by whole milliseconds, and a bio is released by a timer that counts kernel ticks: one
queued during tick ``j`` with ``ms`` leaves at tick ``j + msecs_to_jiffies(ms)``, so it waits more
than ``msecs_to_jiffies(ms) - 1`` ticks and at most ``msecs_to_jiffies(ms)``.  ``table_ms`` picks
the smallest value whose wait is **at least** the stated latency: the stated figure is a lower
bound, and the wait can be up to two ticks (8 ms at HZ=250) longer.  A figure **below one tick**
(an NVMe's 20 us write, a SATA SSD's 2 ms flush at HZ=250) is **not delayed** at all: the least
dm-delay can add is more than a tick, which would turn the disk named into one tens to hundreds
of times slower (every journal write of an fsync waiting 4-8 ms), and the emulated disk is no
faster than such a figure on its own (under TCG here an O_DIRECT write takes ~0.13 ms and an
fsync ~0.34 ms with no layer).  ``realized`` records which classes that left undelayed.
Reads are not delayed."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

NONE = "none"
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}
FALLBACK_HZ = 100  # the coarsest Linux tick: a guest that cannot tell its HZ waits at least as long
KNOWN_HZ = (100, 250, 300, 1000)


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    write_ms: float
    flush_ms: float
    stands_for: str


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "nvme",
            0.02,
            0.05,
            "a datacenter NVMe SSD with power-loss protection: a 4 KiB write acked in "
            "~20 us, a FLUSH with nothing volatile to write back",
        ),
        Preset(
            "sata-ssd",
            0.05,
            2.0,
            "a consumer SATA SSD without power-loss protection: writes land in its "
            "DRAM cache, a FLUSH programs them into NAND",
        ),
        Preset(
            "hdd",
            0.1,
            8.3,
            "a 7200 rpm SATA disk with its write cache on: writes land in the cache, a FLUSH "
            "waits for the platter, one revolution = 60 s / 7200 = 8.3 ms",
        ),
    )
}


class LatencyError(ValueError):
    """A latency setting that cannot be read (one line naming what is wrong)."""


def _ms(key: str, text: str) -> float:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(us|ms|s)?", text.strip())
    if not m:
        raise LatencyError(f"{key}={text!r}: want a number with us, ms or s (e.g. {key}=8ms)")
    value = float(m.group(1)) * UNITS[m.group(2) or "ms"]
    if value > 10_000:
        raise LatencyError(f"{key}={text}: at most 10 s")
    return value


def _fmt(ms: float) -> str:
    return f"{ms:g}ms"


@dataclass(frozen=True, slots=True)
class DiskLatency:
    """Write and flush latency of the recording's data disk, in milliseconds; ``name`` is the preset
    it came from ("" for explicit figures, ``none`` for no delay layer)."""

    write_ms: float = 0.0
    flush_ms: float = 0.0
    name: str = NONE

    @staticmethod
    def parse(text: str) -> DiskLatency:
        """``none``, a preset name, or ``write=X,flush=Y`` (units us, ms, s; a bare number is ms;
        either key may be left out: 0)."""
        t = text.strip()
        if t in ("", NONE):
            return DiskLatency()
        if t in PRESETS:
            p = PRESETS[t]
            return DiskLatency(p.write_ms, p.flush_ms, p.name)
        if "=" not in t:
            raise LatencyError(
                f"unknown disk latency {t!r}: none, {', '.join(PRESETS)}, or "
                "write=TIME,flush=TIME (e.g. write=0.1ms,flush=8ms)"
            )
        got: dict[str, float] = {}
        for part in t.split(","):
            key, eq, value = part.partition("=")
            key = key.strip()
            if key not in ("write", "flush") or not eq:
                raise LatencyError(f"disk latency {t!r}: {part!r} is not write=TIME or flush=TIME")
            if key in got:
                raise LatencyError(f"disk latency {t!r}: {key} given twice")
            got[key] = _ms(key, value)
        lat = DiskLatency(got.get("write", 0.0), got.get("flush", 0.0), "")
        return lat if lat.write_ms or lat.flush_ms else DiskLatency()

    @property
    def none(self) -> bool:
        return not self.write_ms and not self.flush_ms

    def __str__(self) -> str:
        """The canonical text: parse(str(x)) == x."""
        if self.none:
            return NONE
        return self.name or f"write={_fmt(self.write_ms)},flush={_fmt(self.flush_ms)}"

    def describe(self) -> str:
        """``hdd (write >= 0.1 ms, flush >= 8.3 ms)``; ``none (no delay layer)``."""
        if self.none:
            return "none (no delay layer)"
        what = f"write >= {self.write_ms:g} ms, flush >= {self.flush_ms:g} ms"
        return f"{self.name} ({what})" if self.name else what

    def table(self, dev: str, sectors: int, hz: int) -> list[tuple[int, int, str, str]]:
        """The dm-delay table over ``dev`` (a linear one for ``none``)."""
        if self.none:
            return [(0, sectors, "linear", f"{dev} 0")]
        w, f = table_ms(self.write_ms, hz), table_ms(self.flush_ms, hz)
        return [(0, sectors, "delay", f"{dev} 0 0 {dev} 0 {w} {dev} 0 {f}")]

    def realized(self, hz: int) -> dict[str, float | int | bool]:
        """What the table gives at ``hz``: the dm-delay values, each class's guaranteed wait (more
        than) and longest wait, in ms, and whether its figure was below a tick (not delayed) -- the
        manifest's record of the layer."""
        out: dict[str, float | int | bool] = {"hz": hz}
        for cls, ms in (("write", self.write_ms), ("flush", self.flush_ms)):
            v = table_ms(ms, hz)
            ticks = jiffies(v, hz)
            out[f"dm_{cls}_ms"] = v
            out[f"{cls}_min_ms"] = round(max(ticks - 1, 0) * 1000 / hz, 3)
            out[f"{cls}_max_ms"] = round(ticks * 1000 / hz, 3)
            out[f"{cls}_below_tick"] = below_tick(ms, hz)
        return out

    def to_json(self) -> dict[str, str | float]:
        return {"setting": str(self), "write_ms": self.write_ms, "flush_ms": self.flush_ms}


def layer_phrase(m: dict[str, object]) -> str:
    """What the delay layer gave, from a manifest's ``[latency]`` (``realized`` plus ``to_json``):
    ``dm-delay at HZ=250: each write not delayed (0.1 ms is below the 4 ms tick), each flush waited
    12-16 ms``; "" when the record has no layer figures."""
    if "flush_min_ms" not in m:
        return ""
    hz = m.get("hz", "?")
    parts = []
    for cls in ("write", "flush"):
        stated = m.get(f"{cls}_ms", 0)
        if m.get(f"{cls}_below_tick"):
            tick = f"{1000 / hz:g} ms " if isinstance(hz, int) and hz else ""
            parts.append(f"each {cls} not delayed ({stated:g} ms is below the {tick}tick)")
        elif stated:
            parts.append(f"each {cls} waited {m[f'{cls}_min_ms']:g}-{m[f'{cls}_max_ms']:g} ms")
    return f"dm-delay at HZ={hz}: " + ", ".join(parts) if parts else ""


def below_tick(stated_ms: float, hz: int) -> bool:
    """A figure dm-delay cannot give without adding more than a whole tick to it."""
    return 0 < stated_ms < 1000 / hz - 1e-9


def jiffies(ms: int, hz: int) -> int:
    """The kernel's msecs_to_jiffies: rounded up."""
    return -(-ms * hz // 1000)


def table_ms(stated_ms: float, hz: int) -> int:
    """The dm-delay milliseconds whose wait is at least ``stated_ms`` at ``hz``: a bio waits more
    than ``jiffies(ms) - 1`` ticks, so that many ticks must cover the stated figure.  0 (no delay)
    for 0 and for a figure below one tick (the module's docstring says why)."""
    if stated_ms <= 0 or below_tick(stated_ms, hz):
        return 0
    tick = 1000 / hz
    need = math.ceil(stated_ms / tick - 1e-9) + 1  # ticks: (need - 1) * tick >= stated
    ms = (need - 1) * 1000 // hz + 1  # the least ms whose jiffies() is need
    while jiffies(ms, hz) < need:
        ms += 1
    return ms


def snap_hz(measured: float) -> int:
    """A measured tick rate to the nearest configurable HZ (FALLBACK_HZ when it is nowhere near one)."""
    best = min(KNOWN_HZ, key=lambda h: abs(h - measured))
    return best if abs(best - measured) <= 0.15 * best else FALLBACK_HZ


NODE_SEP = "+"  # between the settings of several nodes: ``0=nvme+1=hdd``


@dataclass(frozen=True, slots=True)
class NodesLatency:
    """The latency of every data disk of a recording: one setting for all (``hdd``), and settings
    for single nodes of a cluster recording that replace it there (``1=hdd``: node 1 only, the
    others none; ``nvme+1=hdd``: node 1 hdd, every other nvme).  One disk is node 0."""

    every: DiskLatency = DiskLatency()
    nodes: tuple[tuple[int, DiskLatency], ...] = ()  # (node, its setting), by node, each node once

    @staticmethod
    def parse(text: str) -> NodesLatency:
        """A setting for every disk (DiskLatency.parse) or ``NODE=SETTING`` pieces joined by ``+``,
        with at most one piece without ``NODE=`` (the others' setting)."""
        every: DiskLatency | None = None
        nodes: dict[int, DiskLatency] = {}
        for piece in text.split(NODE_SEP):
            m = re.fullmatch(r"\s*([0-9]+)\s*=(.*)", piece, re.S)
            if m is None:
                if every is not None:
                    raise LatencyError(
                        f"disk latency {text!r}: two settings for every node; name the node "
                        f"of one (NODE=SETTING, e.g. 1=hdd)"
                    )
                every = DiskLatency.parse(piece)
                continue
            node = int(m.group(1))
            if node in nodes:
                raise LatencyError(f"disk latency {text!r}: node {node} given twice")
            if not m.group(2).strip():
                raise LatencyError(
                    f"disk latency {text!r}: node {node} has no setting (e.g. {node}=hdd)"
                )
            nodes[node] = DiskLatency.parse(m.group(2))
        return NodesLatency(every or DiskLatency(), tuple(sorted(nodes.items())))

    def of(self, node: int) -> DiskLatency:
        """Node ``node``'s disk's latency."""
        return dict(self.nodes).get(node, self.every)

    def for_nodes(self, n: int) -> NodesLatency:
        """This setting for a recording of ``n`` disks, in its canonical form (a node given the
        others' setting is not named; n nodes of one setting are one setting for all); LatencyError
        if it names a node the recording does not have."""
        beyond = [node for node, _ in self.nodes if node >= n]
        if beyond:
            have = "node 0 only (one disk)" if n == 1 else f"nodes 0..{n - 1}"
            raise LatencyError(
                f"disk latency {self}: node {beyond[0]} named, and the recording has {have}"
            )
        own = tuple((node, lat) for node, lat in self.nodes if lat != self.every)
        if own and len(own) == n and len({lat for _, lat in own}) == 1:
            return NodesLatency(own[0][1])
        return NodesLatency(self.every, own)

    @property
    def none(self) -> bool:
        return self.every.none and all(lat.none for _, lat in self.nodes)

    @property
    def per_node(self) -> bool:
        return bool(self.nodes)

    def __str__(self) -> str:
        """The canonical text: parse(str(x)) == x."""
        if not self.nodes:
            return str(self.every)
        head = [] if self.every.none else [str(self.every)]
        return NODE_SEP.join(head + [f"{node}={lat}" for node, lat in self.nodes])

    def describe(self) -> str:
        if not self.nodes:
            return self.every.describe()
        parts = [f"node {node}: {lat.describe()}" for node, lat in self.nodes]
        return "; ".join(parts + [f"every other node: {self.every.describe()}"])

    def to_json(self) -> dict[str, object]:
        """One setting: DiskLatency.to_json; per node: the setting and each named node's."""
        if not self.nodes:
            return dict(self.every.to_json())
        return {
            "setting": str(self),
            "every": self.every.to_json(),
            "nodes": {str(node): lat.to_json() for node, lat in self.nodes},
        }


def parse_schedules(text: str) -> tuple[NodesLatency, ...]:
    """``none,hdd`` or ``none;write=1ms,flush=8ms`` or ``none;1=hdd``: one or more settings (each for
    every disk or per node: NodesLatency).  Settings are separated by ``;`` when any holds a ``=``
    (an explicit ``write=``/``flush=``, whose own parts use ``,``, or a node's setting), else by
    ``,``.  Repeats are refused (each setting is one schedule)."""
    parts = [p for p in (text.split(";") if "=" in text else text.split(","))]
    out = tuple(NodesLatency.parse(p) for p in parts if p.strip())
    if not out:
        raise LatencyError(
            "give at least one disk latency (none, a preset, or write=...,flush=...)"
        )
    seen: set[str] = set()
    for lat in out:
        if str(lat) in seen:
            raise LatencyError(f"disk latency {lat} given twice")
        seen.add(str(lat))
    return out


def recorded_phrase(lat: dict[str, Any] | None) -> str:
    """What a manifest's ``[latency]`` says of a recording's disks: ``none (no delay layer)``; one
    setting for every disk with what its layer gave (``hdd (write >= 0.1 ms, flush >= 8.3 ms):
    dm-delay at HZ=250: ...``); per node (a cluster's ``nodes`` list), each node's in turn."""
    if not lat or lat.get("setting", NONE) == NONE:
        return "none (no delay layer)"
    nodes = lat.get("nodes")
    if isinstance(nodes, list):
        return f"{lat['setting']}: " + "; ".join(
            f"node {i}: {_one_phrase(n)}" for i, n in enumerate(nodes)
        )
    return _one_phrase(lat)


def _one_phrase(lat: dict[str, Any]) -> str:
    if lat.get("setting", NONE) == NONE:
        return "none (no delay layer)"
    got = layer_phrase(lat)
    return (
        f"{lat['setting']} (write >= {lat.get('write_ms', 0):g} ms, flush >= {lat.get('flush_ms', 0):g} ms)"
        + (f": {got}" if got else "")
    )
