"""How a VM starts fast (host): from the guest image booted once and saved, instead of a boot.

* ``template`` -- checker and recording VMs restored from a saved template VM (built and cached by
  key; a failed restore boots)."""
