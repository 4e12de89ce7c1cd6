"""After a failure: from a failing state to the bug.

* ``diagnose`` -- shrink and blame a failing state of N >= 1 disks, on the host or in a checker VM;
* ``diagnosis`` -- what a diagnosis says (its JSON for one disk and for several, its cause line);
* ``blame`` -- which file or structure each culprit write belongs to;
* ``btrfsmap`` -- blame's btrfs blocks: device block -> logical address (chunk tree) -> file or tree;
* ``triage`` -- failures grouped by cause, diagnosed where the check runs, bundled;
* ``cause`` -- each group's cause in the program's terms (its trace's broken rule), the commit anatomy;
* ``verify`` -- each cause proven by judging its counterfactual (a what-if state) where the check runs;
* ``bundle`` -- self-contained repro bundles of a state of N >= 1 disks: one cut log per disk, each with its SHA-256;
* ``repro`` -- judge one state (of one disk or a cluster) again, keep its images, or open a shell in it."""
