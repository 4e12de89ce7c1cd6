"""Runs that stitch the stages together (host).

* ``run`` -- the check campaign (record, check, confirm, triage);
* ``journal`` -- the verdict journal, the resume point;
* ``matrix`` -- running the verdict matrix and timing its rows."""
