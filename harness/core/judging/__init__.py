"""Judging a state (pure): the verdict vocabulary, what the judge saw (a crashed program's words,
what recovery read), and what follows a failure -- confirmation and minimizing.

* ``verdict`` -- the one verdict vocabulary;
* ``crashwords`` -- what a crashed program said: a Rust or Go panic, a Python or Java exception, from its stderr;
* ``recoveryread`` -- what recovery read: the files a checker opened (from strace's text) and the words for them;
* ``readset`` -- the read-set rule: a state equal to a judged one on every sector its judge read shares its verdict;
* ``confirm`` -- confirmation by failure group: which failing states are judged again alone;
* ``shrink`` -- minimize a failing state;
* ``nodesshrink`` -- minimize a failing state of N >= 1 disks, a disk at a time; several disks' failure: nodes,
  cause line, bundle cuts.
"""
