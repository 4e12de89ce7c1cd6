//! powercut corpus driver for fjall.
//!
//! `driver run`: opens a fjall keyspace in ./db with one partition "data" whose memtable is small
//! (max_memtable_size), then commits write batch i = 1..n, each inserting key i (a value_size-byte
//! value derived from i) with `durability(Some(PersistMode::SyncAll))` (the batch is fsynced to the
//! journal before commit() returns); `powercut-mark begin:i` before, `ack:i` after commit()
//! returned.  A small memtable makes fjall rotate it every few commits and flush it to a segment in
//! its background flush worker (and compact segments), while commits go on, as a write-heavy
//! program does.  Params (POWERCUT_PARAMS): n (200), value_size (1024), memtable (max_memtable_size,
//! 16384 bytes).
//!
//! `driver check`: reads the checker input (JSON on stdin), reopens ./db with the same options (the
//! program's own recovery), reads every acked key and its value, and scans every key: a key that was
//! never begun, or a begun key with a wrong value, is corrupt data; an open or read error (or a
//! panic inside fjall) is corrupt data with the program's own message.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::Command;

use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};
use serde_json::{json, Value};

const DB_DIR: &str = "db";
const PARTITION: &str = "data";

struct Params {
    n: u64,
    value_size: usize,
    memtable: u32,
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
        n: get("n", 200),
        value_size: get("value_size", 1024) as usize,
        memtable: get("memtable", 16384) as u32,
    }
}

fn key_of(i: u64) -> Vec<u8> {
    format!("key{:08}", i).into_bytes()
}

/// The value of key i: deterministic, value_size bytes, so the checker can verify it.
fn value_of(i: u64, size: usize) -> Vec<u8> {
    let head = format!("value-{}-", i);
    let mut v = Vec::with_capacity(size.max(head.len()));
    v.extend_from_slice(head.as_bytes());
    let mut x: u64 = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

fn open(p: &Params) -> fjall::Result<(Keyspace, PartitionHandle)> {
    let ks = Config::new(DB_DIR).open()?;
    let part = ks.open_partition(
        PARTITION,
        PartitionCreateOptions::default().max_memtable_size(p.memtable),
    )?;
    Ok((ks, part))
}

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

fn run() -> i32 {
    let raw = std::env::var("POWERCUT_PARAMS").unwrap_or_default();
    let pv: Value = serde_json::from_str(&raw).unwrap_or(json!({}));
    let p = params_from(&pv);
    let (ks, part) = match open(&p) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("open failed: {:?}", e);
            return 1;
        }
    };
    for i in 1..=p.n {
        mark(&format!("begin:{}", i));
        let mut batch = ks.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&part, key_of(i), value_of(i, p.value_size));
        if let Err(e) = batch.commit() {
            eprintln!("commit {}: {:?}", i, e);
            return 1;
        }
        mark(&format!("ack:{}", i));
    }
    0
}

fn keys_of(input: &Value, field: &str) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    if let Some(Value::Array(a)) = input.get(field) {
        for k in a {
            let s = match k {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if let Ok(i) = s.parse::<u64>() {
                out.insert(i);
            }
        }
    }
    out
}

fn verdict(v: &str, reasons: Vec<String>) -> Value {
    json!({"verdict": v, "reasons": reasons})
}

/// The check proper; a panic inside it is caught by the caller.
fn check_inner(input: &Value) -> Value {
    let p = params_from(input.get("params").unwrap_or(&json!({})));
    let acked = keys_of(input, "acked");
    let begun: BTreeSet<u64> = keys_of(input, "begun").union(&acked).cloned().collect();
    if !std::path::Path::new(DB_DIR).exists() {
        if acked.is_empty() {
            return verdict("pass", vec![]);
        }
        return verdict(
            "lost-ack",
            vec![format!("{} acked keys but no database directory", acked.len())],
        );
    }
    let (_ks, part) = match open(&p) {
        Ok(x) => x,
        Err(e) => return verdict("corrupt-data", vec![format!("open failed: {:?}", e)]),
    };
    let mut lost = Vec::new();
    let mut bad = Vec::new();
    for &i in &acked {
        match part.get(key_of(i)) {
            Ok(Some(v)) => {
                if v[..] != value_of(i, p.value_size)[..] {
                    bad.push(format!("acked key {} has a wrong value ({} bytes)", i, v.len()));
                }
            }
            Ok(None) => lost.push(i),
            Err(e) => bad.push(format!("get acked key {} failed: {:?}", i, e)),
        }
    }
    // every key present: begun, with its value
    let mut seen = BTreeSet::new();
    for kv in part.iter() {
        match kv {
            Ok((k, v)) => {
                let ks = String::from_utf8_lossy(&k).to_string();
                match ks.strip_prefix("key").and_then(|s| s.parse::<u64>().ok()) {
                    Some(i) if begun.contains(&i) => {
                        if v[..] != value_of(i, p.value_size)[..] {
                            bad.push(format!("key {} has a wrong value ({} bytes)", i, v.len()));
                        }
                        seen.insert(i);
                    }
                    _ => bad.push(format!("key {:?} was never written", ks)),
                }
            }
            Err(e) => {
                bad.push(format!("scan failed: {:?}", e));
                break;
            }
        }
    }
    for &i in &acked {
        if !seen.contains(&i) && !lost.contains(&i) {
            bad.push(format!("acked key {} found by get but not by a scan", i));
        }
    }
    if !bad.is_empty() {
        bad.truncate(20);
        return verdict("corrupt-data", bad);
    }
    if !lost.is_empty() {
        let n = lost.len();
        let shown: Vec<String> = lost.iter().take(20).map(|i| i.to_string()).collect();
        return verdict(
            "lost-ack",
            vec![format!(
                "{} of {} acked keys missing after reopen: {}{}",
                n,
                acked.len(),
                shown.join(","),
                if n > 20 { ",..." } else { "" }
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
            verdict("corrupt-data", vec![format!("fjall panicked on recovery: {}", msg)])
        }
    };
    println!("{}", out);
    0
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let code = match mode.as_str() {
        "run" => run(),
        "check" => check(),
        _ => {
            eprintln!("usage: driver run|check");
            2
        }
    };
    // exit without waiting for the store's background threads
    std::process::exit(code);
}
