"""Built-in workloads (package powercut.workloads), registered as entry points.  Cluster workloads
(``record --nodes N``, docs/clusters.md): ``replog`` (a replicated log), ``pgsync`` (a PostgreSQL
primary and its synchronous standby; it reuses ``postgres``'s prepared cluster),
``etcd`` (three etcd members).

``etcdcluster`` is no workload: the etcd members (argv, start, stop, the HTTP/JSON gateway client)
for ``etcd``, whose ``python -m powercut.workloads.etcd --recover`` the etcd checker runs.

``pgserver`` is no workload either: the PostgreSQL server (binaries, data directory owner and settings
file, start, stop, readiness, psql) for ``postgres`` and ``pgsync`` and for their checkers.

``gobuild`` (the Go build step of ``etcd`` and ``gotwofile``, on the host) and ``pgmarks`` (marks
from psql sessions, for ``pgsync`` and ``pggroup``) are no workloads either."""
