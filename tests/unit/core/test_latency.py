"""core/latency.py: the settings' grammar and the dm-delay values that guarantee a lower bound."""
from __future__ import annotations

import pytest

from powercut.core.latency import (
    FALLBACK_HZ,
    KNOWN_HZ,
    NONE,
    PRESETS,
    DiskLatency,
    LatencyError,
    below_tick,
    jiffies,
    layer_phrase,
    parse_schedules,
    snap_hz,
    table_ms,
)


def test_none_and_the_presets_read_back_as_they_are_written():
    assert DiskLatency.parse("none") == DiskLatency() and DiskLatency().none and str(DiskLatency()) == NONE
    for name, p in PRESETS.items():
        lat = DiskLatency.parse(name)
        assert (lat.write_ms, lat.flush_ms, lat.name) == (p.write_ms, p.flush_ms, name)
        assert str(lat) == name and DiskLatency.parse(str(lat)) == lat
    hdd = DiskLatency.parse("hdd")
    assert hdd.flush_ms > DiskLatency.parse("sata-ssd").flush_ms > DiskLatency.parse("nvme").flush_ms


@pytest.mark.parametrize("text,write,flush", [
    ("write=0.1ms,flush=8ms", 0.1, 8.0), ("flush=8", 0.0, 8.0), ("write=250us", 0.25, 0.0),
    ("flush=0.01s, write=2ms", 2.0, 10.0), ("write=0,flush=0", 0.0, 0.0)])
def test_explicit_figures_with_units(text, write, flush):
    lat = DiskLatency.parse(text)
    assert (lat.write_ms, lat.flush_ms) == (write, flush)
    assert DiskLatency.parse(str(lat)) == lat
    assert lat.none == (not write and not flush)


@pytest.mark.parametrize("text,says", [
    ("floppy", "unknown disk latency 'floppy'"), ("write=3x", "write='3x'"), ("read=1ms", "'read=1ms'"),
    ("flush=1ms,flush=2ms", "flush given twice"), ("flush=20s", "at most 10 s"), ("write=-1ms", "want a number")])
def test_a_bad_setting_is_one_line_naming_it(text, says):
    with pytest.raises(LatencyError) as e:
        DiskLatency.parse(text)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("hz", KNOWN_HZ)
def test_the_dm_delay_value_waits_at_least_the_stated_latency_and_no_tick_more_than_it_must(hz):
    tick = 1000 / hz
    for stated in (0.001, 0.02, 0.05, 1, 2, 3.9, 4, 4.01, 8, 8.3, 10, 12, 16.5, 100):
        ms = table_ms(stated, hz)
        if stated < tick:   # below one tick: not delayed (rounding up would make it a far slower disk)
            assert ms == 0 and below_tick(stated, hz), (stated, hz, ms)
            continue
        # a bio queued during tick j leaves at tick j + jiffies(ms): it waits more than jiffies(ms) - 1 ticks
        assert (jiffies(ms, hz) - 1) * tick >= stated - 1e-9, (stated, hz, ms)
        # one tick fewer would not guarantee it
        assert (jiffies(ms, hz) - 2) * tick < stated, (stated, hz, ms)
    assert table_ms(0, hz) == 0


def test_the_kernels_msecs_to_jiffies_rounds_up():
    assert jiffies(1, 250) == 1 and jiffies(4, 250) == 1 and jiffies(5, 250) == 2 and jiffies(16, 250) == 4
    assert jiffies(4, 300) == 2 and jiffies(0, 250) == 0


def test_the_dm_table_lines():
    assert DiskLatency().table("/dev/dm-0", 1000, 250) == [(0, 1000, "linear", "/dev/dm-0 0")]
    assert DiskLatency.parse("hdd").table("/dev/dm-0", 1000, 250) == [
        (0, 1000, "delay", "/dev/dm-0 0 0 /dev/dm-0 0 0 /dev/dm-0 0 13")]   # reads 0, writes (0.1 ms: below the tick), flushes
    assert DiskLatency.parse("flush=8ms").table("/dev/x", 8, 1000) == [(0, 8, "delay", "/dev/x 0 0 /dev/x 0 0 /dev/x 0 9")]


def test_what_the_manifest_records_of_the_layer():
    r = DiskLatency.parse("hdd").realized(250)
    assert r == {"hz": 250, "dm_write_ms": 0, "write_min_ms": 0.0, "write_max_ms": 0.0, "write_below_tick": True,
                 "dm_flush_ms": 13, "flush_min_ms": 12.0, "flush_max_ms": 16.0, "flush_below_tick": False}
    # at HZ=1000 the same preset's write is still below a tick, its flush 9-10 ms
    assert DiskLatency.parse("hdd").realized(1000)["flush_min_ms"] >= 8.3
    # an NVMe is below a tick in both classes: no delay at all, and the manifest says why
    n = DiskLatency.parse("nvme").realized(250)
    assert n["dm_write_ms"] == n["dm_flush_ms"] == 0 and n["write_below_tick"] and n["flush_below_tick"]
    assert DiskLatency.parse("hdd").to_json() == {"setting": "hdd", "write_ms": 0.1, "flush_ms": 8.3}


def test_a_measured_tick_rate_snaps_to_a_configurable_hz_or_the_coarsest():
    assert snap_hz(249.2) == 250 and snap_hz(1003) == 1000 and snap_hz(99) == 100 and snap_hz(296) == 300
    assert snap_hz(600) == FALLBACK_HZ and snap_hz(0) == FALLBACK_HZ


def test_schedules_are_one_or_more_settings():
    assert [str(x) for x in parse_schedules("none,hdd")] == ["none", "hdd"]
    assert [str(x) for x in parse_schedules("none;write=1ms,flush=8ms")] == ["none", "write=1ms,flush=8ms"]
    assert [str(x) for x in parse_schedules("hdd")] == ["hdd"]
    with pytest.raises(LatencyError, match="given twice"):
        parse_schedules("hdd,none,hdd")
    with pytest.raises(LatencyError, match="at least one"):
        parse_schedules(" , ")


def test_the_layer_phrase_says_what_was_and_was_not_delayed():
    m = {**DiskLatency.parse("hdd").to_json(), **DiskLatency.parse("hdd").realized(250)}
    assert layer_phrase(m) == ("dm-delay at HZ=250: each write not delayed (0.1 ms is below the 4 ms tick), "
                               "each flush waited 12-16 ms")
    assert layer_phrase({"setting": "hdd"}) == ""
