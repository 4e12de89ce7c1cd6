"""Runs that stitch the stages together (host).

* ``run`` -- the check campaign of one disk or N (select, judge, triage, summarize);
* ``latecleared`` -- the late flushes each disk's trace clears from its coverage notes (core/trace/latetrace);
* ``phases`` -- a campaign's phases after its selection, for one disk or N: judge, group, minimize, confirm,
  explain, bundle;
* ``retries`` -- more judgments of a state whose confirmation disagreed (N > 1 disks: nondeterministic recovery);
* ``outdir`` -- a check's output directory: where it is, made ready, refused when another run holds it;
* ``journal`` -- the verdict journal, the resume point;
* ``ledger`` -- the states that passed in earlier runs of a log (``--ledger``), skipped in the next;
* ``merge`` -- the shards of one campaign joined into its outputs;
* ``matrix`` -- running the verdict matrix and timing its rows;
* ``corpus`` -- the corpus of published durability bugs: each release built once into a cache,
  recorded and judged through its driver (``powercut corpus``);
* ``schedules`` -- the same workload recorded under several disk latencies and repeats, each judged,
  and what differs between them (``run --disk-latency none,hdd --repeat N``);
* ``explore`` -- races explored: one schedule per file the trace synced before an ack, only its syncs
  held (``run --explore-races``);
* ``demo`` -- the main job: the named workloads durable and broken, checked, timed, one page;
* ``crashtest`` -- one crash test of a user's program (record + check + the words for a failure), the
  pytest plugin's engine;
* ``ghsummary`` -- the GitHub Action's shard and merge steps (``action.yml``): a pytest shard's
  ``shard.json``, the shards merged into one JUnit and test tree; ``ghreport`` -- that merge as the
  job summary and ``report.html``;
* ``doctor`` -- can a crash test run here, what is missing and its fix (``powercut doctor``); installing
  and building it (``powercut setup``)."""
