"""The fault layers of a recording's disks (guest; ``--fault PLAN`` for one disk, ``--fault 1=PLAN``
per node of a cluster, core/recording/nodefaults.py).

Each disk's stack has a fault layer: the filesystem's ``<name>-fs`` linear map (guest/stack.py),
whose table a fault swaps (faults.py).  A disk with a plan runs it on its own: its state file, its
job-side trigger polling its own device (``PlanTrigger``), its mark trigger moved by every mark
the workload inserts (faults.plan_mark).  Its ``powercut-fault:on/off`` marks go to **its log
only**: the fault windows a log holds are its own disk's (core/log/faultwindows.py reads them per
log), while the key marks of a cluster stay the same sequence in every log (a fault mark is not a
key mark, core/states/nodes.py).

What the workload is told differs by the number of disks, as its contract does (docs/workloads.md):
one disk's layer is $POWERCUT_FAULT_DEV and its plan's state file is ``PLAN_STATE``; a cluster's
layers are $POWERCUT_FAULT_NODES (``powercut.fault(kind, node=i)``), node i's state file
``faults.node_state(PLAN_STATE, i)``, and its layers' switch marks go under the cluster's mark
lock."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.core.recording.nodefaults import NodesFaults
from powercut.faults import FAULT_ENV, NODES_ENV, FaultError, PlanRun, Target, node_state, plan_env
from powercut.guest.stack import FS_SUFFIX, DiskStack

log = logging.getLogger("powercut.guest")

PLAN_STATE = "/run/powercut/fault-plan.json"  # the fault plan's state (faults.PlanRun), guest-local
PLAN_POLL_S = 0.002


class PlanTrigger:
    """The plan's job-side triggers: ``start`` before the workload, ``writes``/``after`` from a thread
    polling the filesystem device's completed writes (/sys/block/dm-N/stat) and the clock."""

    def __init__(self, run: PlanRun, dev: str) -> None:
        self.run, self.plan = run, run.plan
        self.stat = f"/sys/block/dm-{os.minor(os.stat(dev).st_rdev)}/stat"
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.error = ""

    def writes(self) -> int:
        return int(Path(self.stat).read_text().split()[4])  # writes completed

    def start(self) -> None:
        if self.plan.trigger == "start":
            self._fire()
        elif self.plan.trigger in ("writes", "after"):
            self.base, self.t0 = self.writes(), time.monotonic()
            self.thread = threading.Thread(target=self._poll, name="fault-plan", daemon=True)
            self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(PLAN_POLL_S):
            met = (
                self.writes() - self.base >= self.plan.writes
                if self.plan.trigger == "writes"
                else time.monotonic() - self.t0 >= self.plan.after
            )
            if met:
                self._fire()
                return

    def _fire(self) -> None:
        try:
            self.run.fire()
        except (FaultError, OSError) as e:
            self.error = str(e)
            log.error("%s", e)

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


@dataclass(slots=True)
class DiskFaults:
    """Every disk's fault layer (disk order) and the plans of the disks that have one."""

    text: str  # the --fault setting as the job gave it
    setting: NodesFaults
    stacks: Sequence[DiskStack]
    triggers: list[tuple[int, PlanTrigger]] = field(default_factory=list)

    @staticmethod
    def of(text: str, stacks: Sequence[DiskStack]) -> DiskFaults:
        return DiskFaults(text, NodesFaults.parse(text), stacks)

    @property
    def several(self) -> bool:
        return len(self.stacks) > 1

    def target(self, i: int) -> Target:
        """Disk i's fault layer over what its filesystem map sits on (its delay layer or its target)."""
        s = self.stacks[i]
        return Target(
            s.name + FS_SUFFIX,
            s.lower,
            s.size,
            s.name,
            s.order,
            **({"node": i} if self.several else {}),
        )

    def state_path(self, i: int) -> str:
        return node_state(PLAN_STATE, i) if self.several else PLAN_STATE

    def env(self) -> dict[str, str]:
        """What the workload's environment carries: the layers, and the plans with their state."""
        if self.several:
            out = {NODES_ENV: ",".join(self.target(i).spec() for i in range(len(self.stacks)))}
            return {**out, **plan_env(self.setting, PLAN_STATE)} if self.setting else out
        plan = self.setting.of(0)
        return {
            FAULT_ENV: self.target(0).spec(),
            **(plan_env(plan, PLAN_STATE) if plan is not None else {}),
        }

    def start(self) -> None:
        """Each planned disk's trigger: ``start`` fires now (before the workload), ``writes``/``after``
        poll from a thread of their own."""
        for i in range(
            len(self.stacks)
        ):  # a bare plan is one disk's (NodesFaults.of(0)), a cluster's per node
            plan = self.setting.of(i)
            if plan is None:
                continue
            path = self.state_path(i)
            for leftover in (path, path + ".done"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
            trigger = PlanTrigger(
                PlanRun(plan, path, self.target(i), self.stacks[i].mount), self.stacks[i].dev
            )
            trigger.start()
            self.triggers.append((i, trigger))

    def finish(self) -> dict[int, dict[str, Any]]:
        """The triggers stopped; each planned disk's plan and its state, by disk."""
        plans = {}
        for i, trigger in self.triggers:
            trigger.finish()
            st = trigger.run.state()
            plans[i] = {
                "plan": str(trigger.plan) if self.several else self.text,
                **st.to_json(),
                "error": st.error or trigger.error,
            }
        return plans

    def end(self) -> list[bool]:
        """A fault the workload left on (any disk's) switched off before the unmount, with its mark in
        that disk's log: per disk, whether one was."""
        return [s.end_fault() for s in self.stacks]
