"""Causes and their proof (pure): the durability rule a failing state's program broke, from its
trace, and the counterfactual states that prove it.

* ``causes`` -- the durability rule a failing state's program broke, from its trace;
* ``rules`` -- the cause rules as a registry: one module per rule (its check, sentence, counterfactual plan,
  advice), listed in rank order, and the causes that are no broken rule (recovery-bug, disk-lied, ...);
* ``causewords`` -- the words every cause shares: evidence lines, a held sync's suffix;
* ``counterfactual`` -- a rule's plan made a what-if state, and the kill-equivalent state (a recovery bug's proof);
* ``nodetrace`` -- a node's part of a cluster's trace (its marks, its files) and which nodes a cluster cause names.
"""
