"""powercut command line (host): ``main`` dispatches to the commands and prints every error as one line on stderr, never a traceback.

Modules: ``__main__`` (``python -m powercut.cli``), parser (the grammar), argtypes (its value types), record (run, record, image), check (check, repro, matrix, corpus, merge), bench (bench, report), inspect (log, states, replay, workloads), setup (setup, doctor).  The cli is the one place that prints.

Each command imports what it needs when it runs (imports inside its function, the one measured
exception to imports at module top): ``import powercut.cli`` takes 108 ms, against 230 ms with every
command's modules imported (python alone: 33 ms; the least of 15 runs each, this 2-core machine,
2026-11-27), and every ``--help``, every one-line error and every completion pays it."""

from __future__ import annotations

import logging
import os
import sys

from powercut.cli.bench import cmd_bench, cmd_report
from powercut.cli.check import (
    cmd_check,
    cmd_corpus,
    cmd_demo,
    cmd_matrix,
    cmd_merge,
    cmd_repro,
)
from powercut.cli.inspect import cmd_log, cmd_replay, cmd_states, cmd_workloads
from powercut.cli.parser import build_parser
from powercut.cli.record import cmd_image, cmd_record, cmd_run
from powercut.cli.setup import cmd_doctor, cmd_setup
from powercut.errors import OptionError, PowercutError
from powercut.linux import interrupt

log = logging.getLogger("powercut")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    try:
        with interrupt.handled():
            return COMMANDS[args.command](args)
    except OptionError as e:  # a bad option value, told after parsing: exit 2 like the parser's
        print(
            f"powercut: error: {e.one_line()} (see 'powercut {args.command} --help')",
            file=sys.stderr,
        )
        return 2
    except PowercutError as e:
        print(f"powercut: error: {e.one_line()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        again = (
            "; the verdicts so far are kept: run the same command with --resume to finish"
            if args.command in ("check", "run", "matrix")
            else ""
        )
        print(
            f"powercut: {interrupt.note(e)}; stopped every VM and cleaned up{again}",
            file=sys.stderr,
        )
        return interrupt.exit_status(e)
    except BrokenPipeError:  # output piped into head & co. (before OSError, its base class)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # an unwritable or missing path, a full disk, a permission: one line
        print(f"powercut: error: {os_error(e)}", file=sys.stderr)
        return 1


def os_error(e: OSError) -> str:
    what = e.strerror or type(e).__name__
    if e.errno in (28, 122):
        what = "no space left on the device"
    where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f)
    hint = " (this needs root)" if e.errno in (1, 13) and os.geteuid() != 0 else ""
    return f"{where}: {what}{hint}" if where else f"{what}{hint}"


COMMANDS = {
    "run": cmd_run,
    "check": cmd_check,
    "record": cmd_record,
    "image": cmd_image,
    "log": cmd_log,
    "states": cmd_states,
    "matrix": cmd_matrix,
    "corpus": cmd_corpus,
    "repro": cmd_repro,
    "report": cmd_report,
    "replay": cmd_replay,
    "workloads": cmd_workloads,
    "bench": cmd_bench,
    "merge": cmd_merge,
    "demo": cmd_demo,
    "setup": cmd_setup,
    "doctor": cmd_doctor,
}

if __name__ == "__main__":
    sys.exit(main())
