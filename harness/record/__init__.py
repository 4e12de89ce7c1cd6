"""Recordings (host).

* ``vm`` -- boot the recording VM (one data disk, or a cluster's N, each on its own dm-log-writes
  device, in one VM) and collect its output (imported only by campaign/ and cli/);
* ``recording`` -- the recording format: manifest schema, load and validate (what other stages import)."""
