"""The crash models as a registry (pure; host and guest): one module per model family, each declaring
its models (``base.CrashModel``: name, honest or lie, torn unit, how it enumerates states, how it
rebuilds one from an id, what it refuses), listed once in ``registry``.  Ids (core/states/stateid.py),
selection, shrink, refusals and the docs read the registry.

* ``registry`` -- the one list of models, in order; MODELS, HONEST_MODELS, LIE_MODELS, TORN_MODELS,
  UNIT_BYTES and PREFIX_MODELS derived from it;
* ``base`` -- ``CrashModel`` (what a model declares and does) and ``Bounds`` (an enumeration's limits);
* ``tables`` -- ``SpaceTables``: the prefix tables of one log every model reads (core/states/models.CrashSpace adds the dispatch);
* ``target`` -- ``LieTarget``: the program's blocks the lying-disk models aim at (the recording's file map);
* ``batch`` -- one cut's states, without a state equivalent to an earlier one (write-cache, torn);
* ``prefix`` -- no-cache and flush: prefixes of the log;
* ``writecache`` -- write-cache: subsets of a flush window;
* ``torn`` -- torn and torn-4k: a write persisted in part, alone or with a write-cache subset;
* ``lostwrite``, ``misdirected``, ``corruptsector``, ``unreadable`` -- the per-write lying-disk models (core/crashmodels/lies.py);
* ``flushignored`` -- flush-ignored: a disk that acked a FLUSH without emptying its cache;
* ``lies`` -- what the lying-disk models share: commit windows, seeded targets, the lie replay applies;
* ``whatif`` -- what-if: a counterfactual state (a cause's proof), the writes it leaves out named, not enumerated.
"""
