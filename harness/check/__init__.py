"""Judging crash states.

* ``context`` -- what a state is judged against (CheckContext) and its checker;
* ``judge`` -- mount, checker, umount, read-only fsck of one state;
* ``host`` -- --check-in host: loop devices, parallel incremental walks;
* ``cluster`` -- cluster crash states (--check-in host): every node mounted, the checker given all mounts, fsck per node;
* ``vm`` -- --check-in vm: checker VMs (CheckerVm boots one; check, diagnose and shell jobs);
* ``vmprogress`` -- a checker VM's progress stream as the host follows it, and how one boot went;
* ``clustervm`` -- --check-in vm for cluster states: every node's log in one checker VM per worker;
* ``hosts`` -- where a checker VM boots: QEMU here, libvirt here, or a remote libvirt host
  (--check-uri: image and recording shipped by hash, files mirrored back);
* ``template`` -- checker VMs restored from a saved template VM instead of booted (built and
  cached by key; a failed restore boots);
* ``place`` -- the one value that decides where states are judged, and its dispatch."""
