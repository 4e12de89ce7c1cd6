"""What recovery read (core/judging/recoveryread.py): strace's text read into the files a checker opened, in
the order first opened, with their sizes before it ran, the bytes read and failed opens -- with
``-y`` paths and without them (descriptors followed through dup, close, fork and exec), several
processes, split calls, relative and absolute names, paths outside the mounts left out -- and the
sentence that says them."""

from __future__ import annotations

import pytest

from powercut.core.judging.recoveryread import (
    Accesses,
    ReadFile,
    call_of,
    parse,
    rank_paths,
    read_paths,
    relative,
    strace_args,
    words,
)

M = "/run/powercut/mnt"


def by_path(reads: tuple[ReadFile, ...]) -> dict[str, ReadFile]:
    return {r.path: r for r in reads}


# -- the arguments and the names ------------------------------------------------------------------------
def test_strace_args() -> None:
    args = strace_args("/tmp/t.txt")
    assert args[:4] == ("-f", "-y", "-qq", "-ttt") and args[-3:] == ("-o", "/tmp/t.txt", "--")
    assert "--seccomp-bpf" in args and "--seccomp-bpf" not in strace_args(
        "/tmp/t.txt", seccomp=False
    )
    trace = next(a for a in args if a.startswith("trace="))
    assert trace.startswith("trace=") and {
        "openat",
        "read",
        "close",
        "dup2",
        "mmap",
        "execve",
        "?openat2",
    } <= set(trace[len("trace=") :].split(","))
    assert args[args.index("-s") + 1] == "0"


def test_relative_names() -> None:
    assert relative(f"{M}/CURRENT", [M]) == "CURRENT"
    assert relative(M, [M]) == "." and relative(M + "/", [M + "/"]) == "."
    assert relative(f"{M}/db/../db/x", [M]) == "db/x"
    assert relative(f"{M}2/x", [M]) is None and relative("/usr/lib/libc.so.6", [M]) is None
    assert relative("CURRENT", [M]) is None  # never a relative path: a pipe:[...] or anon_inode
    nodes = [f"{M}/n0", f"{M}/n1"]
    assert (
        relative(f"{M}/n1/wal/0.log", nodes) == "n1/wal/0.log"
        and relative(f"{M}/n0", nodes) == "n0"
    )
    assert relative(f"{M}/other", nodes) is None
    assert relative("/a/b/c", ["/a", "/a/b"]) == "n1/c"  # the deepest mount holds it


# -- one call -------------------------------------------------------------------------------------------
def test_a_call_and_its_return() -> None:
    c = call_of(7, f'openat(AT_FDCWD</x>, "a, b)", O_RDONLY) = 3<{M}/a, b)>')
    assert (
        c is not None and c.name == "openat" and c.args == ("AT_FDCWD</x>", '"a, b)"', "O_RDONLY")
    )
    assert c.ret == 3 and c.ret_path == f"{M}/a, b)" and c.error == ""
    c = call_of(7, 'openat(AT_FDCWD, "x", O_RDONLY) = -1 ENOENT (No such file or directory)')
    assert c is not None and c.ret == -1 and c.error == "ENOENT" and c.ret_path == ""
    c = call_of(7, "fcntl(3, F_GETFL) = 0x8000 (flags O_RDONLY|O_LARGEFILE)")
    assert c is not None and c.ret == 0x8000 and c.error == ""
    assert call_of(7, "exit_group(0) = ?") is None  # nothing returned
    assert call_of(7, 'openat(AT_FDCWD, "x"') is None and call_of(7, "not a call") is None


# -- -y traces ------------------------------------------------------------------------------------------
LEVELDB = f"""\
4242  1700000000.000001 execve("/usr/bin/db", [...], 0x7ffd /* 5 vars */) = 0
4242  1700000000.000002 openat(AT_FDCWD</root>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
4242  1700000000.000003 mmap(NULL, 2000, PROT_READ, MAP_PRIVATE, 3</etc/ld.so.cache>, 0) = 0x7f00
4242  1700000000.000004 close(3</etc/ld.so.cache>) = 0
4242  1700000000.000005 openat(AT_FDCWD<{M}>, "CURRENT", O_RDONLY) = 3<{M}/CURRENT>
4242  1700000000.000006 read(3<{M}/CURRENT>, ""..., 8192) = 16
4242  1700000000.000007 read(3<{M}/CURRENT>, "", 8192) = 0
4242  1700000000.000008 close(3<{M}/CURRENT>) = 0
4242  1700000000.000009 openat(AT_FDCWD<{M}>, "MANIFEST-000004", O_RDONLY) = 3<{M}/MANIFEST-000004>
4242  1700000000.000010 pread64(3<{M}/MANIFEST-000004>, ""..., 32768, 0) = 0
4242  1700000000.000011 close(3<{M}/MANIFEST-000004>) = 0
4242  1700000000.000012 openat(AT_FDCWD<{M}>, "000005.log", O_RDONLY) = -1 ENOENT (No such file or directory)
4242  1700000000.000013 +++ exited with 2 +++
"""


def test_a_y_trace_in_order_with_sizes_bytes_and_a_failed_open() -> None:
    reads = parse(LEVELDB, [M], {"CURRENT": 16, "MANIFEST-000004": 0, ".": 4096})
    assert reads == (
        ReadFile("CURRENT", 16, 16),
        ReadFile("MANIFEST-000004", 0, 0),
        ReadFile("000005.log", -1, 0, "ENOENT"),
    )
    assert read_paths(reads) == ("CURRENT", "MANIFEST-000004", "000005.log")
    # a lock file recovery truncated and wrote, not a byte read: its rules are tried last
    # (surrealkv 0.21.2 opens db/LOCK before its manifest; the corpus)
    lock = (ReadFile("LOCK", 4, 0, write=True), *reads)
    assert read_paths(lock)[0] == "LOCK"  # the order recovery opened them in
    assert rank_paths(lock) == ("CURRENT", "MANIFEST-000004", "000005.log", "LOCK")
    mapped = (ReadFile("data.mdb", 8192, 0, write=True, mapped=True), *reads)
    assert rank_paths(mapped)[0] == "data.mdb"  # mapped: read through memory, counted as read
    assert words(reads, {"MANIFEST-000004": 1193}) == (
        "recovery read CURRENT (16 bytes), then MANIFEST-000004 (0 of 1,193 bytes present), then tried to open "
        "000005.log: it does not exist, then stopped"
    )


def test_lines_as_an_iterable_and_without_sizes() -> None:
    reads = parse(iter(LEVELDB.splitlines(keepends=True)), [M])
    assert [r.size for r in reads] == [-1, -1, -1] and reads[0].read == 16 and reads[0].created


def test_several_processes_and_split_calls() -> None:
    """-f: lines of several pids interleave; a call another process's line interrupted is put
    together where it completed (its bytes are its completion's)."""
    text = f"""\
100   1.0 openat(AT_FDCWD<{M}>, "a", O_RDONLY) = 3<{M}/a>
100   1.1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 101
101   1.2 openat(AT_FDCWD<{M}>, "b", O_RDONLY <unfinished ...>
100   1.3 read(3<{M}/a>,  <unfinished ...>
101   1.4 <... openat resumed>) = 4<{M}/b>
100   1.5 <... read resumed>""..., 4096) = 10
101   1.6 read(4<{M}/b>, ""..., 4096) = 7
100   1.7 read(3<{M}/a>, ""..., 4096) = 5
101   1.8 --- SIGTERM {{si_signo=SIGTERM, si_code=SI_USER}} ---
101   1.9 +++ killed by SIGTERM +++
"""
    assert parse(text, [M], {"a": 15, "b": 7}) == (ReadFile("a", 15, 15), ReadFile("b", 7, 7))


def test_copies_count_for_their_source_and_a_mapping_makes_the_bytes_unknown() -> None:
    text = f"""\
1 1.0 openat(AT_FDCWD<{M}>, "log", O_RDONLY) = 3<{M}/log>
1 1.1 copy_file_range(3<{M}/log>, NULL, 1</dev/pts/0>, NULL, 9223372035781033984, 0) = 100
1 1.2 sendfile(1</dev/pts/0>, 3<{M}/log>, NULL, 4096) = 20
1 1.3 splice(3<{M}/log>, NULL, 5<pipe:[1]>, NULL, 4096, 0) = 3
1 1.4 copy_file_range(6</other/x>, NULL, 3<{M}/log>, NULL, 50, 0) = 50
1 1.5 openat(AT_FDCWD<{M}>, "sst", O_RDONLY|O_CLOEXEC) = 4<{M}/sst>
1 1.6 read(4<{M}/sst>, ""..., 10) = 10
1 1.7 mmap(NULL, 4096, PROT_READ, MAP_SHARED, 4<{M}/sst>, 0) = 0x7f0000
1 1.8 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f1000
1 1.9 mmap(NULL, 4096, PROT_READ, MAP_SHARED, 4<{M}/other>, 0) = -1 ENODEV (No such device)
"""
    reads = by_path(parse(text, [M], {"log": 200, "sst": 4096}))
    assert reads["log"].read == 123 and not reads["log"].mapped
    assert reads["sst"] == ReadFile("sst", 4096, -1, mapped=True) and "other" not in reads


def test_directories_writes_o_path_and_deleted_files() -> None:
    text = f"""\
1 1.0 openat(AT_FDCWD<{M}>, ".", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 3<{M}>
1 1.1 openat(AT_FDCWD<{M}>, "LOCK", O_RDWR|O_CREAT, 0644) = 4<{M}/LOCK>
1 1.2 openat(AT_FDCWD<{M}>, "LOG", O_WRONLY|O_CREAT|O_APPEND, 0644) = 5<{M}/LOG>
1 1.3 openat(AT_FDCWD<{M}>, "wal", O_PATH|O_CLOEXEC) = 6<{M}/wal>
1 1.4 openat(6<{M}/wal>, "0001", O_RDONLY) = 7<{M}/wal/0001 (deleted)>
1 1.5 read(7<{M}/wal/0001 (deleted)>, ""..., 10) = 4
"""
    reads = parse(text, [M], {".": 4096, "LOCK": 0, "wal": 4096, "wal/0001": 4})
    assert reads == (
        ReadFile(".", 4096, 0, dir=True),
        ReadFile("LOCK", 0, 0, write=True),
        ReadFile("LOG", -1, 0, write=True),
        ReadFile("wal/0001", 4, 4),
    )
    assert words(reads) == (
        "recovery listed the top directory, then opened LOCK for writing (0 bytes), then "
        "created LOG, then read wal/0001 (4 bytes), then stopped"
    )


def test_a_failed_open_then_a_successful_one_is_no_failure() -> None:
    text = f"""\
1 1.0 openat(AT_FDCWD<{M}>, "x", O_RDONLY) = -1 ENOENT (No such file or directory)
1 1.1 openat(AT_FDCWD<{M}>, "x", O_RDWR|O_CREAT|O_EXCL, 0600) = 3<{M}/x>
1 1.2 openat(AT_FDCWD<{M}>, "y", O_RDONLY) = -1 EACCES (Permission denied)
1 1.3 openat(AT_FDCWD<{M}>, "y", O_RDONLY) = -1 EIO (Input/output error)
"""
    reads = parse(text, [M])
    assert reads == (ReadFile("x", -1, 0, write=True), ReadFile("y", -1, 0, "EACCES"))


def test_paths_outside_the_mounts_are_left_out_and_several_mounts_are_named_by_node() -> None:
    nodes = [f"{M}/n0", f"{M}/n1"]
    text = f"""\
1 1.0 openat(AT_FDCWD<{M}/n0>, "/proc/self/maps", O_RDONLY) = 3</proc/1/maps>
1 1.1 read(3</proc/1/maps>, ""..., 4096) = 4096
1 1.2 openat(AT_FDCWD<{M}/n0>, "../n1/member/wal", O_RDONLY) = 4<{M}/n1/member/wal>
1 1.3 openat(AT_FDCWD<{M}/n0>, "../../elsewhere", O_RDONLY) = -1 ENOENT (No such file or directory)
1 1.4 openat(AT_FDCWD<{M}/n0>, "member/snap", O_RDONLY) = 5<{M}/n0/member/snap>
1 1.5 read(4<{M}/n1/member/wal>, ""..., 100) = 100
1 1.6 read(0<pipe:[77]>, ""..., 100) = 100
"""
    reads = parse(text, nodes, {"n1/member/wal": 1000, "n0/member/snap": 10})
    assert reads == (ReadFile("n1/member/wal", 1000, 100), ReadFile("n0/member/snap", 10, 0))
    assert (
        words(reads)
        == "recovery read n1/member/wal (100 of 1,000 bytes), then n0/member/snap (0 of 10 bytes), "
        "then stopped"
    )


# -- traces without -y: descriptors followed --------------------------------------------------------------
def test_descriptors_without_paths_close_and_reuse() -> None:
    """Without -y a read names only its descriptor: it is the file last opened (or duplicated) on
    that number and not closed since."""
    text = f"""\
1 1.0 openat(AT_FDCWD, "a", O_RDONLY) = 3
1 1.1 read(3, ""..., 10) = 10
1 1.2 close(3) = 0
1 1.3 openat(AT_FDCWD, "{M}/b", O_RDONLY) = 3
1 1.4 read(3, ""..., 10) = 7
1 1.5 dup(3) = 4
1 1.6 close(3) = 0
1 1.7 read(4, ""..., 10) = 1
1 1.8 dup2(4, 9) = 9
1 1.9 fcntl(9, F_DUPFD_CLOEXEC, 10) = 10
1 2.0 dup3(10, 11, O_CLOEXEC) = 11
1 2.1 close(4) = 0
1 2.2 read(11, ""..., 10) = 2
1 2.3 close_range(9, 10, 0) = 0
1 2.4 read(9, ""..., 10) = 50
1 2.5 read(10, ""..., 10) = 50
1 2.6 read(11, ""..., 10) = 3
1 2.7 close(11) = 0
1 2.8 read(11, ""..., 10) = 1000
"""
    assert parse(text, [M]) == (ReadFile("a", -1, 10), ReadFile("b", -1, 13))


def test_relative_names_follow_the_working_directory() -> None:
    text = f"""\
1 1.0 open("CURRENT", O_RDONLY) = 3
1 1.1 chdir("db") = 0
1 1.2 openat(AT_FDCWD, "x", O_RDONLY) = 4
1 1.3 openat(AT_FDCWD, "{M}", O_RDONLY|O_DIRECTORY) = 5
1 1.4 fchdir(5) = 0
1 1.5 creat("made", 0644) = 6
1 1.6 openat(4, "y", O_RDONLY) = -1 ENOTDIR (Not a directory)
1 1.7 openat(5, "db/z", O_RDONLY) = 7
1 1.8 chdir("/nowhere") = -1 ENOENT (No such file or directory)
1 1.9 openat(AT_FDCWD, "../up", O_RDONLY) = 8
1 2.0 openat2(AT_FDCWD, "db/two", {{flags=O_RDONLY|O_CLOEXEC, resolve=RESOLVE_BENEATH}}, 24) = 9
1 2.1 read(9, ""..., 10) = 4
"""
    assert read_paths(parse(text, [M])) == (
        "CURRENT",
        "db/x",
        ".",
        "made",
        "db/x/y",
        "db/z",
        "db/two",
    )
    reads = by_path(parse(text, [M]))
    assert reads["db/x/y"].error == "ENOTDIR" and reads["made"].write and reads["db/two"].read == 4
    assert read_paths(parse(text, [M], cwd="/elsewhere"))[:2] == (
        ".",
        "made",
    )  # CURRENT and db/x lie outside


def test_children_copy_the_descriptors_and_clone_files_shares_them() -> None:
    text = f"""\
10 1.0 openat(AT_FDCWD, "{M}/a", O_RDONLY) = 3
10 1.1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x1) = 11
11 1.2 read(3, ""..., 10) = 1
11 1.3 close(3) = 0
10 1.4 read(3, ""..., 10) = 2
10 1.5 clone3({{flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD, exit_signal=0}}, 88) = 12
12 1.6 close(3) = 0
10 1.7 read(3, ""..., 10) = 1000
10 1.8 vfork() = 13
13 1.9 openat(AT_FDCWD, "b", O_RDONLY) = 3
13 2.0 read(3, ""..., 10) = 4
"""
    assert parse(text, [M]) == (ReadFile("a", -1, 3), ReadFile("b", -1, 4))


def test_a_child_whose_lines_come_before_its_clone_keeps_its_descriptors() -> None:
    text = f"""\
10 1.0 openat(AT_FDCWD, "{M}/a", O_RDONLY) = 3
11 1.1 openat(AT_FDCWD, "{M}/b", O_RDONLY) = 4
10 1.2 clone(child_stack=NULL, flags=SIGCHLD) = 11
11 1.3 read(4, ""..., 10) = 5
11 1.4 read(3, ""..., 10) = 6
"""
    assert parse(text, [M]) == (ReadFile("a", -1, 6), ReadFile("b", -1, 5))


def test_exec_closes_the_close_on_exec_descriptors() -> None:
    text = f"""\
20 1.0 openat(AT_FDCWD, "{M}/keep", O_RDONLY) = 3
20 1.1 openat(AT_FDCWD, "{M}/gone", O_RDONLY|O_CLOEXEC) = 4
20 1.2 openat(AT_FDCWD, "{M}/flagged", O_RDONLY) = 5
20 1.3 fcntl(5, F_SETFD, FD_CLOEXEC) = 0
20 1.4 execve("/bin/prog", ["prog"], 0x7ffd /* 3 vars */) = 0
20 1.5 read(3, ""..., 10) = 1
20 1.6 read(4, ""..., 10) = 99
20 1.7 read(5, ""..., 10) = 99
21 1.8 <... execve resumed>) = 0
"""
    assert parse(text, [M]) == (
        ReadFile("keep", -1, 1),
        ReadFile("gone", -1, 0),
        ReadFile("flagged", -1, 0),
    )


def test_without_pids_or_times_and_with_junk() -> None:
    text = f"""\
openat(AT_FDCWD, "{M}/a", O_RDONLY) = 3
1700000000.5 read(3, ""..., 10) = 2
strace: Process 5 attached
???
read(3, ""..., 10 <unfinished ...>
exit_group(0) = ?
"""
    assert parse(text, [M]) == (ReadFile("a", -1, 2),)
    assert parse("", [M]) == ()


# -- the accumulator ----------------------------------------------------------------------------------------
def test_accesses_of_an_in_process_checker_have_unknown_bytes() -> None:
    acc = Accesses((M,), {"a": 5}, counted=False)
    acc.opened(f"{M}/a")
    acc.opened(f"{M}/missing", "ENOENT")
    acc.opened("/usr/lib/python3/os.py")
    acc.mapped(f"{M}/a")
    acc.opened(M, directory=True)
    assert acc.files() == (
        ReadFile("a", 5, -1, mapped=True),
        ReadFile("missing", -1, -1, "ENOENT"),
        ReadFile(".", -1, -1, dir=True),
    )


def test_read_file_json() -> None:
    r = ReadFile("a", 5, 3)
    assert r.to_json() == {"path": "a", "size": 5, "read": 3}
    full = ReadFile("n0/d", -1, -1, "ENOENT", True, True, True)
    assert ReadFile.from_json(full.to_json()) == full and ReadFile.from_json(r.to_json()) == r
    assert ReadFile.from_json({"path": "x"}) == ReadFile("x")


# -- words ----------------------------------------------------------------------------------------------------
def test_words_for_each_kind() -> None:
    assert words(()) == "recovery opened no file under the mount"
    assert words((ReadFile("a", 1, 1),)) == "recovery read a (1 byte), then stopped"
    assert (
        words((ReadFile("a", 4096, 100),)) == "recovery read a (100 of 4,096 bytes), then stopped"
    )
    assert words((ReadFile("a", 10, 30),)) == "recovery read a (10 bytes, 30 read), then stopped"
    assert words((ReadFile("a", 2000, -1),)) == "recovery read a (2,000 bytes), then stopped"
    assert (
        words((ReadFile("a", 2000, -1, mapped=True),))
        == "recovery read a (mapped, 2,000 bytes), then stopped"
    )
    assert (
        words((ReadFile("a", 1000, 100),), {"a": 1193})
        == "recovery read a (1,000 of 1,193 bytes present, 100 read), then stopped"
    )
    assert (
        words((ReadFile("a", 1193, 1193),), {"a": 1193, "b": 5})
        == "recovery read a (1,193 bytes), then stopped"
    )
    assert (
        words((ReadFile("a", -1, 0, write=True),), {"a": 50})
        == "recovery created a (0 of 50 bytes present), then stopped"
    )
    assert words(
        (
            ReadFile("x", -1, 0, "EIO"),
            ReadFile("y", -1, 0, "EXDEV"),
            ReadFile("d", -1, -1, "ENOENT", dir=True),
        )
    ) == (
        "recovery tried to open x: an I/O error (EIO), then y: EXDEV, then d/: it does not exist, then stopped"
    )
    assert (
        words((ReadFile("n0", 4096, 0, dir=True), ReadFile("n0/db", 4096, 0, dir=True)))
        == "recovery listed n0/, then n0/db/, then stopped"
    )


def test_long_lists_keep_the_first_the_notable_and_the_last() -> None:
    reads = tuple(ReadFile(f"f{i}", 10, 10) for i in range(20))
    assert words(reads) == (
        "recovery read f0 (10 bytes), then f1 (10 bytes), then f2 (10 bytes), then f3 (10 bytes), "
        "then ... 15 more, then read f19 (10 bytes), then stopped"
    )
    reads = reads[:8] + (ReadFile("gone", -1, 0, "ENOENT"),) + reads[8:]
    said = words(reads, {"f12": 20})
    assert said == (
        "recovery read f0 (10 bytes), then f1 (10 bytes), then f2 (10 bytes), then f3 (10 bytes), "
        "then ... 4 more, then tried to open gone: it does not exist, then ... 4 more, then read f12 "
        "(10 of 20 bytes present), then ... 6 more, then read f19 (10 bytes), then stopped"
    )
    six = tuple(ReadFile(f"f{i}", 1, 1) for i in range(6))
    assert "more" not in words(six) and words(six).count("f") == 6


@pytest.mark.parametrize("n", [1, 5, 6, 7, 50])
def test_words_always_say_the_last_file(n: int) -> None:
    reads = tuple(ReadFile(f"file{i}", 1, 1) for i in range(n))
    assert f"file{n - 1} (1 byte), then stopped" in words(reads)


def test_a_file_only_looked_up_and_not_found_is_looked_for() -> None:
    """SQLite asks whether app.db-wal exists (access, stat) before it opens it: a lookup that fails is
    recovery looking for the file; one that succeeds and a later open make it an open as usual."""
    text = "\n".join(
        [
            f'9 1.0 openat(AT_FDCWD</>, "{M}/app.db", O_RDWR|O_CLOEXEC) = 3<{M}/app.db>',
            f'9 1.1 access("{M}/app.db-wal", F_OK) = -1 ENOENT (No such file or directory)',
            f'9 1.2 newfstatat(AT_FDCWD</>, "{M}/app.db-journal", 0x7ffd, 0) = -1 ENOENT (No such file or directory)',
            f'9 1.3 stat("{M}/app.db", {{st_mode=S_IFREG|0644, st_size=4096, ...}}) = 0',
            f'9 1.4 stat("{M}/late", 0x1) = -1 ENOENT (No such file or directory)',
            f'9 1.5 openat(AT_FDCWD</>, "{M}/late", O_RDONLY|O_CREAT, 0644) = 4<{M}/late>',
            '9 1.6 statx(AT_FDCWD</>, "/usr/lib/x", 0, STATX_ALL, 0x1) = -1 ENOENT (No such file or directory)',
        ]
    )
    reads = parse(text, [M], {"app.db": 4096})
    assert [r.path for r in reads] == ["app.db", "app.db-wal", "app.db-journal", "late"]
    got = by_path(reads)
    assert got["app.db-wal"] == ReadFile("app.db-wal", -1, 0, "ENOENT", looked=True)
    assert not got["late"].error and not got["late"].looked and got["app.db"].size == 4096
    assert words(reads) == (
        "recovery opened app.db for writing (0 of 4,096 bytes), then looked for app.db-wal: it "
        "does not exist, then app.db-journal: it does not exist, then created late, then stopped"
    )
    assert ReadFile.from_json(got["app.db-wal"].to_json()) == got["app.db-wal"]


def test_only_a_trace_that_counts_bytes_is_complete() -> None:
    from powercut.core.judging.recoveryread import complete

    assert complete((ReadFile("a", 3, 3), ReadFile("b", -1, -1, "ENOENT")))
    assert not complete((ReadFile("a", 3, -1),)) and not complete(())
