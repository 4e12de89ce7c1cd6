"""The guest agent: ``python -m powercut.guest JOB`` -- everything that runs inside the VM.

* ``__main__`` -- reads the job and dispatches by its kind;
* ``record`` -- the record and mark-bench jobs;
* ``clusterrecord`` -- the cluster record job: N data disks, each on its own log-writes target, marks to every log;
* ``clusterfaults`` -- the cluster record job's fault layer per node: plans, triggers, the workload's environment;
* ``check`` -- the checker VM's job (check, shell, diagnose);
* ``bench`` -- the bench job;
* ``template`` -- a checker VM's template agent: started ahead of any job, saved, restored per VM."""
