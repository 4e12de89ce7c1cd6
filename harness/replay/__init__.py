"""Crash states -> disk images (host and guest).

* ``materialize`` -- the incremental walk over the log;
* ``zeros`` -- the log's all-zero writes, which a walk from a zeroed image need not read;
* ``snapshot`` -- the provider interface and the file-based providers;
* ``dmsnapshot`` -- the dm-snapshot provider;
* ``providers`` -- the catalogue and the choice of a provider."""
