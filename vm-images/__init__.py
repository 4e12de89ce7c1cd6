"""Guest images: a distro kernel plus an initramfs (busybox, the modules powercut needs, init.sh).

* ``build`` -- build and cache the default image;
* ``cpio`` -- the newc cpio writer;
* ``runtime`` -- the guest agent's runtime files as a cpio part (a VM template's root: vmstart/)."""
