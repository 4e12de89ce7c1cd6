"""The cost half: what each durability guarantee costs.

* ``profiles`` -- one fio job per guarantee;
* ``plan`` -- the suites and their items;
* ``parse`` -- fio JSON, hdparm and sysfs read-backs;
* ``items`` -- how one item runs (guest and host);
* ``host`` -- --on-host runs with the write cache toggled;
* ``run`` -- the bench VM;
* ``results`` -- results on disk."""
