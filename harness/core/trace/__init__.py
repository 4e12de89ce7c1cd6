"""The program's system calls (pure): the recording's strace trace read as operations, aligned with
the log's marks, and what it says at an ack or a cut.

* ``syscalls`` -- the workload's system-call trace (strace -f -y) as operations, aligned with the log's marks;
* ``tracefacts`` -- what a trace says at an ack (unsynced changes and names, failures, running syncs) and at a cut;
* ``latetrace`` -- which late flushes (the in-flight note) the trace clears: no write of the program's in flight;
* ``anatomy`` -- what each commit cost: block writes, flushes, FUAs and traced calls.
"""
