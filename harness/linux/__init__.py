"""Operating-system adapters (host and guest): standard library and ``powercut.errors`` only.

* ``process`` -- every subprocess: argv lists, timeouts, process groups;
* ``interrupt`` -- signals become Interrupted, child groups are killed;
* ``dm`` -- device-mapper by ioctl;
* ``loopdev`` -- loop devices by ioctl;
* ``loopcache`` -- a loop device's write cache, who holds one off, and its return when a run dies;
* ``rundir`` -- ``$POWERCUT_RUN_DIR``, where live runs keep what the whole host shares;
* ``runlock`` -- host-wide locks of live runs (one per output directory), dropped when a run dies;
* ``mounts`` -- mount(2)/umount2 and the kernel's log;
* ``imageio`` -- sparse image files, copy and reflink;
* ``filesystems`` -- the filesystem table (mkfs, fsck, mount options, modules);
* ``blockdev`` -- find a disk by serial, its size;
* ``blockreads`` -- the sectors a block device was asked to read (tracefs block_rq_issue);
* ``badsector`` -- unreadable sectors at check time: a dm layer with ``error`` segments;
* ``jsonlines`` -- the fsync'd JSON-lines file;
* ``environ`` -- every ``POWERCUT_*`` environment variable, named and read in one place;
* ``packages`` -- the Debian packages powercut needs (the one list) and apt-get for the missing ones."""
