"""core/trace/syscalls.py: strace -f -y lines -> operations, and the trace aligned with the log's marks."""

from powercut.core.trace import syscalls as sc

MNT = "/run/powercut/mnt"


def mark_line(pid: int, t: float, text: str) -> str:
    return (
        f"{pid} {t:.6f} ioctl(3</dev/mapper/control>, DM_TARGET_MSG, [{{version=[4, 0, 0], data_size=352, "
        f'data_start=312, name="powercut-rec", flags=0}}, {{sector=0, message="mark {text}"}}] => '
        f'[{{version=[4, 47, 0], data_size=305, name="powercut-rec", flags=DM_ACTIVE_PRESENT_FLAG}}]) = 0'
    )


KV = "\n".join(
    [
        mark_line(268, 1.0, "begin:k0"),
        f'268 1.1 openat(AT_FDCWD<{MNT}>, "store.json.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 5<{MNT}/store.json.tmp>',
        f'268 1.2 write(5<{MNT}/store.json.tmp>, "{{\\"k\\": 0}}", 8) = 8',
        '268 1.3 rename("store.json.tmp", "store.json") = 0',
        mark_line(268, 1.4, "ack:k0"),
    ]
)


def test_parses_calls_paths_and_marks():
    tr = sc.parse(KV, "/")
    kinds = [(o.kind, o.path, o.path2, o.nbytes) for o in tr.ops]
    assert kinds == [
        ("mark", "", "", 0),
        ("open", f"{MNT}/store.json.tmp", "", 0),
        ("write", f"{MNT}/store.json.tmp", "", 8),
        # the relative rename is resolved against the cwd learnt from AT_FDCWD<...>
        ("rename", f"{MNT}/store.json.tmp", f"{MNT}/store.json", 0),
        ("mark", "", "", 0),
    ]
    assert [o.text for o in tr.marks()] == ["begin:k0", "ack:k0"]
    assert tr.ops[1].flags[:3] == ("O_WRONLY", "O_CREAT", "O_TRUNC")
    assert tr.unparsed == 0 and tr.lines == 5


def test_unfinished_calls_are_placed_where_they_complete():
    text = "\n".join(
        [
            f"10 1.0 fsync(4<{MNT}/wal> <unfinished ...>",
            mark_line(11, 1.1, "ack:1"),
            "10 1.2 <... fsync resumed>) = 0",
        ]
    )
    tr = sc.parse(text)
    assert [o.kind for o in tr.ops] == ["mark", "fsync"]
    assert tr.ops[1].path == f"{MNT}/wal" and tr.ops[1].pid == 10 and tr.ops[1].line == 3


def test_errors_and_errno_names():
    text = (
        f"7 1.0 fsync(5<{MNT}/db>) = -1 EIO (Input/output error)\n7 1.1 fdatasync(5<{MNT}/db>) = 0"
    )
    tr = sc.parse(text)
    assert tr.ops[0].error == "EIO" and not tr.ops[0].ok
    assert tr.ops[1].ok


def test_escaped_paths_and_strings():
    assert sc.fd_path(r"3</a/b\x3ec d>") == "/a/b>c d"
    assert sc.unquote(r'"a\"b\\c\n"') == 'a"b\\c\n'
    assert sc.unquote('"abc"...') == "abc"
    assert sc.split_args('5</x, y>, "a, b", [{x=1, y=2}], 3') == [
        "5</x, y>",
        '"a, b"',
        "[{x=1, y=2}]",
        "3",
    ]


def test_at_calls_unlink_mkdir_link_and_chdir():
    text = "\n".join(
        [
            f'1 1.0 mkdirat(AT_FDCWD<{MNT}>, "d", 0777) = 0',
            f'1 1.1 unlinkat(AT_FDCWD<{MNT}>, "old", 0) = 0',
            f'1 1.2 unlinkat(AT_FDCWD<{MNT}>, "gone", AT_REMOVEDIR) = 0',
            f'1 1.3 linkat(AT_FDCWD<{MNT}>, "a", 3<{MNT}/d>, "b", 0) = 0',
            '1 1.4 chdir("d") = 0',
            '1 1.5 rename("x", "/abs/y") = 0',
            "1 1.6 sync() = 0",
            f"1 1.7 ftruncate(5<{MNT}/d/x>, 4096) = 0",
            f"1 1.8 fallocate(5<{MNT}/d/x>, 0, 0, 8192) = 0",
            f'1 1.9 pwrite64(5<{MNT}/d/x>, "abc", 3, 100) = 3',
            f'1 2.0 writev(5<{MNT}/d/x>, [{{iov_base="ab", iov_len=2}}, {{iov_base="c", iov_len=1}}], 2) = 3',
            f"1 2.1 sync_file_range(5<{MNT}/d/x>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0",
        ]
    )
    ops = sc.parse(text).ops
    assert [(o.kind, o.path, o.path2) for o in ops[:4]] == [
        ("mkdir", f"{MNT}/d", ""),
        ("unlink", f"{MNT}/old", ""),
        ("rmdir", f"{MNT}/gone", ""),
        ("link", f"{MNT}/a", f"{MNT}/d/b"),
    ]
    assert (ops[4].kind, ops[4].path) == ("chdir", f"{MNT}/d")
    assert (ops[5].path, ops[5].path2) == (f"{MNT}/d/x", "/abs/y")
    assert [o.kind for o in ops[6:]] == [
        "sync",
        "truncate",
        "allocate",
        "write",
        "write",
        "sync_file_range",
    ]
    assert ops[7].nbytes == 4096 and ops[9].nbytes == 3 and ops[10].nbytes == 3


def test_what_the_trace_cannot_see_is_named():
    text = "\n".join(
        [
            f"1 1.0 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 5<{MNT}/m>, 0) = 0x7f0000000000",
            "1 1.1 msync(0x7f0000000000, 4096, MS_SYNC) = 0",
            "1 1.2 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 6</usr/lib/x.so>, 0) = 0x7f0000001000",
            "1 1.3 io_uring_setup(8, 0x7ffc) = 3<anon_inode:[io_uring]>",
        ]
    )
    tr = sc.parse(text)
    assert [o.kind for o in tr.ops] == ["mmap-shared", "msync", "io_uring"]
    assert tr.ops[1].path == f"{MNT}/m" and "MS_SYNC" in tr.ops[1].flags
    assert (
        len(tr.blind) == 2
        and any("shared mapping" in b for b in tr.blind)
        and any("io_uring" in b for b in tr.blind)
    )


def test_an_msync_of_any_page_of_a_mapping_names_its_file():
    text = "\n".join(
        [
            f"1 1.0 mmap(NULL, 65536, PROT_READ|PROT_WRITE, MAP_SHARED, 5<{MNT}/log>, 0) = 0x7f0000000000",
            f"1 1.1 mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_SHARED, 6<{MNT}/mem>, 0) = 0x7f0000010000",
            "1 1.2 msync(0x7f0000003000, 4096, MS_SYNC) = 0",
            "1 1.3 msync(0x7f0000011000, 4096, MS_ASYNC) = 0",
            "1 1.4 msync(0x7f0000012000, 4096, MS_SYNC) = 0",
        ]
    )
    assert [o.path for o in sc.parse(text).ops[2:]] == [f"{MNT}/log", f"{MNT}/mem", ""]


def test_garbage_lines_are_counted_not_fatal():
    tr = sc.parse(
        "not strace\n1 1.0 write(\n1 1.1 <... fsync resumed>) = 0\n1 1.2 +++ exited with 0 +++\n"
    )
    assert tr.ops == [] and tr.unparsed == 3


def test_a_process_that_exits_inside_a_call():
    tr = sc.parse(f'1 1.0 write(5<{MNT}/f>, "x", 1) = ?')
    assert [o.kind for o in tr.ops] == ["write"] and tr.ops[0].nbytes == 0


def test_align_matches_the_kth_mark_of_a_text():
    tr = sc.parse(
        "\n".join(
            [
                mark_line(1, 1.0, "powercut-order-begin"),
                mark_line(1, 1.1, "ack:1"),
                mark_line(1, 1.2, "powercut-order-begin"),
                mark_line(1, 1.3, "ack:1"),
            ]
        )
    )
    log = [
        (101, "mkfs"),
        (105, "powercut-order-begin"),
        (110, "ack:1"),
        (120, "powercut-order-begin"),
        (130, "ack:1"),
    ]
    assert sc.align(tr, log) == {0: 105, 1: 110, 2: 120, 3: 130}
    assert sc.align(tr, log[:3]) == {0: 105, 1: 110}  # a mark the log does not have stays unaligned


def test_split_args_keeps_escaped_quotes_commas_and_unclosed_runs_whole() -> None:
    assert sc.split_args('3</a,b\\>c>, "x\\"y, z"..., 512') == [
        "3</a,b\\>c>",
        '"x\\"y, z"...',
        "512",
    ]
    assert sc.split_args('5</d>, "never closed, at all') == ["5</d>", '"never closed, at all']
    assert sc.split_args('"\\\\", {a, b}, [1, 2]') == ['"\\\\"', "{a, b}", "[1, 2]"]
