"""The fault layers of a cluster recording's nodes (guest; ``--fault 1=PLAN``, core/nodefaults.py).

Each node's stack has the single-disk fault layer: the filesystem's ``<node>-fs`` linear map
(guest/record.stack), whose table a fault swaps (faults.py).  A node with a plan runs it on its own:
its state file (faults.node_state), its job-side trigger polling its own device (guest/record.
PlanTrigger), its mark trigger moved by every mark the workload inserts (marks reach every node;
faults.plan_mark moves each node's plan).  Its ``powercut-fault:on/off`` marks go to **its log
only**, ordered after its completed writes and under the cluster's mark lock: the fault windows a
log holds are its own node's (core/faultwindows.py reads them per log), while the key marks stay
the same sequence in every log (a fault mark is not a key mark, core/disks.py).  The workload gets
$POWERCUT_FAULT_NODES (every node's layer) so that ``powercut.fault(kind, node=i)`` works too."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut.core.nodefaults import DisksFaults
from powercut.faults import NODES_ENV, PlanRun, Target, node_state, plan_env
from powercut.guest.record import FS_SUFFIX, PLAN_STATE, PlanTrigger, end_fault


@dataclass(slots=True)
class NodeFaults:
    """Every node's fault layer (``targets``, node order), the plans of the nodes that have one."""

    setting: DisksFaults
    targets: Sequence[Target]
    devs: Sequence[str]                   # each node's filesystem device (its writes are polled)
    mounts: Sequence[str]
    triggers: list[tuple[int, PlanTrigger]] = field(default_factory=list)

    @staticmethod
    def of(text: str, names: Sequence[str], lowers: Sequence[str], sizes: Sequence[int], orders: Sequence[str],
           devs: Sequence[str], mounts: Sequence[str]) -> NodeFaults:
        """The layers over each node's ``lowers[i]`` (its delay layer or its log-writes target)."""
        targets = [Target(name + FS_SUFFIX, lower, size, name, order, node=i)
                   for i, (name, lower, size, order) in enumerate(zip(names, lowers, sizes, orders))]
        return NodeFaults(DisksFaults.parse(text), targets, devs, mounts)

    def env(self) -> dict[str, str]:
        """What the workload's environment carries: every layer, and the plans with their state."""
        out = {NODES_ENV: ",".join(t.spec() for t in self.targets)}
        return {**out, **plan_env(self.setting, PLAN_STATE)} if self.setting else out

    def start(self) -> None:
        """Each planned node's trigger: ``start`` fires now (before the workload), ``writes``/``after``
        poll from a thread of their own."""
        for node, plan in self.setting.nodes:
            path = node_state(PLAN_STATE, node)
            for leftover in (path, path + ".done"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
            trigger = PlanTrigger(PlanRun(plan, path, self.targets[node], self.mounts[node]), self.devs[node])
            trigger.start()
            self.triggers.append((node, trigger))

    def finish(self) -> dict[str, Any]:
        """The triggers stopped; the result's ``fault_plans``: each planned node's plan and state."""
        plans = []
        for node, trigger in self.triggers:
            trigger.finish()
            st = trigger.run.state()
            plans.append({"node": node, "plan": str(trigger.plan), **st.to_json(), "error": st.error or trigger.error})
        return {"fault_plans": plans} if plans else {}

    def end(self) -> dict[str, Any]:
        """A fault the workload left on (any node's) switched off before the unmount, with its mark
        in that node's log: the nodes it was left on (``fault_left_on``)."""
        left = [t.node for t in self.targets if end_fault(str(t.dm_name), t.lower, t.size)]
        return {"fault_left_on": left} if left else {}
