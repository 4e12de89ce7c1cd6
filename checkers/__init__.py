"""Checkers, one per workload (package powercut.checkers; gotwofile's store is twofile's, and so is
its checker).  Cluster checkers get every node's mount: ``replog``, ``pgsync`` (the primary
recovered alone and the standby promoted alone, each judged by ``postgres``'s server and judge),
``etcd`` (the members restarted on the recovered nodes).

``keystate`` is no checker: the words for a record's key (acked, begun, never begun) that the
postgres, sqlite and zodb checkers share."""
