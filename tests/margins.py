"""How long a test waits for something a VM or a loaded host does: the slowest machine's margin.

A wait is a deadline, never a speed claim: meeting it early costs nothing, so it is sized for the
slowest machine a test must pass on -- TCG (10-50x slower guest code than KVM) on 2 cores that
another powercut run on the same host is also using -- not for this one.  Speed goals live in
bench/, as ratios."""

from __future__ import annotations

VM_WAIT = 900.0  # a VM to boot and reach a point of its job (a workload started, N verdicts)
EXIT_WAIT = 180.0  # a process to exit after a signal, its VMs, loops and mounts cleaned up
HOST_WAIT = 60.0  # a host daemon (sshd, libvirtd) to answer
