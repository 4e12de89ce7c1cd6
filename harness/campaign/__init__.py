"""Runs that stitch the stages together (host).

* ``run`` -- the check campaign (record, check, confirm, triage);
* ``cluster`` -- a cluster recording's check: the nodes' logs verified, cluster states chosen, sharded and judged
  (checker VMs or host), resumable; its shards merged;
* ``clustertriage`` -- a cluster check's failures grouped, confirmed, minimized per node, blamed, bundled;
* ``outdir`` -- a check's output directory: where it is, made ready, refused when another run holds it;
* ``journal`` -- the verdict journal, the resume point;
* ``ledger`` -- the states that passed in earlier runs of a log (``--ledger``), skipped in the next;
* ``merge`` -- the shards of one campaign joined into its outputs;
* ``matrix`` -- running the verdict matrix and timing its rows;
* ``schedules`` -- the same workload recorded under several disk latencies and repeats, each judged,
  and what differs between them (``run --disk-latency none,hdd --repeat N``);
* ``demo`` -- the main job: the named workloads durable and broken, checked, timed, one page;
* ``crashtest`` -- one crash test of a user's program (record + check + the words for a failure), the
  pytest plugin's engine;
* ``ghsummary`` -- the GitHub Action's shard and merge steps (``action.yml``): a pytest shard's
  ``shard.json``, the shards merged into one JUnit and test tree; ``ghreport`` -- that merge as the
  job summary and ``report.html``;
* ``doctor`` -- can a crash test run here, what is missing and its fix (``powercut doctor``); installing
  and building it (``powercut setup``)."""
