"""The recording's log and its order (pure): what dm-log-writes wrote and what the marks in it mean.

* ``dmlog`` -- the dm-log-writes log reader (superblock, entries, marks, scan of an unclean log);
* ``dmlog_writer`` -- writes logs in the same format (tests, bundles, synthetic logs);
* ``marknames`` -- the marks' words (ack:, begin:, the ordering marks), light enough for the recorded program;
* ``markorder`` -- ordered marks: the harness's ordering flushes, which models treat as no barrier;
* ``faultwindows`` -- injected I/O errors as the log records them: fault windows, commits acked after one.
"""
