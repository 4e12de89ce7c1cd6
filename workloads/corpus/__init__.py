"""The corpus of published durability bugs (``powercut corpus``, docs/corpus.md): ``corpus.toml``
lists the entries, one folder per program holds its driver.

An entry is one published bug of a real storage program: the release that has it (``buggy``), the
release that fixed it (``fixed``), where it was reported, what kind of bug it is, how powercut
records and judges it, and what each release is expected to give.

A program's folder (``<program>/``) holds:

- ``build.sh VERSION OUT``: builds the driver against the program's pinned release VERSION into the
  folder OUT (``/var/cache/powercut/corpus/<program>-<VERSION>``): an executable ``OUT/driver``.  It
  runs once on the host, with the network (the Go module proxy, crates.io, Maven Central); the
  guest runs the host's root read-only, so the recording and the checks use the cached build and no
  network.  It is run again when the folder's files change (a stamp of their digest in OUT).
- the driver's sources.  ``driver run`` is the workload: it runs in the guest with its cwd on the
  filesystem under test, reads ``$POWERCUT_PARAMS`` (JSON), uses the program as its documentation
  tells a user to, and marks each commit the program acknowledged with ``powercut-mark ack:KEY``
  (``begin:KEY`` before it).  ``driver check`` is the checker: it runs with its cwd on a recovered
  crash state, reads the checker input (JSON on stdin: ``mount``, ``acked``, ``begun``, ``params``,
  ``state``), opens the store with the same release (its own recovery), and prints one JSON line
  ``{"verdict": ..., "reasons": [...]}`` (docs/checking.md, the checker protocol).  A driver knows
  what a user of the program knows, never the bug's internals."""
