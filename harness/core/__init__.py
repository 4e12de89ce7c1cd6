"""Pure core (host and guest): standard library and ``powercut.errors`` only, one subpackage per
domain, each lower one imported by the ones after it (tests/unit/test_imports.py keeps the order):

* ``log`` -- the recording's log and its order: the dm-log-writes format, marks, ordering flushes, fault windows;
* ``trace`` -- the program's system calls: the strace trace as operations, what it says at an ack or a cut;
* ``recording`` -- what a recording is asked to do: disk latency, faults per node, held syncs, races to explore;
* ``crashmodels`` -- the crash models, one module per family, listed once in ``crashmodels.registry``;
* ``states`` -- crash states: ids, the states of a log, distinct images, selection, coverage;
* ``judging`` -- the verdict vocabulary, what the judge saw, confirmation and minimizing;
* ``cause`` -- the rule a failing state's program broke, and its proof by counterfactual.
"""
