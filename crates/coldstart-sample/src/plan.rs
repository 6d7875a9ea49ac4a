//! The plan: every random choice, made once from the config, before any C is written.
//!
//! Both the C sources and the truth manifest are rendered from this one plan, so what the
//! manifest says the program runs at start-up is by construction what the C calls.

use crate::config::Config;
use crate::manifest::{Access, DataRead, Function, Module, Role, ThreadInfo, Workload};
use crate::rng::Rng;

/// Page size the data plan is written in (x86-64 Linux base pages).
pub const PAGE_SIZE: u64 = 4096;

/// Names of the workloads, in the order they appear everywhere.
pub const WORKLOADS: [&str; 2] = ["a", "b"];

/// One function of the program, with the body constants of a work function.
#[derive(Debug, Clone)]
pub(crate) struct PlannedFn {
    pub name: String,
    pub module: Module,
    pub role: Role,
    /// For work functions: (destination slot, source slot, multiplier, addend, shift) per statement.
    pub body: Vec<(u8, u8, u64, u64, u8)>,
}

/// A data file the generator writes.
#[derive(Debug, Clone)]
pub(crate) struct DataFile {
    pub path: String,
    pub access: Access,
    pub bytes: Vec<u8>,
}

/// The calls one workload makes, as function ids.
#[derive(Debug, Clone)]
pub(crate) struct WorkloadPlan {
    pub name: String,
    /// Calls of cs_startup_X before loading data (with repeats).
    pub part1: Vec<usize>,
    /// Calls after loading data.
    pub part2: Vec<usize>,
    /// Calls cs_plugin_startup_X makes.
    pub plugin: Vec<usize>,
    /// Calls of each thread group.
    pub groups: Vec<Vec<usize>>,
    /// Data files read whole, by index into `Plan::data`.
    pub reads: Vec<usize>,
    /// Pages of the mapped file touched, in order.
    pub mapped_pages: Vec<u64>,
    /// ids of the driver functions of this workload.
    pub startup_fn: usize,
    pub plugin_startup_fn: usize,
    pub group_fns: Vec<usize>,
}

/// Everything the emitters and the manifest need.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub config: Config,
    pub functions: Vec<PlannedFn>,
    /// Work function ids per module, in source order.
    pub work: [(Module, Vec<usize>); 4],
    pub workloads: Vec<WorkloadPlan>,
    pub data: Vec<DataFile>,
    /// Index in `data` of the mapped file.
    pub mapped: usize,
    pub main_fn: usize,
    pub load_data_fn: usize,
    pub load_plugin_fn: usize,
    pub thread_entry_fns: Vec<usize>,
}

/// Module shares of the work functions.
const SHARES: [(Module, f64); 4] =
    [(Module::Exe, 0.40), (Module::Liba, 0.25), (Module::Libb, 0.25), (Module::Plugin, 0.10)];

/// Add a function without a body to `functions`, returning its id.
fn add(functions: &mut Vec<PlannedFn>, name: String, module: Module, role: Role) -> usize {
    functions.push(PlannedFn { name, module, role, body: Vec::new() });
    functions.len() - 1
}

/// Add the work functions to `functions`, module by module in source order, each module its
/// share of `config.functions` and each function its random body; returns their ids per
/// module.
fn work_functions(
    config: &Config,
    root: &Rng,
    functions: &mut Vec<PlannedFn>,
) -> Vec<(Module, Vec<usize>)> {
    let mut counts = [0usize; 4];
    let mut assigned = 0;
    for (i, (_, share)) in SHARES.iter().enumerate() {
        counts[i] = ((config.functions as f64) * share).round() as usize;
        assigned += counts[i];
    }
    // Rounding leftovers go to (or come from) the executable.
    counts[0] = (counts[0] + config.functions).saturating_sub(assigned);
    let mut body_rng = root.fork(1);
    let mut work: Vec<(Module, Vec<usize>)> = Vec::new();
    for (i, (module, _)) in SHARES.iter().enumerate() {
        let mut ids = Vec::with_capacity(counts[i]);
        for k in 0..counts[i] {
            let name = format!("cs_{}_f{:05}", module.as_str(), k);
            let id = add(functions, name, *module, Role::Work);
            functions[id].body = (0..config.body_statements)
                .map(|_| {
                    let r = body_rng.next_u64();
                    (
                        (r & 63) as u8,
                        ((r >> 6) & 63) as u8,
                        body_rng.next_u64() | 1,
                        body_rng.next_u64(),
                        ((r >> 12) % 29 + 1) as u8,
                    )
                })
                .collect();
            ids.push(id);
        }
        work.push((*module, ids));
    }
    work
}

/// The data files: a configuration text, a strings file, one input per workload (all read
/// whole) and the mapped table; with the index of the mapped one.
fn data_files(config: &Config, root: &Rng) -> (Vec<DataFile>, usize) {
    let mut data_rng = root.fork(2);
    let mut data = Vec::new();
    let mut config_txt = String::from("# sample program configuration (generated)\n");
    let mut k = 0;
    while config_txt.len() < 2500 {
        config_txt.push_str(&format!("key{k} = {}\n", data_rng.next_u64()));
        k += 1;
    }
    data.push(DataFile {
        path: "data/config.txt".into(),
        access: Access::Read,
        bytes: config_txt.into_bytes(),
    });
    let strings_len = (config.mapped_pages / 4).max(4) as u64 * PAGE_SIZE;
    data.push(DataFile {
        path: "data/strings.bin".into(),
        access: Access::Read,
        bytes: random_bytes(&mut data_rng, strings_len as usize),
    });
    for w in WORKLOADS {
        data.push(DataFile {
            path: format!("data/workload-{w}.dat"),
            access: Access::Read,
            bytes: random_bytes(&mut data_rng, 2 * PAGE_SIZE as usize + 123),
        });
    }
    let mapped = data.len();
    data.push(DataFile {
        path: "data/table.bin".into(),
        access: Access::Mmap,
        bytes: random_bytes(&mut data_rng, config.mapped_pages * PAGE_SIZE as usize),
    });
    (data, mapped)
}

/// The plan of workload number `w` (named `name`): its driver functions, added to
/// `functions`, and its calls of the hot functions `hot` (one list per module, in
/// [`SHARES`] order; the plugin's last), split between start-up, data loading, the plugin and
/// the thread groups; it touches `mapped_pages` of the mapped file.
fn workload(
    config: &Config,
    root: &Rng,
    functions: &mut Vec<PlannedFn>,
    (w, name): (usize, &str),
    hot: &[Vec<usize>],
    mapped_pages: Vec<u64>,
) -> WorkloadPlan {
    let mut rng = root.fork(10 + w as u64);
    let startup_fn = add(functions, format!("cs_startup_{name}"), Module::Exe, Role::Driver);
    let plugin_startup_fn =
        add(functions, format!("cs_plugin_startup_{name}"), Module::Plugin, Role::Driver);
    let group_fns: Vec<usize> = (0..config.thread_groups)
        .map(|g| add(functions, format!("cs_group_{name}_{g}"), Module::Exe, Role::Driver))
        .collect();

    let merged = interleave(&mut rng, hot[..3].to_vec());
    let threaded = ((merged.len() as f64) * config.thread_share).round() as usize;
    let main_part = merged.len() - threaded;
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); config.thread_groups];
    for (i, id) in merged[main_part..].iter().enumerate() {
        groups[i * config.thread_groups / threaded.max(1)].push(*id);
    }
    let main_calls = with_repeats(&mut rng, &merged[..main_part]);
    let split = main_calls.len() / 3;
    let groups = groups.iter().map(|g| with_repeats(&mut rng, g)).collect();
    let plugin = with_repeats(&mut rng, &hot[3]);
    WorkloadPlan {
        name: name.to_string(),
        part1: main_calls[..split].to_vec(),
        part2: main_calls[split..].to_vec(),
        plugin,
        groups,
        reads: vec![0, 1, 2 + w],
        mapped_pages,
        startup_fn,
        plugin_startup_fn,
        group_fns,
    }
}

/// The lists `queues` interleaved at random, each keeping its own order.
fn interleave(rng: &mut Rng, mut queues: Vec<Vec<usize>>) -> Vec<usize> {
    let mut merged = Vec::new();
    loop {
        let left: usize = queues.iter().map(Vec::len).sum();
        if left == 0 {
            break;
        }
        let mut pick = rng.below(left);
        for q in queues.iter_mut() {
            if pick < q.len() {
                merged.push(q.remove(0));
                break;
            }
            pick -= q.len();
        }
    }
    merged
}

impl Plan {
    pub(crate) fn new(config: &Config) -> Plan {
        let root = Rng::new(config.seed);
        let mut functions: Vec<PlannedFn> = Vec::new();
        let work = work_functions(config, &root, &mut functions);

        // Driver functions (the program's own start-up machinery).
        let main_fn = add(&mut functions, "main".into(), Module::Exe, Role::Driver);
        let load_data_fn = add(&mut functions, "cs_load_data".into(), Module::Exe, Role::Driver);
        let load_plugin_fn =
            add(&mut functions, "cs_load_plugin".into(), Module::Exe, Role::Driver);
        add(&mut functions, "cs_run_all".into(), Module::Exe, Role::Driver);
        add(&mut functions, "cs_plugin_all".into(), Module::Plugin, Role::Driver);
        let thread_entry_fns: Vec<usize> = (0..config.thread_groups)
            .map(|t| add(&mut functions, format!("cs_thread_entry_{t}"), Module::Exe, Role::Driver))
            .collect();

        let (data, mapped) = data_files(config, &root);

        // Hot sets per module: `shared` common functions, the rest unique to each workload.
        let mut hot_rng = root.fork(3);
        let mut per_module: Vec<[Vec<usize>; 2]> = Vec::new();
        for (_, ids) in &work {
            per_module.push(pick_two(
                &mut hot_rng,
                ids,
                config.hot_fraction,
                config.overlap,
                config.unique_run,
            ));
        }
        let pages: Vec<u64> = (0..config.mapped_pages as u64).collect();
        let page_sets = pick_two(&mut hot_rng, &pages, 0.25, config.overlap, 1);

        let workloads = WORKLOADS
            .iter()
            .enumerate()
            .map(|(w, name)| {
                let hot = per_module.iter().map(|m| m[w].clone()).collect::<Vec<_>>();
                workload(config, &root, &mut functions, (w, name), &hot, page_sets[w].clone())
            })
            .collect();

        let work = [work[0].clone(), work[1].clone(), work[2].clone(), work[3].clone()];
        Plan {
            config: config.clone(),
            functions,
            work,
            workloads,
            data,
            mapped,
            main_fn,
            load_data_fn,
            load_plugin_fn,
            thread_entry_fns,
        }
    }

    fn names(&self, ids: impl IntoIterator<Item = usize>) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        ids.into_iter()
            .filter(|id| seen.insert(*id))
            .map(|id| self.functions[id].name.clone())
            .collect()
    }

    /// The truth about one workload: first-touch orders per thread and data reads.
    pub(crate) fn workload_truth(&self, w: &WorkloadPlan) -> Workload {
        let mut main_ids = vec![self.main_fn, w.startup_fn];
        main_ids.extend(&w.part1);
        main_ids.push(self.load_data_fn);
        main_ids.extend(&w.part2);
        main_ids.push(self.load_plugin_fn);
        main_ids.push(w.plugin_startup_fn);
        main_ids.extend(&w.plugin);
        let groups: Vec<Vec<String>> = w
            .group_fns
            .iter()
            .zip(&w.groups)
            .map(|(g, calls)| self.names(std::iter::once(*g).chain(calls.iter().copied())))
            .collect();
        let main_thread = self.names(main_ids);
        let mut startup = main_thread.clone();
        for g in &groups {
            startup.extend(g.iter().cloned());
        }
        let mut data = Vec::new();
        for &r in &w.reads {
            let f = &self.data[r];
            data.push(DataRead {
                path: f.path.clone(),
                access: Access::Read,
                pages: (0..(f.bytes.len() as u64).div_ceil(PAGE_SIZE)).collect(),
            });
        }
        data.push(DataRead {
            path: self.data[self.mapped].path.clone(),
            access: Access::Mmap,
            pages: w.mapped_pages.clone(),
        });
        Workload {
            name: w.name.clone(),
            args: vec!["--workload".into(), w.name.clone()],
            startup,
            main_thread,
            thread_groups: groups,
            data,
        }
    }

    pub(crate) fn function_table(&self) -> Vec<Function> {
        self.functions
            .iter()
            .map(|f| Function { name: f.name.clone(), module: f.module, role: f.role })
            .collect()
    }

    pub(crate) fn thread_info(&self) -> ThreadInfo {
        ThreadInfo {
            groups: self.config.thread_groups,
            entries: self
                .thread_entry_fns
                .iter()
                .map(|&i| self.functions[i].name.clone())
                .collect(),
        }
    }
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Two subsets of `pool` of equal size (`fraction` of it) sharing `overlap` of their members.
///
/// The shared members are scattered over the pool at random. The members of each workload's
/// own are taken in runs of up to `run` neighbours in pool (source) order, the way a feature
/// only one workload uses sits together in its own source file. The first set is in random
/// order; the second keeps the first's order for the shared members and has its own members
/// inserted at random places.
fn pick_two<T: Copy>(
    rng: &mut Rng,
    pool: &[T],
    fraction: f64,
    overlap: f64,
    run: usize,
) -> [Vec<T>; 2] {
    let size = ((pool.len() as f64) * fraction).round().max(1.0) as usize;
    let shared = ((size as f64) * overlap).round() as usize;
    let own = size - shared;
    let mut order: Vec<usize> = (0..pool.len()).collect();
    rng.shuffle(&mut order);
    let mut taken = vec![false; pool.len()];
    for &i in &order[..shared] {
        taken[i] = true;
    }
    // The rest, in pool order: runs are neighbours here.
    let rest: Vec<usize> = (0..pool.len()).filter(|&i| !taken[i]).collect();
    let mut used = vec![false; rest.len()];
    let mut take_runs = |rng: &mut Rng| -> Vec<usize> {
        let mut got = Vec::with_capacity(own);
        let mut tries = 0;
        while got.len() < own {
            tries += 1;
            let start = if tries < 64 * (own + 1) {
                rng.below(rest.len())
            } else {
                // Nearly full: take the first free one.
                used.iter().position(|u| !u).expect("pool holds both sets")
            };
            if used[start] {
                continue;
            }
            for k in start..(start + run.max(1)).min(rest.len()) {
                if used[k] || got.len() == own {
                    break;
                }
                used[k] = true;
                got.push(rest[k]);
            }
        }
        got
    };
    let a_own = take_runs(rng);
    let b_own = take_runs(rng);
    let mut a: Vec<usize> = order[..shared].iter().chain(&a_own).copied().collect();
    rng.shuffle(&mut a);
    let a_own_set: std::collections::HashSet<usize> = a_own.iter().copied().collect();
    let mut b: Vec<usize> = a.iter().filter(|x| !a_own_set.contains(x)).copied().collect();
    for x in b_own {
        let at = rng.below(b.len() + 1);
        b.insert(at, x);
    }
    [a.into_iter().map(|i| pool[i]).collect(), b.into_iter().map(|i| pool[i]).collect()]
}

/// The call list: each function once in order, plus about one repeat call in ten of a
/// function already called (repeats do not change the first-touch order).
fn with_repeats(rng: &mut Rng, ids: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(ids.len() + ids.len() / 8);
    for (i, &id) in ids.iter().enumerate() {
        out.push(id);
        if i > 0 && rng.unit() < 0.1 {
            out.push(ids[rng.below(i)]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_two_sizes_and_overlap() {
        let pool: Vec<usize> = (0..1000).collect();
        let mut rng = Rng::new(5);
        let [a, b] = pick_two(&mut rng, &pool, 0.2, 0.75, 4);
        assert_eq!(a.len(), 200);
        assert_eq!(b.len(), 200);
        let shared = a.iter().filter(|x| b.contains(x)).count();
        assert_eq!(shared, 150);
        // b keeps a's order for the shared members.
        let in_b: Vec<usize> = b.iter().filter(|x| a.contains(x)).copied().collect();
        let in_a: Vec<usize> = a.iter().filter(|x| b.contains(x)).copied().collect();
        assert_eq!(in_a, in_b);
        // Each workload's own members come in runs of neighbours; shared ones are scattered.
        let own_a: Vec<usize> = {
            let mut v: Vec<usize> = a.iter().filter(|x| !b.contains(x)).copied().collect();
            v.sort();
            v
        };
        let neighbours = own_a.windows(2).filter(|w| w[1] - w[0] <= 2).count();
        assert!(neighbours >= own_a.len() / 2, "own members not in runs: {own_a:?}");
        let [s1, _] = pick_two(&mut Rng::new(9), &pool, 0.2, 0.75, 1);
        let mut s1 = s1;
        s1.sort();
        let adjacent = s1.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(adjacent < s1.len() / 3, "run 1 should scatter: {adjacent} adjacent");
    }

    #[test]
    fn repeats_keep_first_touch_order() {
        let ids: Vec<usize> = (100..400).collect();
        let calls = with_repeats(&mut Rng::new(3), &ids);
        assert!(calls.len() > ids.len(), "some repeats");
        let mut seen = std::collections::HashSet::new();
        let first: Vec<usize> = calls.into_iter().filter(|c| seen.insert(*c)).collect();
        assert_eq!(first, ids);
    }

    #[test]
    fn every_function_of_a_workload_is_called_and_sets_are_disjoint_per_thread() {
        let plan = Plan::new(&Config::default());
        for w in &plan.workloads {
            let truth = plan.workload_truth(w);
            let main: std::collections::HashSet<&String> = truth.main_thread.iter().collect();
            for g in &truth.thread_groups {
                assert!(g.iter().all(|f| !main.contains(f)));
            }
            assert_eq!(truth.startup[0], "main");
            assert_eq!(truth.startup[1], format!("cs_startup_{}", w.name));
        }
    }
}
