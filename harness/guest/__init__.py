"""The guest agent: ``python -m powercut.guest JOB`` -- everything that runs inside the VM.

* ``__main__`` -- reads the job and dispatches by its kind;
* ``record`` -- the record job: one data disk or a cluster's N, each on its own log-writes target;
* ``stack`` -- one recorded disk's device-mapper stack (log-writes, delay, fs and order maps);
* ``faultlayers`` -- each recorded disk's fault layer: plans, triggers, the workload's environment;
* ``tracing`` -- strace around the workload, the trace kept;
* ``filemap`` -- where the program's files lie on each disk at the end;
* ``markbench`` -- the mark-bench job;
* ``check`` -- the checker VM's job (check, shell, diagnose);
* ``bench`` -- the bench job;
* ``template`` -- a checker VM's template agent: started ahead of any job, saved, restored per VM."""
