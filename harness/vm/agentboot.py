"""How the guest agent starts (host side): fast, because under TCG every line of Python the agent
runs before its first state costs 10-50x what it costs here.

Measured in a TCG checker VM (Linux 6.1, Python 3.11, host root over 9p), the agent used to spend
about 3.3 s before its job began: ``site`` (the .pth files: an editable install's import finder,
setuptools' distutils shim) about 0.6 s, and compiling every powercut module from source on every
boot, because nothing had written their bytecode (``PYTHONDONTWRITEBYTECODE`` on the host, a
read-only root in the guest).  So:

* :func:`compile_package` writes powercut's bytecode on the host once per process (py_compile
  honours no environment flag; a read-only install is left alone: it has its bytecode from pip).
* The guest runs ``python -S boot.py``: no ``site``; ``boot.py`` (:func:`boot_script`) puts on
  ``sys.path`` what ``site`` would have added there (asked of this very Python once, with the
  guest's environment, :func:`site_paths`) and binds the package ``powercut`` to its directory, as
  the editable finder would.  Code run by .pth files is what this skips; a job that may need it (a
  checker function of the user's, a record or bench job running the user's programs) gets the full
  ``site`` (``full_site=True``), and so does any guest where the package directory is not there."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading

import powercut
from powercut.errors import PowercutError
from powercut.linux import process

log = logging.getLogger(__name__)

_compiled: set[str] = set()
_lock = threading.Lock()


# powercut's packages that may live outside its own directory (pyproject.toml's package-dir: in a
# checkout, checkers/, workloads/ and vm-images/ beside harness/)
OUTSIDE = ("powercut.checkers", "powercut.workloads", "powercut.images")


def package_dirs() -> dict[str, str]:
    """Package name -> its directory, for ``powercut`` and each package of OUTSIDE."""
    import importlib

    out = {"powercut": os.path.dirname(os.path.realpath(powercut.__file__))}
    for name in OUTSIDE:
        out[name] = os.path.realpath(list(importlib.import_module(name).__path__)[0])
    return out


def compile_package() -> None:
    """powercut's bytecode next to its sources (``__pycache__``), once per process; never an error."""
    with _lock:
        for d in dict.fromkeys(package_dirs().values()):
            if d in _compiled:
                continue
            _compiled.add(d)
            try:
                if os.access(d, os.W_OK):
                    import compileall  # host only (the guest imports this module for nothing else)

                    compileall.compile_dir(d, quiet=2, workers=1)
            except (
                Exception
            ) as e:  # bytecode is an optimization: the guest compiles what is missing
                log.debug("could not compile %s: %s", d, e)


@functools.cache
def site_paths(env_path: str) -> tuple[str, ...]:
    """This Python's sys.path in the guest's environment (``env -i`` with the guest's PATH), site's
    additions included (site-packages, what .pth files add; boot.py adds only what ``-S`` left out).
    Empty if it cannot be asked."""
    probe = "import json, sys; print(json.dumps(sys.path))"
    try:
        full = json.loads(
            process.run(
                [sys.executable, "-c", probe],
                env={"PATH": env_path, "HOME": "/tmp"},
                timeout=60,
                cwd="/",
            ).stdout
        )
    except (PowercutError, ValueError) as e:
        log.debug("cannot ask %s for its site paths: %s", sys.executable, e)
        return ()
    return tuple(p for p in full if p)


AGENT = "from powercut.guest.__main__ import main\n\nsys.exit(main(sys.argv[1:]))\n"
TEMPLATE_AGENT = "from powercut.guest.template import main\n\nsys.exit(main())\n"


def workload_entry(group: str, name: str, ref: str) -> str:
    """The lines of a built-in workload's ``workload.py`` (a recording's workload, started without
    site like the agent): the workload loaded from where the host found it (no scan of every
    installed distribution's entry points), then run as ``python -m powercut.workload`` runs it."""
    return (
        f"from powercut import registry\n\nregistry.preset({group!r}, {name!r}, {ref!r})\n"
        "from powercut.workload import main\n\nsys.exit(main(sys.argv[1:]))\n"
    )


def start_config(env: dict[str, str], *, full_site: bool) -> dict[str, object]:
    """``start.json``: how a job's agent starts (its environment, ``site`` or the site paths), for
    the template agent of a restored checker VM, which started before the job (guest/template.py)."""
    return {
        "env": env,
        "full_site": bool(full_site or not site_paths(env["PATH"])),
        "site_paths": list(site_paths(env["PATH"])),
    }


def boot_script(env_path: str, *, full_site: bool, entry: str = AGENT) -> str:
    """``boot.py``: what the guest's ``python -S`` runs (its argv: the job file); ``entry``: the
    lines that run once powercut is importable (the agent, or the template agent)."""
    compile_package()
    paths = () if full_site else site_paths(env_path)
    return (
        f'''# written by powercut (vm/agentboot.py): the guest agent, started without site
import importlib.util
import os
import sys

PACKAGES = {package_dirs()!r}
SITE_PATHS = {list(paths)!r}
FULL_SITE = {bool(full_site or not paths)!r}


class Packages:
    """powercut's packages at their directories on the host (as its editable finder maps them)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        d = PACKAGES.get(name)
        if d is None:
            return None
        return importlib.util.spec_from_file_location(name, os.path.join(d, "__init__.py"),
                                                      submodule_search_locations=[d])


def bind():
    if FULL_SITE or not all(os.path.isfile(os.path.join(d, "__init__.py")) for d in PACKAGES.values()):
        return False
    sys.path.extend(p for p in SITE_PATHS if p not in sys.path)
    sys.meta_path.insert(0, Packages)
    return True


if not bind():
    import site
    site.main()
'''
        + entry
    )
