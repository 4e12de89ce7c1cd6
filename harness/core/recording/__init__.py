"""What a recording is asked to do (pure): the settings that shape the disk and the program's calls
while it records, parsed and checked before any VM boots.

* ``latency`` -- the recording's disk latency (none, presets, explicit) and the dm-delay values that give it;
* ``nodefaults`` -- the recording's fault plan per node (``--fault 1=PLAN``): parsed, fitted to the disks;
* ``syncdelay`` -- ``--delay-sync GLOB=TIME``: the rules that hold one file's syncs, the supervisor's log read;
* ``races`` -- the files a race exploration holds, from the trace: synced before an ack, how long.
"""
