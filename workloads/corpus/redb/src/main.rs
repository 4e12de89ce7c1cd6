//! powercut corpus driver for redb.
//!
//! `driver run`: opens (creates) the redb database ./db.redb and runs n rounds; round i is
//!   1. a write transaction with `set_durability(Durability::None)` (a fast commit, made durable
//!      by the next durable one, as redb's docs say) that inserts, overwrites and removes scratch
//!      keys `s<j>` (values of varying size, a deterministic function of the round), then commits;
//!      nothing is acked for it;
//!   2. a durable write transaction that inserts key `k<i>` with a value derived from i:
//!      `powercut-mark begin:i` before it, `ack:i` after commit() returned.  Its durability is the
//!      default, `Durability::Immediate` ("guaranteed to be persistent as soon as commit()
//!      returns"), or with durability=paranoid `Durability::Paranoid` (the same guarantee, with a
//!      two-phase commit).
//! Params (POWERCUT_PARAMS): n (80), scratch_keys (48), scratch_ops (12), value_size (512: the
//! largest scratch value is 4x), durability ("immediate"; "paranoid").
//!
//! Note: with either durability, on ext4 both 0.16.0 and 0.17.0 panic on reopen ("internal error:
//! entered unreachable code", in the repair's checksum walk of a commit slot whose root page never
//! reached the disk: redb issue 642; redb PR 888, 2024, made repair fail gracefully on partially
//! written trees), a different bug from this entry's.
//!
//! `driver check`: reads the checker input (JSON on stdin), opens ./db.redb the way the program
//! does at every start (`Database::create`: opens an existing database, running redb's repair if
//! it was not shut down cleanly), and reads: every acked `k<i>` must be there with its value; a `k`
//! key never begun, or with a wrong value, is corrupt data; the scratch keys must be exactly what
//! rounds 1..m left (m: the last round whose durable commit is present -- the non-durable commits
//! before it are made durable by it, the later ones are not). An open or read error, or a panic of
//! redb's, is corrupt data with redb's own message.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::process::Command;

use redb::{Database, Durability, ReadableTable, TableDefinition};
use serde_json::{json, Value};

const DB_FILE: &str = "db.redb";
const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("data");

#[derive(Clone, Copy)]
struct Params {
    n: u64,
    scratch_keys: u64,
    scratch_ops: u64,
    value_size: usize,
    paranoid: bool,
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
        n: get("n", 80),
        scratch_keys: get("scratch_keys", 48).max(1),
        scratch_ops: get("scratch_ops", 12),
        value_size: get("value_size", 512).max(16) as usize,
        paranoid: match v.get("durability") {
            Some(Value::String(s)) => s == "paranoid",
            _ => false,
        },
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn fill(tag: &str, seed: u64, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size.max(tag.len()));
    v.extend_from_slice(tag.as_bytes());
    let mut x = seed | 1;
    while v.len() < size {
        x = mix(x);
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

fn key_value(i: u64, p: &Params) -> Vec<u8> {
    fill(&format!("value-{}-", i), i, p.value_size)
}

/// One scratch operation: (key, Some(value)) to insert or overwrite, (key, None) to remove.
type ScratchOp = (String, Option<Vec<u8>>);

/// The scratch operations of round r, a deterministic function of r.
fn scratch_ops(r: u64, p: &Params) -> Vec<ScratchOp> {
    let mut ops = Vec::new();
    for j in 0..p.scratch_ops {
        let x = mix(r.wrapping_mul(1_000_003).wrapping_add(j));
        let key = format!("s{:04}", x % p.scratch_keys);
        if (x >> 20) % 4 == 0 {
            ops.push((key, None));
        } else {
            let size = 16 + ((x >> 32) as usize) % (4 * p.value_size);
            ops.push((key, Some(fill(&format!("scratch-{}-{}-", r, j), x, size))));
        }
    }
    ops
}

/// The scratch keys after rounds 1..=m.
fn scratch_after(m: u64, p: &Params) -> BTreeMap<String, Vec<u8>> {
    let mut state = BTreeMap::new();
    for r in 1..=m {
        for (k, v) in scratch_ops(r, p) {
            match v {
                Some(v) => {
                    state.insert(k, v);
                }
                None => {
                    state.remove(&k);
                }
            }
        }
    }
    state
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

fn run() -> Result<(), String> {
    let raw = std::env::var("POWERCUT_PARAMS").unwrap_or_default();
    let pv: Value = serde_json::from_str(&raw).unwrap_or(json!({}));
    let p = params_from(&pv);
    let db = Database::create(DB_FILE).map_err(|e| format!("create: {}", e))?;
    for i in 1..=p.n {
        // 1. a non-durable commit of scratch changes
        let txn = db.begin_write().map_err(|e| format!("begin {}: {}", i, e))?;
        let mut txn = txn;
        txn.set_durability(Durability::None);
        {
            let mut t = txn.open_table(TABLE).map_err(|e| format!("open_table {}: {}", i, e))?;
            for (k, v) in scratch_ops(i, &p) {
                match v {
                    Some(v) => {
                        t.insert(k.as_str(), v.as_slice()).map_err(|e| format!("insert {}: {}", k, e))?;
                    }
                    None => {
                        t.remove(k.as_str()).map_err(|e| format!("remove {}: {}", k, e))?;
                    }
                }
            }
        }
        txn.commit().map_err(|e| format!("commit scratch {}: {}", i, e))?;

        // 2. a durable commit of key i, acked
        mark(&format!("begin:{}", i));
        let mut txn = db.begin_write().map_err(|e| format!("begin {}: {}", i, e))?;
        if p.paranoid {
            txn.set_durability(Durability::Paranoid);
        }
        {
            let mut t = txn.open_table(TABLE).map_err(|e| format!("open_table {}: {}", i, e))?;
            let k = format!("k{:06}", i);
            t.insert(k.as_str(), key_value(i, &p).as_slice())
                .map_err(|e| format!("insert {}: {}", k, e))?;
        }
        txn.commit().map_err(|e| format!("commit {}: {}", i, e))?;
        mark(&format!("ack:{}", i));
    }
    drop(db);
    Ok(())
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

fn check_inner(input: &Value) -> Value {
    let p = params_from(input.get("params").unwrap_or(&json!({})));
    let acked = keys_of(input, "acked");
    let begun: BTreeSet<u64> = keys_of(input, "begun").union(&acked).cloned().collect();
    if !std::path::Path::new(DB_FILE).exists() {
        if acked.is_empty() {
            return verdict("pass", vec![]);
        }
        return verdict("lost-ack", vec![format!("{} acked keys but no {}", acked.len(), DB_FILE)]);
    }
    let db = match Database::create(DB_FILE) {
        Ok(db) => db,
        Err(e) => return verdict("corrupt-data", vec![format!("open failed: {}", e)]),
    };
    let rtx = match db.begin_read() {
        Ok(t) => t,
        Err(e) => return verdict("corrupt-data", vec![format!("begin_read failed: {}", e)]),
    };
    let table = match rtx.open_table(TABLE) {
        Ok(t) => Some(t),
        Err(redb::Error::TableDoesNotExist(_)) => None,
        Err(e) => return verdict("corrupt-data", vec![format!("open_table failed: {}", e)]),
    };
    let mut bad: Vec<String> = Vec::new();
    let mut lost: Vec<u64> = Vec::new();
    let mut present: BTreeMap<u64, bool> = BTreeMap::new();
    let mut scratch: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    if let Some(table) = &table {
        for &i in &acked {
            let k = format!("k{:06}", i);
            match table.get(k.as_str()) {
                Ok(Some(v)) => {
                    if v.value() != key_value(i, &p).as_slice() {
                        bad.push(format!("acked key {} has a wrong value ({} bytes)", i, v.value().len()));
                    }
                }
                Ok(None) => lost.push(i),
                Err(e) => bad.push(format!("get acked key {} failed: {}", i, e)),
            }
        }
        match table.iter() {
            Ok(it) => {
                for item in it {
                    match item {
                        Ok((k, v)) => {
                            let k = k.value().to_string();
                            let v = v.value().to_vec();
                            if let Some(n) = k.strip_prefix('k').and_then(|s| s.parse::<u64>().ok()) {
                                if !begun.contains(&n) {
                                    bad.push(format!("key {} was never written", k));
                                } else {
                                    present.insert(n, v == key_value(n, &p));
                                    if v != key_value(n, &p) {
                                        bad.push(format!("key {} has a wrong value ({} bytes)", k, v.len()));
                                    }
                                }
                            } else if k.starts_with('s') {
                                scratch.insert(k, v);
                            } else {
                                bad.push(format!("key {:?} was never written", k));
                            }
                        }
                        Err(e) => {
                            bad.push(format!("scan failed: {}", e));
                            break;
                        }
                    }
                }
            }
            Err(e) => bad.push(format!("scan failed: {}", e)),
        }
    } else {
        lost.extend(acked.iter().cloned());
    }
    // the k keys present must be rounds 1..m, all of them (each round's durable commit holds all before)
    let m = present.keys().next_back().cloned().unwrap_or(0);
    if bad.is_empty() && lost.is_empty() {
        let holes: Vec<u64> = (1..=m).filter(|i| !present.contains_key(i)).collect();
        if !holes.is_empty() {
            bad.push(format!("keys {:?} are missing though later key {} is present", holes, m));
        }
        let want = scratch_after(m, &p);
        if scratch != want {
            let wrong: Vec<&String> = want
                .keys()
                .chain(scratch.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|k| want.get(*k) != scratch.get(*k))
                .take(10)
                .collect();
            bad.push(format!(
                "scratch keys differ from what rounds 1..{} left (k{:06} is the last key present): {:?}",
                m, m, wrong
            ));
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
            verdict("corrupt-data", vec![format!("redb panicked: {}", msg)])
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
