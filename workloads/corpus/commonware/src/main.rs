//! powercut corpus driver for commonware-storage's `Oversized` segmented journal (an index journal
//! of fixed-size entries, each naming its value's `(offset, size)` in a value "glob", both one blob
//! per section), on the tokio runtime with its storage directory ./store.
//!
//! `driver run`: opens the journal (`Oversized::init`: on an existing store this is the program's
//! crash recovery) and replays it to count its entries, then appends `n` records; record i of round
//! R is key `rR-i`: an index entry with id R*1000000+i and a value of `value_size` bytes derived
//! from the key. Each record is `powercut-mark begin:rR-i`, `append`, `sync` of its section
//! (the call the docs give for durability), then `ack:rR-i`. Then, with `tail` > 0, the writer
//! appends `tail` more records (begun, never synced) and the process exits right away without
//! syncing or closing the journal, as a writer killed before its next sync would: whatever of
//! those appends the write buffers had already handed to the files stays there for the next open
//! to recover.
//! Sections: the store's k-th entry goes to section k / section_items (one section by default).
//! Params (POWERCUT_PARAMS): n (40), round (1: keys of a later round never collide with an
//! earlier one's, so a second run from a crash state of the first appends new keys), tail (0),
//! value_size (1000), section_items (1000), write_buffer (4096: both journals' write buffers),
//! page_size (4096: the index journal's page size).
//!
//! `driver check`: reads the checker input (JSON on stdin), opens ./store with `Oversized::init`
//! (its recovery, as any restart does), replays every index entry and reads each entry's value with
//! `get_value`: every acked key must be there with its value; an entry whose key was never begun,
//! whose value does not read back (the program's error is the reason) or differs from what was
//! written is corrupt data (a value that is another key's value is named as such). Keys begun but
//! not acked may be present (with their value) or absent. The params are the input's, over those
//! in the checker's own $POWERCUT_PARAMS (a manual `powercut run --cmd` passes the checker none).
//! A second run's first states (cuts among the marks that replay the first run's acks and begins)
//! list only part of the earlier run's keys, so a key of an earlier round (below `round`) that
//! holds exactly its own value is accepted without being listed.
//!
//! Crash, recover, crash again: the first run (round 1, `tail` > 0) leaves a store whose last
//! appends were cut short, so the second run (round 2, from the first run's last state) starts
//! with the program's recovery repairing it, then appends and syncs new records.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::Path;
use std::process::Command;

use commonware_codec::{FixedSize, RangeCfg, Read, ReadExt, Write};
use commonware_runtime::{
    buffer::paged::CacheRef, tokio as cw_tokio, Buf, BufMut, Runner as _, Supervisor as _,
};
use commonware_storage::journal::segmented::oversized::{Config, Oversized, Record};
use serde_json::{json, Value};

const STORE: &str = "store";
const ROUND_BASE: u64 = 1_000_000;

/// The index entry: the record's id and where its value is in the glob.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    id: u64,
    value_offset: u64,
    value_size: u32,
}

impl Write for Entry {
    fn write(&self, buf: &mut impl BufMut) {
        self.id.write(buf);
        self.value_offset.write(buf);
        self.value_size.write(buf);
    }
}

impl Read for Entry {
    type Cfg = ();

    fn read_cfg(buf: &mut impl Buf, _: &Self::Cfg) -> Result<Self, commonware_codec::Error> {
        let id = u64::read(buf)?;
        let value_offset = u64::read(buf)?;
        let value_size = u32::read(buf)?;
        Ok(Self {
            id,
            value_offset,
            value_size,
        })
    }
}

impl FixedSize for Entry {
    const SIZE: usize = u64::SIZE + u64::SIZE + u32::SIZE;
}

impl Record for Entry {
    fn value_location(&self) -> (u64, u32) {
        (self.value_offset, self.value_size)
    }

    fn with_location(mut self, offset: u64, size: u32) -> Self {
        self.value_offset = offset;
        self.value_size = size;
        self
    }
}

type Ctx = cw_tokio::Context;
type Journal = Oversized<Ctx, Entry, Vec<u8>>;

#[derive(Clone, Copy)]
struct Params {
    n: u64,
    round: u64,
    tail: u64,
    value_size: usize,
    section_items: u64,
    write_buffer: usize,
    page_size: u16,
}

fn params_from(v: &Value) -> Params {
    let get = |k: &str, d: u64| -> u64 {
        match v.get(k) {
            Some(Value::Number(x)) => x.as_u64().unwrap_or(d),
            Some(Value::String(s)) => s.parse().unwrap_or(d),
            _ => d,
        }
    };
    Params {
        n: get("n", 40),
        round: get("round", 1).max(1),
        tail: get("tail", 0),
        value_size: get("value_size", 1000).max(16) as usize,
        section_items: get("section_items", 1000).max(1),
        write_buffer: get("write_buffer", 4096).max(64) as usize,
        page_size: get("page_size", 4096).clamp(64, 32768) as u16,
    }
}

fn key_name(id: u64) -> String {
    format!("r{}-{}", id / ROUND_BASE, id % ROUND_BASE)
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The value written for record `id`: starts with "<key>=" and fills to `size` bytes.
fn value_of(id: u64, size: usize) -> Vec<u8> {
    let tag = format!("{}=", key_name(id));
    let mut v = Vec::with_capacity(size.max(tag.len()));
    v.extend_from_slice(tag.as_bytes());
    let mut x = mix(id);
    while v.len() < size {
        x = mix(x);
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

fn config(ctx: &Ctx, p: &Params) -> Config<(RangeCfg<usize>, ())> {
    Config {
        index_partition: "index".into(),
        value_partition: "values".into(),
        index_page_cache: CacheRef::from_pooler(
            ctx,
            NonZeroU16::new(p.page_size).unwrap(),
            NonZeroUsize::new(64).unwrap(),
        ),
        index_write_buffer: NonZeroUsize::new(p.write_buffer).unwrap(),
        value_write_buffer: NonZeroUsize::new(p.write_buffer).unwrap(),
        #[cfg(feature = "owned")]
        replay_buffer: NonZeroUsize::new(1 << 16).unwrap(),
        compression: None,
        codec_config: (RangeCfg::new(0..=(1usize << 20)), ()),
    }
}

fn err<E: std::fmt::Display + std::fmt::Debug>(e: E) -> String {
    let d = format!("{}", e);
    let g = format!("{:?}", e);
    if d == g || g.len() > 400 {
        d
    } else {
        format!("{} ({})", d, g)
    }
}

// ---- the journal calls, for both API shapes -------------------------------------------------

async fn open(ctx: &Ctx, p: &Params) -> Result<Journal, String> {
    Journal::init(ctx.child("oversized"), config(ctx, p))
        .await
        .map_err(|e| format!("open failed: {}", err(e)))
}

/// Every index entry: (section, position, entry).
#[cfg(not(feature = "owned"))]
async fn entries(j: Journal) -> Result<(Journal, Vec<(u64, u64, Entry)>), String> {
    use futures::StreamExt;
    let mut j = j;
    let mut out = Vec::new();
    {
        let stream = j
            .replay(0, 0, NonZeroUsize::new(1 << 16).unwrap())
            .await
            .map_err(|e| format!("replay failed: {}", err(e)))?;
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            out.push(item.map_err(|e| format!("replay failed: {}", err(e)))?);
        }
    }
    Ok((j, out))
}

#[cfg(feature = "owned")]
async fn entries(j: Journal) -> Result<(Journal, Vec<(u64, u64, Entry)>), String> {
    let mut out = Vec::new();
    let mut r = j
        .replay(
            0,
            0,
            NonZeroUsize::new(1 << 16).unwrap(),
            commonware_runtime::ReadOptions::default(),
        )
        .await
        .map_err(|e| format!("replay failed: {}", err(e)))?;
    while let Some(item) = r.next().await {
        out.push(item.map_err(|e| format!("replay failed: {}", err(e)))?);
    }
    let j = r.finish().map_err(|e| format!("replay failed: {}", err(e)))?;
    Ok((j, out))
}

#[cfg(not(feature = "owned"))]
async fn append(mut j: Journal, section: u64, e: Entry, v: &Vec<u8>) -> Result<Journal, String> {
    j.append(section, e, v)
        .await
        .map_err(|e| format!("append failed: {}", err(e)))?;
    Ok(j)
}

#[cfg(feature = "owned")]
async fn append(j: Journal, section: u64, e: Entry, v: &Vec<u8>) -> Result<Journal, String> {
    let (j, _, _, _) = j
        .append(section, e, v)
        .await
        .map_err(|e| format!("append failed: {}", err(e)))?;
    Ok(j)
}

#[cfg(not(feature = "owned"))]
async fn sync(mut j: Journal, section: u64) -> Result<Journal, String> {
    j.sync(section)
        .await
        .map_err(|e| format!("sync failed: {}", err(e)))?;
    Ok(j)
}

#[cfg(feature = "owned")]
async fn sync(j: Journal, section: u64) -> Result<Journal, String> {
    j.sync(section)
        .await
        .map_err(|e| format!("sync failed: {}", err(e)))
}

// ---- run ------------------------------------------------------------------------------------

fn mark(text: &str) {
    let st = Command::new("powercut-mark").arg(text).status();
    match st {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("powercut-mark {}: {:?}", text, other);
            std::process::exit(2);
        }
    }
}

fn storage_config() -> cw_tokio::Config {
    let dir = std::env::current_dir().unwrap_or_else(|_| ".".into()).join(STORE);
    cw_tokio::Config::new().with_storage_directory(dir)
}

fn run() -> Result<(), String> {
    let raw = std::env::var("POWERCUT_PARAMS").unwrap_or_default();
    let pv: Value = serde_json::from_str(&raw).unwrap_or(json!({}));
    let p = params_from(&pv);
    let runner = cw_tokio::Runner::new(storage_config());
    runner.start(|ctx| async move {
        let j = open(&ctx, &p).await?;
        let (mut j, found) = entries(j).await?;
        eprintln!("round {}: the store holds {} entries", p.round, found.len());
        let mut seq = found.len() as u64;
        for i in 1..=p.n {
            let id = p.round * ROUND_BASE + i;
            let key = key_name(id);
            let section = seq / p.section_items;
            mark(&format!("begin:{}", key));
            let e = Entry { id, value_offset: 0, value_size: 0 };
            j = append(j, section, e, &value_of(id, p.value_size)).await?;
            j = sync(j, section).await?;
            mark(&format!("ack:{}", key));
            seq += 1;
        }
        if p.tail > 0 {
            for i in p.n + 1..=p.n + p.tail {
                let id = p.round * ROUND_BASE + i;
                let section = seq / p.section_items;
                mark(&format!("begin:{}", key_name(id)));
                let e = Entry { id, value_offset: 0, value_size: 0 };
                j = append(j, section, e, &value_of(id, p.value_size)).await?;
                seq += 1;
            }
            // the writer dies here, before syncing its last appends
            eprintln!("round {}: exiting with {} appends never synced", p.round, p.tail);
            std::process::exit(0);
        }
        drop(j);
        Ok(())
    })
}

// ---- check ----------------------------------------------------------------------------------

fn keys_of(input: &Value, field: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(Value::Array(a)) = input.get(field) {
        for k in a {
            out.insert(match k {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
    }
    out
}

fn verdict(v: &str, reasons: Vec<String>) -> Value {
    json!({"verdict": v, "reasons": reasons})
}

/// Name what a wrong value holds: another key's value (by its "<key>=" tag), or bytes.
fn describe(v: &[u8], p: &Params) -> String {
    if let Some(eq) = v.iter().take(32).position(|&b| b == b'=') {
        if let Ok(tag) = std::str::from_utf8(&v[..eq]) {
            if let Some((r, i)) = tag.strip_prefix('r').and_then(|s| s.split_once('-')) {
                if let (Ok(r), Ok(i)) = (r.parse::<u64>(), i.parse::<u64>()) {
                    let id = r * ROUND_BASE + i;
                    if value_of(id, p.value_size) == v {
                        return format!("the value of key {}", tag);
                    }
                }
            }
        }
    }
    format!("{} bytes that are no key's value", v.len())
}

fn check_inner(input: &Value) -> Value {
    // the input's params; for a manual `powercut run --cmd` (which passes none), those in the
    // checker's own environment ($POWERCUT_PARAMS), as for `driver run`
    let mut pv: Value = std::env::var("POWERCUT_PARAMS")
        .ok()
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .filter(|v: &Value| v.is_object())
        .unwrap_or(json!({}));
    if let Some(Value::Object(m)) = input.get("params") {
        for (k, v) in m {
            pv[k] = v.clone();
        }
    }
    let p = params_from(&pv);
    let acked = keys_of(input, "acked");
    let begun: BTreeSet<String> = keys_of(input, "begun").union(&acked).cloned().collect();
    if !Path::new(STORE).exists() {
        if acked.is_empty() {
            return verdict("pass", vec![]);
        }
        return verdict(
            "lost-ack",
            vec![format!("{} acked keys but no {} directory", acked.len(), STORE)],
        );
    }
    let runner = cw_tokio::Runner::new(storage_config());
    let res: Result<Vec<(u64, u64, Entry, Result<Vec<u8>, String>)>, String> =
        runner.start(|ctx| async move {
            let j = open(&ctx, &p).await?;
            let (j, found) = entries(j).await?;
            let mut out = Vec::new();
            for (s, pos, e) in found {
                let v = j
                    .get_value(s, e.value_offset, e.value_size)
                    .await
                    .map_err(err);
                out.push((s, pos, e, v));
            }
            drop(j);
            Ok(out)
        });
    let found = match res {
        Ok(f) => f,
        Err(e) => return verdict("corrupt-data", vec![e]),
    };
    let mut bad: Vec<String> = Vec::new();
    let mut present: BTreeMap<String, bool> = BTreeMap::new();
    for (s, pos, e, v) in &found {
        let key = key_name(e.id);
        let at = format!("section {} position {}, value at {}+{}", s, pos, e.value_offset, e.value_size);
        if !begun.contains(&key) {
            // A second run's first states (cut inside the marks that replay the first run's acks
            // and begins) list only part of the earlier run's keys: a key of an earlier round
            // holding exactly its own value was written by that run.
            let earlier = e.id / ROUND_BASE < p.round;
            if !(earlier && matches!(v, Ok(v) if *v == value_of(e.id, p.value_size))) {
                bad.push(format!("key {} was never written ({})", key, at));
            }
            continue;
        }
        match v {
            Err(msg) => {
                bad.push(format!("get_value of key {} failed: {} ({})", key, msg, at));
                present.insert(key, false);
            }
            Ok(v) => {
                let ok = *v == value_of(e.id, p.value_size);
                if !ok {
                    bad.push(format!(
                        "key {}{} reads back {} ({})",
                        key,
                        if acked.contains(&key) { " (acked)" } else { "" },
                        describe(v, &p),
                        at
                    ));
                }
                present.insert(key, ok);
            }
        }
    }
    if !bad.is_empty() {
        bad.truncate(20);
        return verdict("corrupt-data", bad);
    }
    let lost: Vec<&String> = acked.iter().filter(|k| !present.contains_key(*k)).collect();
    if !lost.is_empty() {
        let shown: Vec<String> = lost.iter().take(20).map(|k| k.to_string()).collect();
        return verdict(
            "lost-ack",
            vec![format!(
                "{} of {} acked keys missing after reopen ({} entries found): {}{}",
                lost.len(),
                acked.len(),
                found.len(),
                shown.join(","),
                if lost.len() > 20 { ",..." } else { "" }
            )],
        );
    }
    verdict("pass", vec![])
}

fn check() -> i32 {
    let mut s = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut s) {
        println!("{}", verdict("corrupt-data", vec![format!("checker: cannot read stdin: {}", e)]));
        return 0;
    }
    let input: Value = serde_json::from_str(&s).unwrap_or(json!({}));
    if let Some(Value::String(m)) = input.get("mount") {
        let _ = std::env::set_current_dir(m);
    }
    std::panic::set_hook(Box::new(|_| {}));
    let out = match std::thread::spawn(move || check_inner(&input)).join() {
        Ok(v) => v,
        Err(payload) => {
            let msg = if let Some(s) = payload.downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = payload.downcast_ref::<String>() {
                s.clone()
            } else {
                "unknown panic".to_string()
            };
            verdict("corrupt-data", vec![format!("commonware-storage panicked: {}", msg)])
        }
    };
    println!("{}", out);
    0
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let code = match mode.as_str() {
        "run" => match run() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{}", e);
                1
            }
        },
        "check" => check(),
        _ => {
            eprintln!("usage: driver run|check");
            2
        }
    };
    std::process::exit(code);
}
