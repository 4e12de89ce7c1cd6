"""Judging crash states.

* ``context`` -- what a state is judged against (CheckContext) and its checker;
* ``judge`` -- mount, checker, umount, read-only fsck of one state;
* ``readtrace`` -- what a state's checker opened and read (trace_reads): strace, Python's audit events;
* ``host`` -- --check-in host: loop devices, parallel incremental walks; states of N disks one by one;
* ``proving`` -- the read-set rule in a host check: which states are proven, and their confirmation;
* ``checkervm`` -- one checker VM: its spec, its boot on a job, its progress followed (a serving VM takes the next);
* ``vm`` -- --check-in vm: checker VMs judging states of one disk or N (check, diagnose and shell jobs; warm VMs);
* ``vmpool`` -- checker VMs kept booted across the runs of a matrix (the main job): a row's check takes the last one's;
* ``vmprogress`` -- a checker VM's progress stream as the host follows it, and how one boot went;
* ``hosts`` -- where a checker VM boots: QEMU here, libvirt here, or a remote libvirt host
  (--check-uri: image and recording shipped by hash, files mirrored back);
* ``place`` -- the one value that decides where states are judged, and its dispatch."""
