"""Built-in workloads (package powercut.workloads), registered as entry points.

``etcdcluster`` is no workload: the etcd members (argv, start, stop, the HTTP/JSON gateway client)
for ``etcd``, whose ``python -m powercut.workloads.etcd --recover`` the etcd checker runs."""
