"""VM backends (host), and the job share the guest agent reads.

* ``qemu`` -- QEMU argv, virtiofsd, run_vm;
* ``cmdline`` -- the guest kernel command line;
* ``console`` -- how a run ended, read from the console;
* ``accel`` -- KVM or TCG: the local probe and the verdict cache;
* ``libvirt`` -- the libvirt backend and its remote KVM probe;
* ``remote`` -- a remote libvirt host over ssh: shipping by hash, mirroring its files;
* ``libvirt_xml`` -- VmSpec -> domain XML;
* ``guestjob`` -- typed, versioned jobs for the guest agent;
* ``agentboot`` -- how the guest agent starts fast (bytecode from the host, no ``site``);
* ``qmp`` -- a minimal QMP client (saving a VM template: vmstart/template.py)."""
