"""Recordings (host).

* ``vm`` -- boot the recording VM and collect its output (imported only by campaign/ and cli/);
* ``clustervm`` -- a cluster recording (host side): N data disks, each on its own dm-log-writes device, in one VM;
* ``recording`` -- the recording format: manifest schema, load and validate (what other stages import)."""
