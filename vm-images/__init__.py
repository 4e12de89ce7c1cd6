"""Guest images: a distro kernel plus an initramfs (busybox, the modules powercut needs, init.sh)."""
