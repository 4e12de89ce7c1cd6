"""Built-in workloads (package powercut.workloads), registered as entry points.  Cluster workloads
(``record --nodes N``, docs/clusters.md): ``replog`` (a replicated log), ``pgsync`` (a PostgreSQL
primary and its synchronous standby; it reuses ``postgres``'s prepared cluster and server helpers)."""
