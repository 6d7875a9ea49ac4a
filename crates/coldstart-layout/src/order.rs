//! Ordering algorithms: from the first-touch sequences of one or more workloads to one list
//! of hot functions, hottest-earliest first. Functions that no workload touched are never
//! listed: the linker places them after the listed ones, so hot and cold never interleave.
//!
//! - [`Algorithm::FirstTouch`]: the paper's order. With several workloads the first one
//!   leads and each later one appends the functions the earlier ones did not touch.
//! - [`Algorithm::Merged`]: every workload counts, by its weight. A function's key is the
//!   weighted mean of its normalised first-touch rank over all workloads, a workload that
//!   did not touch it counting as rank 1 (the end): functions every workload needs come
//!   first in their common order, functions only one workload needs drift back in
//!   proportion to how few need them.
//! - [`Algorithm::Cluster`]: Pettis and Hansen's "closest is best" on temporal data, as
//!   Chromium's orderfile clusterer applies it: functions touched close together in time
//!   (within a window of the first-touch sequence) get an affinity that decays with their
//!   distance; clusters are merged along the heaviest affinities, up to a size cap (a few
//!   pages), joining the ends that are closest; clusters are then laid out by the mean
//!   first-touch rank of their members.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::input::{find_module, Workload};
use crate::LayoutError;

/// An ordering algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// The paper's order: first touch, later workloads appending what earlier ones missed.
    FirstTouch,
    /// Every workload counts, by its weight: the weighted mean of normalised ranks.
    Merged,
    /// Pettis and Hansen's clustering on temporal affinity.
    Cluster,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 3] = [Algorithm::FirstTouch, Algorithm::Merged, Algorithm::Cluster];

    /// Its name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FirstTouch => "first-touch",
            Algorithm::Merged => "merged",
            Algorithm::Cluster => "cluster",
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown algorithm `{s}`: use first-touch, merged or cluster"))
    }
}

/// Where the functions no training workload touched go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unprofiled {
    /// Where the linker puts them: input order, after the touched ones.
    Input,
    /// The ones the touched functions can call (static call graph, nearest and likeliest
    /// first: [`crate::callgraph`]) right after the touched ones; the rest in input order.
    Callees,
    /// As `Callees`, counting references too: functions whose address the code takes, and
    /// the functions of the tables of pointers it refers to (vtables, handler tables).
    References,
    /// As `Callees`, then the siblings of the touched functions: the other implementations
    /// of the trait methods and virtual methods they are, the other instances of their
    /// generic functions ([`crate::siblings`]).
    Siblings,
}

impl Unprofiled {
    /// Every placement.
    pub const ALL: [Unprofiled; 4] =
        [Unprofiled::Input, Unprofiled::Callees, Unprofiled::References, Unprofiled::Siblings];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Unprofiled::Input => "input",
            Unprofiled::Callees => "callees",
            Unprofiled::References => "references",
            Unprofiled::Siblings => "siblings",
        }
    }
}

impl std::str::FromStr for Unprofiled {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Unprofiled::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            format!("unknown placement `{s}` for unprofiled code: use input, callees, references or siblings")
        })
    }
}

/// Options of the clustering algorithm.
#[derive(Debug, Clone, Copy)]
pub struct ClusterOptions {
    /// How many later functions of the sequence each function gains affinity with.
    pub window: usize,
    /// Largest cluster, in bytes.
    pub max_cluster_bytes: u64,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions { window: 8, max_cluster_bytes: 4 * 4096 }
    }
}

/// One function of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderedFunction {
    /// Raw names (aliases), the preferred first.
    pub names: Vec<String>,
    /// Size in bytes.
    pub size: u64,
}

impl OrderedFunction {
    /// The preferred name.
    pub fn name(&self) -> &str {
        &self.names[0]
    }
}

/// A function order for one module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The module ordered (the first, when the order holds several: [`Order::runs`]).
    pub module: PathBuf,
    /// The algorithm that made it.
    pub algorithm: Algorithm,
    /// The functions, module after module ([`runs`](Self::runs)): each module's touched
    /// ones, then the untouched ones [`Unprofiled::Callees`] (or `References`) placed after
    /// them.
    pub functions: Vec<OrderedFunction>,
    /// The modules of `functions`, in order.
    #[serde(default)]
    pub runs: Vec<ModuleRun>,
    /// Where the untouched functions went.
    #[serde(default = "unprofiled_input")]
    pub unprofiled: Unprofiled,
    /// Hot data objects in first-touch order (empty unless asked for with page data).
    #[serde(default)]
    pub data: Vec<crate::data::DataSymbol>,
}

/// One module's part of an order: `touched` functions, then `untouched` ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRun {
    /// The module.
    pub path: PathBuf,
    /// Its touched functions, first.
    pub touched: usize,
    /// Its untouched functions placed after them.
    pub untouched: usize,
}

fn unprofiled_input() -> Unprofiled {
    Unprofiled::Input
}

impl Order {
    /// How many functions some training workload touched.
    pub fn touched(&self) -> usize {
        self.runs.iter().map(|r| r.touched).sum()
    }

    /// Total bytes of the ordered functions.
    pub fn bytes(&self) -> u64 {
        self.functions.iter().map(|f| f.size).sum()
    }
}

/// Compute an order for the module chosen by `module` (or the first module of the first
/// workload: the executable) from `workloads`.
pub fn compute(
    workloads: &[Workload],
    module: Option<&str>,
    algorithm: Algorithm,
    cluster: ClusterOptions,
) -> Result<Order, LayoutError> {
    let first = workloads.first().ok_or_else(|| LayoutError::Invalid("no profile given".into()))?;
    let chosen = find_module(&first.modules, None, module)?;
    let module_path = chosen.path.clone();
    let wanted = module_path.file_name().map(|f| f.to_string_lossy().into_owned());
    // Each workload's sequence for that module (matched by file name: workloads may have
    // been recorded from different directories).
    let mut sequences: Vec<(f64, Vec<OrderedFunction>)> = Vec::new();
    for w in workloads {
        let m = find_module(&w.modules, None, wanted.as_deref().or(module));
        let Ok(m) = m else { continue };
        let mut seen = std::collections::HashSet::new();
        let seq = m
            .functions
            .iter()
            .filter(|t| seen.insert(t.name().to_owned()))
            .map(|t| OrderedFunction { names: t.names.clone(), size: t.size })
            .collect();
        sequences.push((w.weight.max(0.0), seq));
    }
    let functions = match algorithm {
        Algorithm::FirstTouch => first_touch(&sequences),
        Algorithm::Merged => merged(&sequences),
        Algorithm::Cluster => clustered(&sequences, cluster),
    };
    if functions.is_empty() {
        return Err(LayoutError::EmptyOrder { module: module_path.display().to_string() });
    }
    let runs =
        vec![ModuleRun { path: module_path.clone(), touched: functions.len(), untouched: 0 }];
    Ok(Order {
        module: module_path,
        algorithm,
        functions,
        runs,
        unprofiled: Unprofiled::Input,
        data: Vec::new(),
    })
}

/// Whether a module lives in the system's library directories (not rebuilt by the user).
pub fn is_system_module(path: &std::path::Path) -> bool {
    ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// One order for every module of the first workload outside the system directories (the
/// executable and the program's own libraries), module by module in first-touch order.
/// Each link of a build takes the names it defines from it and ignores the others.
pub fn compute_all(
    workloads: &[Workload],
    algorithm: Algorithm,
    cluster: ClusterOptions,
) -> Result<Order, LayoutError> {
    compute_modules(workloads, &own_modules(workloads), algorithm, cluster)
}

/// The program's own modules in the first workload, the executable first (then in
/// first-touch order): the executable wherever it lives, every module outside the system
/// library directories, and the modules under the executable's installation directory (its
/// directory, or the one above a `bin`, `sbin` or `libexec` directory, unless that is a
/// directory programs share, like `/usr`): a program packaged under `/usr/lib/NAME/` (Debian's
/// Firefox ESR and its `libxul.so`) keeps its libraries.
pub fn own_modules(workloads: &[Workload]) -> Vec<PathBuf> {
    let Some(first) = workloads.first() else { return Vec::new() };
    let exe = find_module(&first.modules, None, None).ok().map(|m| m.path.clone());
    let prefix = exe.as_deref().and_then(install_prefix);
    let mut own: Vec<PathBuf> = first
        .modules
        .iter()
        .filter(|m| {
            Some(&m.path) == exe.as_ref()
                || !is_system_module(&m.path)
                || prefix.as_ref().is_some_and(|p| m.path.starts_with(p))
        })
        .map(|m| m.path.clone())
        .collect();
    if let Some(i) = own.iter().position(|p| Some(p) == exe.as_ref()) {
        let exe = own.remove(i);
        own.insert(0, exe);
    }
    own
}

/// The directory a program is installed in: its executable's directory, or the one above
/// when that is `bin`, `sbin` or `libexec`; `None` for directories programs share.
fn install_prefix(exe: &std::path::Path) -> Option<PathBuf> {
    let mut dir = exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "bin" || n == "sbin" || n == "libexec") {
        dir = dir.parent()?;
    }
    let shared = [
        "/",
        "/usr",
        "/usr/local",
        "/opt",
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
    ];
    (!shared.iter().any(|s| dir == std::path::Path::new(s))).then(|| dir.to_owned())
}

/// One order for `modules` (paths or file names), module after module; modules no
/// workload touched a function of are skipped.
pub fn compute_modules(
    workloads: &[Workload],
    modules: &[PathBuf],
    algorithm: Algorithm,
    cluster: ClusterOptions,
) -> Result<Order, LayoutError> {
    let mut all: Option<Order> = None;
    let mut seen = std::collections::HashSet::new();
    for m in modules {
        let name = m.display().to_string();
        let Ok(o) = compute(workloads, Some(&name), algorithm, cluster) else { continue };
        let acc = all.get_or_insert_with(|| Order {
            module: o.module.clone(),
            algorithm,
            functions: Vec::new(),
            runs: Vec::new(),
            unprofiled: Unprofiled::Input,
            data: Vec::new(),
        });
        let mut run = ModuleRun { path: o.module.clone(), touched: 0, untouched: 0 };
        for f in o.functions {
            if seen.insert(f.name().to_owned()) {
                acc.functions.push(f);
                run.touched += 1;
            }
        }
        acc.runs.push(run);
    }
    all.ok_or_else(|| LayoutError::EmptyOrder {
        module: modules.iter().map(|m| m.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

fn first_touch(sequences: &[(f64, Vec<OrderedFunction>)]) -> Vec<OrderedFunction> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (_, seq) in sequences {
        for f in seq {
            if seen.insert(f.name().to_owned()) {
                out.push(f.clone());
            }
        }
    }
    out
}

/// All distinct functions with the index of their first appearance (for stable ties).
fn universe(sequences: &[(f64, Vec<OrderedFunction>)]) -> Vec<OrderedFunction> {
    first_touch(sequences)
}

fn merged(sequences: &[(f64, Vec<OrderedFunction>)]) -> Vec<OrderedFunction> {
    let all = universe(sequences);
    let total: f64 = sequences.iter().map(|(w, _)| w).sum();
    if total <= 0.0 {
        return all;
    }
    let ranks: Vec<HashMap<&str, f64>> = sequences
        .iter()
        .map(|(_, seq)| {
            let n = seq.len().max(1) as f64;
            seq.iter().enumerate().map(|(i, f)| (f.name(), i as f64 / n)).collect()
        })
        .collect();
    let mut keyed: Vec<(f64, usize, OrderedFunction)> = all
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let key = sequences
                .iter()
                .zip(&ranks)
                .map(|((w, _), r)| w * r.get(f.name()).copied().unwrap_or(1.0))
                .sum::<f64>()
                / total;
            (key, i, f)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, _, f)| f).collect()
}

fn clustered(
    sequences: &[(f64, Vec<OrderedFunction>)],
    options: ClusterOptions,
) -> Vec<OrderedFunction> {
    let all = universe(sequences);
    let index: HashMap<&str, usize> = all.iter().enumerate().map(|(i, f)| (f.name(), i)).collect();
    // Mean normalised rank per function (the layout key of clusters).
    let mut rank_sum = vec![0.0f64; all.len()];
    let mut rank_weight = vec![0.0f64; all.len()];
    // Affinity between pairs of functions close in time.
    let mut affinity: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (w, seq) in sequences {
        let n = seq.len().max(1) as f64;
        let ids: Vec<usize> = seq.iter().map(|f| index[f.name()]).collect();
        for (i, &a) in ids.iter().enumerate() {
            rank_sum[a] += w * i as f64 / n;
            rank_weight[a] += w;
            for (d, &b) in ids.iter().enumerate().skip(i + 1).take(options.window) {
                let key = (a.min(b), a.max(b));
                *affinity.entry(key).or_default() += w / (d - i) as f64;
            }
        }
    }
    let mean_rank: Vec<f64> = rank_sum
        .iter()
        .zip(&rank_weight)
        .map(|(s, w)| if *w > 0.0 { s / w } else { 1.0 })
        .collect();
    let mut edges: Vec<((usize, usize), f64)> = affinity.into_iter().collect();
    // Heaviest first; ties by earliest pair, for determinism.
    edges.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

    let mut cluster_of: Vec<usize> = (0..all.len()).collect();
    let mut members: Vec<Vec<usize>> = (0..all.len()).map(|i| vec![i]).collect();
    let mut bytes: Vec<u64> = all.iter().map(|f| f.size).collect();
    for ((a, b), _) in edges {
        let (ca, cb) = (cluster_of[a], cluster_of[b]);
        if ca == cb || bytes[ca] + bytes[cb] > options.max_cluster_bytes {
            continue;
        }
        // Closest is best: join so that a and b end up adjacent where possible (a at the
        // tail of its cluster, b at the head of the other), reversing either as needed.
        let mut left = std::mem::take(&mut members[ca]);
        let mut right = std::mem::take(&mut members[cb]);
        if left.first() == Some(&a) && left.len() > 1 {
            left.reverse();
        }
        if right.last() == Some(&b) && right.len() > 1 {
            right.reverse();
        }
        // Keep the earlier-touched part first when neither end is special.
        left.extend(right);
        for &m in &left {
            cluster_of[m] = ca;
        }
        bytes[ca] += bytes[cb];
        bytes[cb] = 0;
        members[ca] = left;
    }
    let mut clusters: Vec<(f64, usize, Vec<usize>)> = members
        .into_iter()
        .enumerate()
        .filter(|(_, m)| !m.is_empty())
        .map(|(i, m)| {
            let key = m.iter().map(|&x| mean_rank[x]).sum::<f64>() / m.len() as f64;
            (key, i, m)
        })
        .collect();
    clusters.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    clusters.into_iter().flat_map(|(_, _, m)| m).map(|i| all[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{ModuleTouches, Touched};

    fn workload(name: &str, weight: f64, funcs: &[&str]) -> Workload {
        Workload {
            name: name.into(),
            weight,
            modules: vec![ModuleTouches {
                path: "/bin/prog".into(),
                build_id: None,
                functions: funcs
                    .iter()
                    .enumerate()
                    .map(|(i, f)| Touched {
                        names: vec![(*f).into()],
                        address: 0x1000 + 0x100 * i as u64,
                        size: 100,
                        first_touch_ns: i as u64,
                    })
                    .collect(),
            }],
            pages: vec![],
        }
    }

    fn names(o: &Order) -> Vec<&str> {
        o.functions.iter().map(|f| f.name()).collect()
    }

    /// The order of the executable of `workloads` by `algorithm`, with default options.
    fn ordered(workloads: &[Workload], algorithm: Algorithm) -> Order {
        compute(workloads, None, algorithm, ClusterOptions::default()).unwrap()
    }

    /// The names `algorithm` orders for workloads given as (weight, first-touch sequence).
    fn names_ordered(workloads: &[(f64, &[&str])], algorithm: Algorithm) -> Vec<String> {
        let w: Vec<Workload> =
            workloads.iter().map(|(weight, funcs)| workload("w", *weight, funcs)).collect();
        names(&ordered(&w, algorithm)).into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn first_touch_keeps_the_recorded_order_and_appends_later_workloads() {
        let w: [(f64, &[&str]); 2] =
            [(1.0, &["main", "init", "parse"]), (1.0, &["main", "draw", "init"])];
        assert_eq!(names_ordered(&w, Algorithm::FirstTouch), ["main", "init", "parse", "draw"]);
    }

    #[test]
    fn merged_puts_common_functions_before_ones_a_single_workload_needs() {
        let w: [(f64, &[&str]); 2] =
            [(1.0, &["main", "only_a", "common"]), (1.0, &["main", "common", "only_b"])];
        assert_eq!(names_ordered(&w, Algorithm::Merged), ["main", "common", "only_a", "only_b"]);
    }

    #[test]
    fn merged_weights_decide_between_workloads() {
        let w: [(f64, &[&str]); 2] = [(1.0, &["x", "y"]), (5.0, &["y", "x"])];
        assert_eq!(names_ordered(&w, Algorithm::Merged), ["y", "x"]);
    }

    #[test]
    fn cluster_lists_every_touched_function_once_and_starts_with_the_earliest() {
        let seq: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
        let refs: Vec<&str> = seq.iter().map(String::as_str).collect();
        let w = [workload("a", 1.0, &refs)];
        let o = ordered(&w, Algorithm::Cluster);
        assert_eq!(o.functions.len(), 50);
        let mut sorted = names(&o);
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
        // Neighbours in time stay neighbours: f0's cluster comes first.
        assert!(names(&o)[..5].contains(&"f0"), "{:?}", names(&o));
    }

    #[test]
    fn all_modules_concatenates_the_program_modules_and_leaves_system_ones_out() {
        let mut w = workload("a", 1.0, &["main", "init"]);
        let mut lib = w.modules[0].clone();
        lib.path = "/opt/prog/libprog.so".into();
        lib.functions[0].names = vec!["lib_init".into()];
        lib.functions[1].names = vec!["init".into()];
        let mut libc = w.modules[0].clone();
        libc.path = "/usr/lib/x86_64-linux-gnu/libc.so.6".into();
        libc.functions[0].names = vec!["malloc".into()];
        w.modules = vec![libc, w.modules[0].clone(), lib];
        let o = compute_all(&[w], Algorithm::FirstTouch, ClusterOptions::default()).unwrap();
        assert_eq!(names(&o), ["main", "init", "lib_init"]);
    }

    #[test]
    fn a_program_installed_under_usr_lib_keeps_its_executable_and_libraries() {
        let module = |p: &str| ModuleTouches {
            path: p.into(),
            build_id: None,
            functions: workload("a", 1.0, &["f"]).modules[0].functions.clone(),
        };
        let mut w = workload("a", 1.0, &[]);
        w.modules = vec![
            module("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            module("/usr/lib/firefox-esr/firefox-esr"),
            module("/usr/lib/firefox-esr/libxul.so"),
            module("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
        ];
        let own = own_modules(&[w.clone()]);
        assert_eq!(
            own,
            [
                PathBuf::from("/usr/lib/firefox-esr/firefox-esr"),
                "/usr/lib/firefox-esr/libxul.so".into()
            ]
        );
        // An executable in a shared directory brings only itself.
        w.modules[1].path = "/usr/bin/prog".into();
        assert_eq!(own_modules(&[w]), [PathBuf::from("/usr/bin/prog")]);
    }

    #[test]
    fn an_order_without_touched_functions_is_an_error() {
        let w = [workload("a", 1.0, &[])];
        assert!(compute(&w, None, Algorithm::FirstTouch, ClusterOptions::default()).is_err());
    }
}
