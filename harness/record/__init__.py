"""Recordings (host).

* ``vm`` -- boot the recording VM and collect its output (imported only by campaign/ and cli/);
* ``recording`` -- the recording format: manifest schema, load and validate (what other stages import)."""
