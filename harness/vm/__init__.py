"""VM backends: QEMU directly (qemu.py) or through libvirt (libvirt.py), one VmSpec for both."""
