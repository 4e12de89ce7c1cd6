"""Judging crash states.

* ``context`` -- what a state is judged against (CheckContext) and its checker;
* ``judge`` -- mount, checker, umount, read-only fsck of one state;
* ``host`` -- --check-in host: loop devices, parallel incremental walks;
* ``vm`` -- --check-in vm: checker VMs (CheckerVm boots one; check, diagnose and shell jobs);
* ``place`` -- the one value that decides where states are judged, and its dispatch."""
