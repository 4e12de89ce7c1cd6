"""What people read.

* ``summary`` -- summary.json, JUnit, the console table and repro lines;
* ``matrix`` -- the verdict matrix: rows, cells, tables;
* ``corpus`` -- the corpus of published durability bugs: its entries, what a release's run found,
  whether the entry's expectation held, the table docs/corpus.md shows;
* ``bench`` -- bench tables and plots;
* ``seeds`` -- the seed documents' figures;
* ``cost`` -- the durability-vs-cost report;
* ``html`` -- the self-contained report.html of a check (Jinja2 template in ``templates/``);
* ``timeline`` -- the log as an inline SVG timeline with the failing cuts;
* ``nodestimeline`` -- a cluster's node logs as one band per node, lined up at the shared key
  marks, each failing cluster state drawn through its cut on every node."""
