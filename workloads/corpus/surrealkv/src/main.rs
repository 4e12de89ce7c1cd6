//! powercut corpus driver for surrealkv.
//!
//! `driver run`: opens a surrealkv tree in ./db, then commits transaction i = 1..n, each setting key
//! i (a value_size-byte value derived from i) with Durability::Immediate ("commits are guaranteed to
//! be persistent as soon as commit() returns"); `powercut-mark begin:i` before, `ack:i` after the
//! commit returned.  Every reopen_every commits it restarts, as a service or a command-line tool
//! does: close() (which flushes the memtable to an SSTable, flush_on_close being the default) and
//! open again (which checks the levels and compacts in the background), so SSTables are written
//! and compacted while commits go on.  Params (POWERCUT_PARAMS): n (150), value_size (512),
//! memtable (max_memtable_size, 4 MiB), reopen_every (10; 0: never).
//!
//! Why restarts rather than only a small memtable: with a memtable that fills during a commit,
//! 0.21.2 and 0.21.3 alike lose the acked commit that filled it until the next flush (the commit is
//! logged in the old WAL segment, applied to the new memtable, and the old segment is deleted once
//! the old memtable is flushed) -- a different bug, which would hide this entry's.  Run it with
//! {"memtable": 8192, "reopen_every": 0}.
//!
//! `driver check`: reads the checker input (JSON on stdin), reopens ./db with the same options (the
//! program's own recovery), reads every acked key and its value, and scans every key: a key that was
//! never begun, or a begun key with a wrong value, is corrupt data; an open or read error is
//! corrupt data with the program's own message.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use surrealkv::{Durability, LSMIterator, Tree, TreeBuilder};

const DB_DIR: &str = "db";

struct Params {
    n: u64,
    value_size: usize,
    memtable: usize,
    reopen_every: u64,
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
        n: get("n", 150),
        value_size: get("value_size", 512) as usize,
        memtable: get("memtable", 4 << 20) as usize,
        reopen_every: get("reopen_every", 10),
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

fn open(p: &Params) -> surrealkv::Result<Tree> {
    TreeBuilder::new()
        .with_path(PathBuf::from(DB_DIR))
        .with_max_memtable_size(p.memtable)
        .build()
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let mut tree = match open(&p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("open failed: {:?}", e);
                return 1;
            }
        };
        for i in 1..=p.n {
            mark(&format!("begin:{}", i));
            let mut txn = match tree.begin() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("begin {}: {:?}", i, e);
                    return 1;
                }
            };
            txn.set_durability(Durability::Immediate);
            if let Err(e) = txn.set(&key_of(i)[..], &value_of(i, p.value_size)[..]) {
                eprintln!("set {}: {:?}", i, e);
                return 1;
            }
            if let Err(e) = txn.commit().await {
                eprintln!("commit {}: {:?}", i, e);
                return 1;
            }
            drop(txn);
            mark(&format!("ack:{}", i));
            // a restart of the program: close the store (it flushes its memtable to an SSTable)
            // and open it again (it compacts its tables in the background)
            if p.reopen_every > 0 && i % p.reopen_every == 0 && i < p.n {
                if let Err(e) = tree.close().await {
                    eprintln!("close after {}: {:?}", i, e);
                    return 1;
                }
                drop(tree);
                tree = match open(&p) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("reopen after {}: {:?}", i, e);
                        return 1;
                    }
                };
            }
        }
        if let Err(e) = tree.close().await {
            eprintln!("close: {:?}", e);
            return 1;
        }
        0
    })
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let tree = match open(&p) {
            Ok(t) => t,
            Err(e) => return verdict("corrupt-data", vec![format!("open failed: {:?}", e)]),
        };
        let txn = match tree.begin() {
            Ok(t) => t,
            Err(e) => return verdict("corrupt-data", vec![format!("begin failed: {:?}", e)]),
        };
        let mut lost = Vec::new();
        let mut bad = Vec::new();
        for &i in &acked {
            match txn.get(&key_of(i)[..]) {
                Ok(Some(v)) => {
                    if v != value_of(i, p.value_size) {
                        bad.push(format!("acked key {} has a wrong value ({} bytes)", i, v.len()));
                    }
                }
                Ok(None) => lost.push(i),
                Err(e) => bad.push(format!("get acked key {} failed: {:?}", i, e)),
            }
        }
        // every key present: begun, with its value
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        match txn.range(&b"key"[..], &b"kez"[..]) {
            Ok(mut it) => {
                let r = (|| -> surrealkv::Result<()> {
                    it.seek_first()?;
                    while it.valid() {
                        let k = String::from_utf8_lossy(it.key().user_key()).to_string();
                        let v = it.value()?;
                        match k.strip_prefix("key").and_then(|s| s.parse::<u64>().ok()) {
                            Some(i) if begun.contains(&i) => {
                                if v != value_of(i, p.value_size) {
                                    bad.push(format!("key {} has a wrong value ({} bytes)", i, v.len()));
                                }
                                seen.insert(i, v.len());
                            }
                            _ => bad.push(format!("key {:?} was never written", k)),
                        }
                        it.next()?;
                    }
                    Ok(())
                })();
                if let Err(e) = r {
                    bad.push(format!("scan failed: {:?}", e));
                }
            }
            Err(e) => bad.push(format!("scan failed: {:?}", e)),
        }
        for &i in &acked {
            if !seen.contains_key(&i) && !lost.contains(&i) {
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
    })
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
            verdict("corrupt-data", vec![format!("surrealkv panicked on recovery: {}", msg)])
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
    // exit without waiting for the store's background tasks
    std::process::exit(code);
}
