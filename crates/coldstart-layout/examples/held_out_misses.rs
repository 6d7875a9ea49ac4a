//! What a held-out workload's misses look like, and what fetching more with each miss would
//! save, on a model of the link: the measurement behind `docs/benchmarks/network.md`
//! ("The miss sequence of `clang -c x.c`").
//!
//! ```sh
//! cargo run --release -p coldstart-layout --example held_out_misses -- \
//!     APP HOT.json HELD-OUT.json CHUNK     # RATIO=4.7 for pieces compressed 4.7 to 1
//! ```
//!
//! APP is the packed directory, HOT.json the hot list the bundle was packed with, HELD-OUT.json
//! a `run --record` of the held-out workload, CHUNK the cold chunk size. The pages of the
//! held-out record outside the hot set are the misses, in first-touch order, on a grid of
//! CHUNK-sized cold chunks. Each policy says what a miss brings with its own chunk: nothing
//! (`base`), the next K chunks (`nextK`), the chunks holding the direct callees (decoded by
//! [`CallGraph`], through the PLT across the packed ELF files) of the functions in the missed
//! page or chunk (`calls-page`, `calls-chunk`, at most N of them with `-maxN`), or the window
//! `coldstart mount` uses (`eq3`: the next chunks while `p (l + t) > t`, `p` counted per place
//! as it goes). A miss is one round trip of 40 ms plus its bytes at 20 Mbit/s (times RATIO).
use std::collections::{HashMap, HashSet};
use std::path::Path;

use coldstart_layout::callgraph::{CallGraph, Callee};

fn touches(p: &str) -> Vec<(String, u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    v["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["path"].as_str().unwrap().to_string(),
                t["offset"].as_u64().unwrap(),
                t["length"].as_u64().unwrap(),
            )
        })
        .collect()
}

struct Mod {
    // function file ranges sorted by start
    funcs: Vec<(u64, u64)>,
    callees: Vec<Vec<(String, u64)>>, // (path, file offset of callee entry)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let app = Path::new(&a[1]);
    let hot = touches(&a[2]);
    let held = touches(&a[3]);
    let chunk: u64 = a[4].parse().unwrap();
    let rtt = 0.040;
    let bw = 2.5e6 * std::env::var("RATIO").map_or(1.0, |r| r.parse::<f64>().unwrap());
    let paths: HashSet<String> = held.iter().map(|t| t.0.clone()).collect();
    // graphs
    let mut graphs: HashMap<String, (CallGraph, coldstart_elf::ElfInfo)> = HashMap::new();
    for p in &paths {
        let full = app.join(p);
        if !coldstart_elf::is_elf(&full) {
            continue;
        }
        let info =
            coldstart_elf::ElfInfo::open(&full, &coldstart_elf::SymbolOptions::default()).unwrap();
        let g = CallGraph::read(&full, std::env::var("REFS").is_ok()).unwrap();
        eprintln!("{p}: {} functions", g.len());
        graphs.insert(p.clone(), (g, info));
    }
    let mut mods: HashMap<String, Mod> = HashMap::new();
    for (p, (g, info)) in &graphs {
        let mut funcs = Vec::new();
        let mut callees = Vec::new();
        for (i, f) in info.functions.iter().enumerate() {
            let off = info.vaddr_to_offset(f.address).unwrap_or(u64::MAX);
            funcs.push((off, off + f.size.max(1)));
            let mut cs = Vec::new();
            for c in &g.callees[i] {
                match c {
                    Callee::Local(j) => {
                        if let Some(o) = info.vaddr_to_offset(info.functions[*j].address) {
                            cs.push((p.clone(), o));
                        }
                    }
                    Callee::Import(name) => {
                        for (q, (g2, info2)) in &graphs {
                            if q == p {
                                continue;
                            }
                            if let Some(j) = g2.find(name) {
                                if let Some(o) = info2.vaddr_to_offset(info2.functions[j].address) {
                                    cs.push((q.clone(), o));
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            callees.push(cs);
        }
        mods.insert(p.clone(), Mod { funcs, callees });
    }
    // pages
    let page_set = |ts: &[(String, u64, u64)]| -> Vec<(String, u64)> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (p, o, l) in ts {
            for pg in o / 4096..(o + l).div_ceil(4096) {
                if seen.insert((p.clone(), pg)) {
                    out.push((p.clone(), pg));
                }
            }
        }
        out
    };
    let hotp: HashSet<(String, u64)> = page_set(&hot).into_iter().collect();
    let heldp = page_set(&held);
    let miss_pages: Vec<(String, u64)> =
        heldp.iter().filter(|x| !hotp.contains(*x)).cloned().collect();
    let used_chunks: HashSet<(String, u64)> =
        miss_pages.iter().map(|(p, pg)| (p.clone(), pg * 4096 / chunk)).collect();
    eprintln!(
        "held-out pages {}, missing {}, distinct chunks {}",
        heldp.len(),
        miss_pages.len(),
        used_chunks.len()
    );
    // sequence stats: distance between consecutive miss chunks
    {
        let mut prev: Option<(String, u64)> = None;
        let mut same_file = 0;
        let mut near = [0usize; 4];
        let mut n = 0;
        let mut seenc = HashSet::new();
        for (p, pg) in &miss_pages {
            let c = pg * 4096 / chunk;
            if !seenc.insert((p.clone(), c)) {
                continue;
            }
            if let Some((pp, pc)) = &prev {
                n += 1;
                if pp == p {
                    same_file += 1;
                    let d = (c as i64 - *pc as i64).unsigned_abs();
                    for (k, lim) in [1u64, 4, 16, 64].iter().enumerate() {
                        if d <= *lim {
                            near[k] += 1;
                        }
                    }
                }
            }
            prev = Some((p.clone(), c));
        }
        eprintln!(
            "consecutive chunk misses {n}: same file {same_file}, within 1/4/16/64 chunks {:?}",
            near
        );
    }
    // callees of functions overlapping a page range
    let callees_of = |p: &str, from: u64, to: u64| -> Vec<(String, u64)> {
        let Some(m) = mods.get(p) else { return vec![] };
        let mut out = Vec::new();
        for (i, &(s, e)) in m.funcs.iter().enumerate() {
            if s < to && e > from {
                out.extend(m.callees[i].iter().cloned());
            }
        }
        out
    };
    for policy in [
        "eq3",
        "base",
        "next1",
        "next2",
        "next4",
        "next8",
        "calls-chunk+next2",
        "calls-page",
        "calls-chunk",
        "calls-page-max4",
        "calls-page-max8",
        "calls-page-max16",
        "calls-chunk-max4",
        "calls-chunk-max8",
        "calls-chunk-max2",
    ] {
        let mut have: HashSet<(String, u64)> = HashSet::new();
        let mut rounds = 0;
        let mut bytes = 0u64;
        let mut time = 0.0;
        let mut extra_total = 0;
        let mut fetched_extra: HashSet<(String, u64)> = HashSet::new();
        let mut place: HashMap<(String, u64), usize> = HashMap::new();
        let mut eq3_fetched = [0u64; 16];
        let mut eq3_used = [0u64; 16];
        for (p, pg) in &miss_pages {
            let c = pg * 4096 / chunk;
            if let Some(k) = place.remove(&(p.clone(), c)) {
                eq3_used[k - 1] += 1;
            }
            if have.contains(&(p.clone(), c)) {
                continue;
            }
            rounds += 1;
            let mut want = vec![(p.clone(), c)];
            let cand: Vec<(String, u64)> = match policy {
                "base" => vec![],
                "eq3" => {
                    let mut v = Vec::new();
                    for k in 1..=16u64 {
                        let x = (p.clone(), c + k);
                        let pk = (eq3_used[k as usize - 1] as f64 + 1.0)
                            / (eq3_fetched[k as usize - 1] as f64 + 2.0);
                        let t = chunk as f64 / bw;
                        if have.contains(&x) || pk * (rtt + t) <= t {
                            break;
                        }
                        eq3_fetched[k as usize - 1] += 1;
                        place.insert(x.clone(), k as usize);
                        v.push(x);
                    }
                    v
                }
                x if x.starts_with("next") => {
                    (1..=x[4..].parse::<u64>().unwrap()).map(|k| (p.clone(), c + k)).collect()
                }
                "calls-chunk+next2" => {
                    let mut v: Vec<(String, u64)> = vec![(p.clone(), c + 1), (p.clone(), c + 2)];
                    v.extend(
                        callees_of(p, c * chunk, (c + 1) * chunk)
                            .into_iter()
                            .map(|(q, o)| (q, o / chunk)),
                    );
                    v
                }
                x if x.starts_with("calls-chunk") => callees_of(p, c * chunk, (c + 1) * chunk)
                    .into_iter()
                    .map(|(q, o)| (q, o / chunk))
                    .collect(),
                _ => callees_of(p, pg * 4096, pg * 4096 + 4096)
                    .into_iter()
                    .map(|(q, o)| (q, o / chunk))
                    .collect(),
            };
            let max = match policy {
                "calls-page-max4" => 4,
                "calls-page-max8" => 8,
                "calls-page-max16" => 16,
                "calls-chunk-max4" => 4,
                "calls-chunk-max8" => 8,
                "calls-chunk-max2" => 2,
                _ => usize::MAX,
            };
            let mut extra = 0;
            for x in cand {
                if extra >= max {
                    break;
                }
                // a chunk fully hot would not be fetched: approximate by skipping chunks whose every page is hot
                let all_hot = (x.1 * chunk / 4096..(x.1 + 1) * chunk / 4096)
                    .all(|q| hotp.contains(&(x.0.clone(), q)));
                if all_hot || have.contains(&x) || want.contains(&x) {
                    continue;
                }
                want.push(x.clone());
                fetched_extra.insert(x);
                extra += 1;
            }
            extra_total += extra;
            let b = want.len() as u64 * chunk;
            bytes += b;
            time += rtt + b as f64 / bw;
            have.extend(want);
        }
        let useful = fetched_extra.iter().filter(|x| used_chunks.contains(*x)).count();
        println!(
            "chunk {chunk} {policy:18} rounds {rounds:5} bytes {:8.1} MB extra {extra_total:6} useful {useful:5} est miss time {time:6.1} s",
            bytes as f64 / 1e6
        );
    }
}
