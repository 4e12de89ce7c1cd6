"""Operating-system adapters (host and guest): standard library and ``powercut.errors`` only.

* ``process`` -- every subprocess: argv lists, timeouts, process groups;
* ``interrupt`` -- signals become Interrupted, child groups are killed;
* ``dm`` -- device-mapper by ioctl;
* ``loopdev`` -- loop devices by ioctl;
* ``mounts`` -- mount(2)/umount2 and the kernel's log;
* ``imageio`` -- sparse image files, copy and reflink;
* ``filesystems`` -- the filesystem table (mkfs, fsck, mount options, modules);
* ``blockdev`` -- find a disk by serial, its size;
* ``badsector`` -- unreadable sectors at check time: a dm layer with ``error`` segments;
* ``jsonlines`` -- the fsync'd JSON-lines file;
* ``environ`` -- every ``POWERCUT_*`` environment variable, named and read in one place;
* ``packages`` -- the Debian packages powercut needs (the one list) and apt-get for the missing ones."""
