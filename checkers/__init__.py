"""Checkers, one per workload (package powercut.checkers).  Cluster checkers get every node's mount:
``replog``, ``pgsync`` (the primary recovered alone and the standby promoted alone, each judged by
``postgres``'s server and judge)."""
