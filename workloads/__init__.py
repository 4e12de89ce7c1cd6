"""Built-in workloads (package powercut.workloads), registered as entry points.  Cluster workloads
(``record --nodes N``, docs/clusters.md): ``replog`` (a replicated log), ``pgsync`` (a PostgreSQL
primary and its synchronous standby; it reuses ``postgres``'s prepared cluster and server helpers),
``etcd`` (three etcd members).

``etcdcluster`` is no workload: the etcd members (argv, start, stop, the HTTP/JSON gateway client)
for ``etcd``, whose ``python -m powercut.workloads.etcd --recover`` the etcd checker runs."""
