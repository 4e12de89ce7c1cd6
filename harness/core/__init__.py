"""Pure core (host and guest): standard library and ``powercut.errors`` only.

* ``dmlog`` -- the dm-log-writes log reader (superblock, entries, marks, scan of an unclean log);
* ``dmlog_writer`` -- writes logs in the same format (tests, bundles, synthetic logs);
* ``marknames`` -- the marks' words (ack:, begin:, the ordering marks), light enough for the recorded program;
* ``stateid`` -- the grammar of crash-state ids and the model lists (read from the crash-model registry);
* ``idparts`` -- the parts of an id: ranges, subsets, tears, canonical ids, the seeded picks;
* ``crashstate`` -- what a crash state is and keeps (the one durable-set rule replay and selection use);
* ``markorder`` -- ordered marks: the harness's ordering flushes, which models treat as no barrier;
* ``latetrace`` -- which late flushes (the in-flight note) the trace clears: no write of the program's in flight;
* ``faultwindows`` -- injected I/O errors as the log records them: fault windows, commits acked after one;
* ``nodefaults`` -- the recording's fault plan per node (``--fault 1=PLAN``): parsed, fitted to the disks;
* ``latency`` -- the recording's disk latency (none, presets, explicit) and the dm-delay values that give it;
* ``syncdelay`` -- ``--delay-sync GLOB=TIME``: the rules that hold one file's syncs, the supervisor's log read;
* ``crashwords`` -- what a crashed program said: a Rust or Go panic, a Python or Java exception, from its stderr;
* ``races`` -- the files a race exploration holds, from the trace: synced before an ack, how long;
* ``models`` -- the crash states of a log: a CrashSpace per log, its models from the registry;
* ``crashmodels`` -- the crash models, one module per family, listed once in ``crashmodels.registry``;
* ``lies`` -- what the lying-disk models share (lost-write, misdirected-write, corrupt-sector, flush-ignored,
  unreadable-sector): commit windows, seeded targets, the lie replay applies;
* ``coverage`` -- what a check covered: exhaustive, sampled, capped or weakened, per model;
* ``imagekey`` -- when two crash states are one: the image a state replays and the keys it tells;
* ``disks`` -- the disks of one instant (one disk, or N node logs that share their key marks): instants, states, ids;
* ``pools`` -- one disk's distinct states of one instant under one model, streamed a key version at a time;
* ``statelist`` -- chosen states kept as their ids (millions of them fit in memory);
* ``selection`` -- one algorithm for N >= 1 disks: each distinct image judged once, --max-states shares;
* ``shard`` -- ``--shard i/n``: a deterministic, coordination-free split of the states or rows;
* ``shrink`` -- minimize a failing state;
* ``disksshrink`` -- minimize a failing state of N >= 1 disks, a disk at a time; several disks' failure: nodes,
  cause line, bundle cuts;
* ``confirm`` -- confirmation by failure group: which failing states are judged again alone;
* ``verdict`` -- the one verdict vocabulary;
* ``syscalls`` -- the workload's system-call trace (strace -f -y) as operations, aligned with the log's marks;
* ``causes`` -- the durability rule a failing state's program broke, from its trace;
* ``tracefacts`` -- what a trace says at an ack (unsynced changes and names, failures, running syncs) and at a cut;
* ``rules`` -- the cause rules as a registry: one module per rule (its check, sentence, counterfactual plan,
  advice), listed in rank order, and the causes that are no broken rule (recovery-bug, disk-lied, ...);
* ``causewords`` -- the words every cause shares: evidence lines, a held sync's suffix;
* ``counterfactual`` -- a rule's plan made a what-if state, and the kill-equivalent state (a recovery bug's proof);
* ``nodetrace`` -- a node's part of a cluster's trace (its marks, its files) and which nodes a cluster cause names;
* ``anatomy`` -- what each commit cost: block writes, flushes, FUAs and traced calls;
* ``recoveryread`` -- what recovery read: the files a checker opened (from strace's text) and the words for them."""
