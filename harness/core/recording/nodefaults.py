"""The recording's fault plan per node (pure, host and guest): ``--fault`` for one disk or for the
nodes of a cluster recording, in the shape of ``--disk-latency`` per node (core/recording/latency.NodesLatency).

* one disk: ``PLAN`` (core/log/faultwindows.FaultPlan: ``eio-writes,mark=ack:3``), or ``0=PLAN``;
* a cluster: ``NODE=PLAN`` pieces joined by ``+`` -- ``1=eio-writes,mark=ack:3`` fails node 1's
  disk from the third ack on; ``0=eio-writes,after=2+2=eio-writes,writes=50`` fails node 0 and node 2,
  each by its own plan (its own trigger, its own window, in its own log).

**A plan without a node is refused for a cluster** (one line asking for the node).  A storage
engineer testing a replicated system means "one replica's disk fails" far more often than "every
disk fails at once", and the two are different experiments: the same plan on every node fires on
every node at the same mark (the same trigger, the same seed), a correlated failure of every
replica -- the outage after which the only correct behaviour is to stop acking.  Reading a bare
plan as that would turn a forgotten ``1=`` into a test of something else; whoever wants it writes
every node (``0=P+1=P+2=P``).  ``--disk-latency hdd`` means every disk because identical disks are
the normal case; an identical failure on every disk is not.

A ``+`` starts the next node's plan only where ``NODE=`` follows it: ``sectors=100+8`` keeps its
``+``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from powercut.core.log.faultwindows import FaultPlan

NODE_SEP = "+"
_SPLIT = re.compile(r"\+(?=\s*[0-9]+\s*=)")
_NODE = re.compile(r"\s*([0-9]+)\s*=(.*)", re.S)


class FaultsError(ValueError):
    """A per-node fault setting that cannot be read or does not fit the recording (one line)."""


@dataclass(frozen=True, slots=True)
class NodesFaults:
    """The fault plan of each data disk: ``every`` (a plan without a node: one disk's), or plans
    for named nodes (``nodes``: (node, plan), by node, each once) -- never both."""

    every: FaultPlan | None = None
    nodes: tuple[tuple[int, FaultPlan], ...] = ()

    @staticmethod
    def parse(text: str) -> NodesFaults:
        """``PLAN`` or ``NODE=PLAN`` pieces joined by ``+`` ("" : no plan); FaultsError naming what is wrong."""
        if not text.strip():
            return NodesFaults()
        every: FaultPlan | None = None
        nodes: dict[int, FaultPlan] = {}
        for piece in _SPLIT.split(text):
            m = _NODE.fullmatch(piece)
            if m is None:
                if not piece.strip():
                    raise FaultsError(
                        f"an empty plan between two '+' (NODE=PLAN pieces joined by {NODE_SEP})"
                    )
                if every is not None or nodes:
                    raise FaultsError(
                        f"{piece.strip()!r} names no node: with several plans each is NODE=PLAN "
                        f"(e.g. 1={piece.strip()})"
                    )
                every = _plan(piece, "")
                continue
            node = int(m.group(1))
            if every is not None:
                raise FaultsError(
                    f"{str(every)!r} names no node: with several plans each is NODE=PLAN"
                )
            if node in nodes:
                raise FaultsError(f"node {node} given twice")
            if not m.group(2).strip():
                raise FaultsError(f"node {node} has no plan (e.g. {node}=eio-writes,mark=ack:3)")
            nodes[node] = _plan(m.group(2), f"node {node}: ")
        return NodesFaults(every, tuple(sorted(nodes.items())))

    def for_nodes(self, n: int) -> NodesFaults:
        """This setting for a recording of ``n`` data disks, canonical (one disk's ``0=PLAN`` is its
        ``PLAN``); FaultsError if it names a node the recording lacks, or gives a cluster a plan
        without a node (the module's docstring says why)."""
        beyond = [node for node, _ in self.nodes if node >= n]
        if beyond:
            have = "one disk (node 0)" if n == 1 else f"nodes 0..{n - 1}"
            raise FaultsError(f"node {beyond[0]} named, and the recording has {have}")
        if n == 1:
            return NodesFaults(self.every or (self.nodes[0][1] if self.nodes else None))
        if self.every is not None:
            raise FaultsError(
                f"a cluster recording: name the node whose disk fails, e.g. 1={self.every} "
                f"(every node at once: 0={self.every}{NODE_SEP}1={self.every}...)"
            )
        return self

    def of(self, node: int) -> FaultPlan | None:
        """Node ``node``'s plan (None: its disk does not fail)."""
        return dict(self.nodes).get(node, self.every)

    def __bool__(self) -> bool:
        return self.every is not None or bool(self.nodes)

    def __str__(self) -> str:
        """The canonical text: parse(str(x)) == x."""
        if self.every is not None:
            return str(self.every)
        return NODE_SEP.join(f"{node}={plan}" for node, plan in self.nodes)


def _plan(text: str, where: str) -> FaultPlan:
    try:
        return FaultPlan.parse(text)
    except ValueError as e:
        hint = (
            f" (a '{NODE_SEP}' starts another plan only before its NODE=: 1=PLAN{NODE_SEP}2=PLAN)"
            if NODE_SEP in text.split(",")[0]
            else ""
        )
        raise FaultsError(f"{where}{e}{hint}") from None
