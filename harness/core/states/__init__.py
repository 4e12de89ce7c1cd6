"""Crash states (pure): what a state is, how it is named, which ones a log has, and which of them a
check judges.  The crash models that generate them are core/crashmodels/.

* ``crashstate`` -- what a crash state is and keeps (the one durable-set rule replay and selection use);
* ``stateid`` -- the grammar of crash-state ids and the model lists (read from the crash-model registry);
* ``idparts`` -- the parts of an id: ranges, subsets, tears, canonical ids, the seeded picks;
* ``models`` -- the crash states of a log: a CrashSpace per log, its models from the registry;
* ``imagekey`` -- when two crash states are one: the image a state replays and the keys it tells;
* ``nodes`` -- the nodes of one instant (one disk, or N node logs that share their key marks): instants, states, ids;
* ``pools`` -- one disk's distinct states of one instant under one model, streamed a key version at a time;
* ``statelist`` -- chosen states kept as their ids (millions of them fit in memory);
* ``selection`` -- one algorithm for N >= 1 disks: each distinct image judged once, --max-states shares;
* ``shard`` -- ``--shard i/n``: a deterministic, coordination-free split of the states or rows;
* ``coverage`` -- what a check covered: exhaustive, sampled, capped or weakened, per model.
"""
