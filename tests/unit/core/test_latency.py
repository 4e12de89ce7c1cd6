"""core/recording/latency.py: the settings' grammar and the dm-delay values that guarantee a lower bound."""

from __future__ import annotations

import pytest

from powercut.core.recording.latency import (
    FALLBACK_HZ,
    KNOWN_HZ,
    NONE,
    PRESETS,
    DiskLatency,
    LatencyError,
    NodesLatency,
    below_tick,
    jiffies,
    layer_phrase,
    parse_schedules,
    recorded_phrase,
    snap_hz,
    table_ms,
)


def test_none_and_the_presets_read_back_as_they_are_written():
    assert (
        DiskLatency.parse("none") == DiskLatency()
        and DiskLatency().none
        and str(DiskLatency()) == NONE
    )
    for name, p in PRESETS.items():
        lat = DiskLatency.parse(name)
        assert (lat.write_ms, lat.flush_ms, lat.name) == (p.write_ms, p.flush_ms, name)
        assert str(lat) == name and DiskLatency.parse(str(lat)) == lat
    hdd = DiskLatency.parse("hdd")
    assert (
        hdd.flush_ms > DiskLatency.parse("sata-ssd").flush_ms > DiskLatency.parse("nvme").flush_ms
    )


@pytest.mark.parametrize(
    "text,write,flush",
    [
        ("write=0.1ms,flush=8ms", 0.1, 8.0),
        ("flush=8", 0.0, 8.0),
        ("write=250us", 0.25, 0.0),
        ("flush=0.01s, write=2ms", 2.0, 10.0),
        ("write=0,flush=0", 0.0, 0.0),
    ],
)
def test_explicit_figures_with_units(text, write, flush):
    lat = DiskLatency.parse(text)
    assert (lat.write_ms, lat.flush_ms) == (write, flush)
    assert DiskLatency.parse(str(lat)) == lat
    assert lat.none == (not write and not flush)


@pytest.mark.parametrize(
    "text,says",
    [
        ("floppy", "unknown disk latency 'floppy'"),
        ("write=3x", "write='3x'"),
        ("read=1ms", "'read=1ms'"),
        ("flush=1ms,flush=2ms", "flush given twice"),
        ("flush=20s", "at most 10 s"),
        ("write=-1ms", "want a number"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(text, says):
    with pytest.raises(LatencyError) as e:
        DiskLatency.parse(text)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("hz", KNOWN_HZ)
def test_the_dm_delay_value_waits_at_least_the_stated_latency_and_no_tick_more_than_it_must(hz):
    tick = 1000 / hz
    for stated in (0.001, 0.02, 0.05, 1, 2, 3.9, 4, 4.01, 8, 8.3, 10, 12, 16.5, 100):
        ms = table_ms(stated, hz)
        if (
            stated < tick
        ):  # below one tick: not delayed (rounding up would make it a far slower disk)
            assert ms == 0 and below_tick(stated, hz), (stated, hz, ms)
            continue
        # a bio queued during tick j leaves at tick j + jiffies(ms): it waits more than jiffies(ms) - 1 ticks
        assert (jiffies(ms, hz) - 1) * tick >= stated - 1e-9, (stated, hz, ms)
        # one tick fewer would not guarantee it
        assert (jiffies(ms, hz) - 2) * tick < stated, (stated, hz, ms)
    assert table_ms(0, hz) == 0


def test_the_kernels_msecs_to_jiffies_rounds_up():
    assert (
        jiffies(1, 250) == 1
        and jiffies(4, 250) == 1
        and jiffies(5, 250) == 2
        and jiffies(16, 250) == 4
    )
    assert jiffies(4, 300) == 2 and jiffies(0, 250) == 0


def test_the_dm_table_lines():
    assert DiskLatency().table("/dev/dm-0", 1000, 250) == [(0, 1000, "linear", "/dev/dm-0 0")]
    assert DiskLatency.parse("hdd").table("/dev/dm-0", 1000, 250) == [
        (0, 1000, "delay", "/dev/dm-0 0 0 /dev/dm-0 0 0 /dev/dm-0 0 13")
    ]  # reads 0, writes (0.1 ms: below the tick), flushes
    assert DiskLatency.parse("flush=8ms").table("/dev/x", 8, 1000) == [
        (0, 8, "delay", "/dev/x 0 0 /dev/x 0 0 /dev/x 0 9")
    ]


def test_what_the_manifest_records_of_the_layer():
    r = DiskLatency.parse("hdd").realized(250)
    assert r == {
        "hz": 250,
        "dm_write_ms": 0,
        "write_min_ms": 0.0,
        "write_max_ms": 0.0,
        "write_below_tick": True,
        "dm_flush_ms": 13,
        "flush_min_ms": 12.0,
        "flush_max_ms": 16.0,
        "flush_below_tick": False,
    }
    # at HZ=1000 the same preset's write is still below a tick, its flush 9-10 ms
    assert DiskLatency.parse("hdd").realized(1000)["flush_min_ms"] >= 8.3
    # an NVMe is below a tick in both classes: no delay at all, and the manifest says why
    n = DiskLatency.parse("nvme").realized(250)
    assert (
        n["dm_write_ms"] == n["dm_flush_ms"] == 0
        and n["write_below_tick"]
        and n["flush_below_tick"]
    )
    assert DiskLatency.parse("hdd").to_json() == {
        "setting": "hdd",
        "write_ms": 0.1,
        "flush_ms": 8.3,
    }


def test_a_measured_tick_rate_snaps_to_a_configurable_hz_or_the_coarsest():
    assert (
        snap_hz(249.2) == 250
        and snap_hz(1003) == 1000
        and snap_hz(99) == 100
        and snap_hz(296) == 300
    )
    assert snap_hz(600) == FALLBACK_HZ and snap_hz(0) == FALLBACK_HZ


def test_schedules_are_one_or_more_settings():
    assert [str(x) for x in parse_schedules("none,hdd")] == ["none", "hdd"]
    assert [str(x) for x in parse_schedules("none;write=1ms,flush=8ms")] == [
        "none",
        "write=1ms,flush=8ms",
    ]
    assert [str(x) for x in parse_schedules("hdd")] == ["hdd"]
    with pytest.raises(LatencyError, match="given twice"):
        parse_schedules("hdd,none,hdd")
    with pytest.raises(LatencyError, match="at least one"):
        parse_schedules(" , ")


def test_the_layer_phrase_says_what_was_and_was_not_delayed():
    m = {**DiskLatency.parse("hdd").to_json(), **DiskLatency.parse("hdd").realized(250)}
    assert layer_phrase(m) == (
        "dm-delay at HZ=250: each write not delayed (0.1 ms is below the 4 ms tick), "
        "each flush waited 12-16 ms"
    )
    assert layer_phrase({"setting": "hdd"}) == ""


# -- the disks of a cluster: per node --------------------------------------------------------------
@pytest.mark.parametrize(
    "text,canon,n0,n1",
    [
        ("hdd", "hdd", "hdd", "hdd"),
        ("1=hdd", "1=hdd", "none", "hdd"),
        ("nvme+1=hdd", "nvme+1=hdd", "nvme", "hdd"),
        ("1=write=1ms,flush=300ms", "1=write=1ms,flush=300ms", "none", "write=1ms,flush=300ms"),
        (" 1 = hdd + 0=nvme", "0=nvme+1=hdd", "nvme", "hdd"),
    ],
)
def test_a_setting_per_node(text: str, canon: str, n0: str, n1: str) -> None:
    lat = NodesLatency.parse(text)
    assert str(lat) == canon and NodesLatency.parse(str(lat)) == lat
    assert (str(lat.of(0)), str(lat.of(1)), str(lat.of(7))) == (n0, n1, str(lat.every))


def test_for_a_number_of_disks_the_canonical_form_and_no_node_beyond() -> None:
    assert (
        str(NodesLatency.parse("0=hdd+1=hdd").for_nodes(2)) == "hdd"
    )  # every node alike: one setting
    assert str(NodesLatency.parse("hdd+1=hdd").for_nodes(2)) == "hdd"
    assert str(NodesLatency.parse("0=hdd").for_nodes(1)) == "hdd"  # one disk is node 0
    assert str(NodesLatency.parse("1=hdd").for_nodes(3)) == "1=hdd"
    assert NodesLatency.parse("hdd").for_nodes(1) == NodesLatency(DiskLatency.parse("hdd"))
    with pytest.raises(LatencyError, match="node 1 named, and the recording has node 0 only"):
        NodesLatency.parse("1=hdd").for_nodes(1)
    with pytest.raises(LatencyError, match="node 3 named, and the recording has nodes 0..2"):
        NodesLatency.parse("3=hdd").for_nodes(3)


@pytest.mark.parametrize(
    "bad,says",
    [
        ("hdd+nvme", "two settings for every node"),
        ("1=hdd+1=nvme", "node 1 given twice"),
        ("1=", "node 1 has no setting"),
        ("1=floppy", "unknown disk latency 'floppy'"),
    ],
)
def test_a_bad_per_node_setting_is_one_line(bad: str, says: str) -> None:
    with pytest.raises(LatencyError, match=says):
        NodesLatency.parse(bad)


def test_one_disk_reads_as_before() -> None:
    """A setting for every disk is a DiskLatency's own text and JSON (manifests written before)."""
    for text in ("none", "hdd", "write=1ms,flush=8ms"):
        assert str(NodesLatency.parse(text)) == str(DiskLatency.parse(text))
        assert NodesLatency.parse(text).to_json() == DiskLatency.parse(text).to_json()
    assert NodesLatency.parse("1=hdd").to_json()["setting"] == "1=hdd"


def test_schedules_may_name_a_node() -> None:
    assert [str(s) for s in parse_schedules("none;1=hdd")] == ["none", "1=hdd"]
    assert [str(s) for s in parse_schedules("none,hdd")] == ["none", "hdd"]


def test_what_a_manifest_says_of_each_node() -> None:
    hdd = {**DiskLatency.parse("hdd").to_json(), **DiskLatency.parse("hdd").realized(250)}
    one = recorded_phrase(hdd)
    assert one.startswith("hdd (write >= 0.1 ms, flush >= 8.3 ms): dm-delay at HZ=250")
    both = recorded_phrase({"setting": "1=hdd", "nodes": [DiskLatency().to_json(), hdd]})
    assert both == f"1=hdd: node 0: none (no delay layer); node 1: {one}"
    assert recorded_phrase(None) == recorded_phrase({"setting": "none"}) == "none (no delay layer)"


def test_a_record_spec_still_takes_one_disks_latency() -> None:
    """The library took a DiskLatency for RecordSpec.latency before per-node settings: it still does."""
    from powercut.record.vm import RecordSpec

    spec = RecordSpec(latency=DiskLatency.parse("hdd"))
    assert (
        spec.latency == NodesLatency(DiskLatency.parse("hdd")) and str(spec.latency_for(1)) == "hdd"
    )
