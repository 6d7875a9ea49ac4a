//! One order request (`coldstart order`) as a library call: training workloads and the binary
//! in, the order file out. Every default of the pipeline is decided here, not in the command
//! line:
//!
//! - every module of the program is ordered (the executable and its own libraries: modules
//!   outside the system directories, plus the binary), in one file each link takes the
//!   names it defines from; [`OrderRequest::module`] narrows it to one module;
//! - the functions no training workload touched that the touched ones call follow them
//!   ([`Unprofiled::Callees`], from the static call graph of every module ordered), unless
//!   [`OrderRequest::unprofiled`] or the evaluation says otherwise;
//! - with a held-out profile ([`OrderRequest::holdout`], which needs the binary) every
//!   layout is scored on it first (the module named like the binary, or `module`), and the
//!   best algorithm and placement are used unless asked for; without either, first-touch;
//! - data objects ([`OrderRequest::data`]; by default whenever a profile has page data for
//!   the binary) follow in the order start-up first touched their pages: the pages it
//!   faulted on when the trace has them (pages merely read ahead or mapped around a fault
//!   were not touched), else every page it had in memory;
//! - with the binary, the order file reports names of its module it defines more than once
//!   or not at all.
//!
//! The evaluation is a step of its own ([`OrderRequest::evaluate`], then
//! [`OrderRequest::order`]) so a caller can show it before the order is made;
//! [`OrderRequest::run`] does both.

use std::path::{Path, PathBuf};

use crate::binary::Binary;
use crate::callgraph::{neighbours, Program};
use crate::evaluate::{evaluate, Evaluation};
use crate::input::{find_module, Workload};
use crate::model::PageModel;
use crate::order::{
    compute, compute_modules, own_modules, Algorithm, ClusterOptions, Order, OrderedFunction,
    Unprofiled,
};
use crate::symbols::Bindings;
use crate::writers::{self, Format, WriteReport};
use crate::LayoutError;

/// The touched names of `workloads` in every module of `files`, hottest first.
fn touched(
    workloads: &[Workload],
    files: &[PathBuf],
    cluster: ClusterOptions,
) -> Vec<(PathBuf, Vec<String>)> {
    files
        .iter()
        .map(|f| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            let names = compute(workloads, name.as_deref(), Algorithm::FirstTouch, cluster)
                .map(|o| o.functions.iter().map(|f| f.name().to_owned()).collect())
                .unwrap_or_default();
            (f.clone(), names)
        })
        .collect()
}

/// Leave-one-out over the training workloads: each one scored (faults, under the request's
/// page model) by a first-touch order of the others, with the untouched functions in input
/// order and with the callees of the touched ones after them; summed over the folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CrossValidation {
    /// Workloads held out in turn.
    pub folds: usize,
    /// Faults with the untouched functions in input order.
    pub input_faults: u64,
    /// Faults with the callees of the touched functions after them.
    pub callees_faults: u64,
}

impl CrossValidation {
    /// The placement with fewer faults (callees on a tie).
    pub fn best(&self) -> Unprofiled {
        if self.callees_faults <= self.input_faults {
            Unprofiled::Callees
        } else {
            Unprofiled::Input
        }
    }
}

/// One file's untouched callees: (name, size), likeliest first.
type FileCallees = (PathBuf, Vec<(String, u64)>);

/// `order` with each module's untouched callees (`lists`, per file) after its touched
/// functions.
fn with_callees(mut order: Order, lists: &[FileCallees], unprofiled: Unprofiled) -> Order {
    let mut seen: std::collections::HashSet<String> =
        order.functions.iter().map(|f| f.name().to_owned()).collect();
    let old = std::mem::take(&mut order.functions);
    let mut rest = old.into_iter();
    for run in &mut order.runs {
        order.functions.extend(rest.by_ref().take(run.touched + run.untouched));
        let Some((_, list)) = lists.iter().find(|(p, _)| p.file_name() == run.path.file_name())
        else {
            continue;
        };
        for (name, size) in list {
            if seen.insert(name.clone()) {
                order.functions.push(OrderedFunction { names: vec![name.clone()], size: *size });
                run.untouched += 1;
            }
        }
    }
    order.unprofiled = unprofiled;
    order
}

/// What to order, for which binary, and how.
#[derive(Debug, Clone)]
pub struct OrderRequest<'a> {
    /// The training workloads (sizes the profiles lack filled in from the binary).
    workloads: Vec<Workload>,
    binary: Option<&'a Binary>,
    /// Order this module only (a path or a file name); default: every module of the
    /// program.
    pub module: Option<String>,
    /// Order every module outside the system directories: the default, kept for callers
    /// that ask for it.
    pub all_modules: bool,
    /// The algorithm; default: the best of the evaluation, else first-touch.
    pub algorithm: Option<Algorithm>,
    /// Where the untouched functions go; default: the best of the evaluation, else
    /// [`Unprofiled::Callees`].
    pub unprofiled: Option<Unprofiled>,
    /// Order the data objects: `Some(true)` needs the binary and page data, `Some(false)`
    /// never; default (`None`): whenever the profiles have page data for the binary.
    pub data: Option<bool>,
    /// A held-out profile to evaluate every layout on (needs the binary).
    pub holdout: Option<&'a Path>,
    /// The page model of the evaluation.
    pub model: PageModel,
    /// The options of [`Algorithm::Cluster`].
    pub cluster: ClusterOptions,
    /// The order file's format.
    pub format: Format,
}

/// A training profile recorded from another build of the module it orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnotherBuild {
    /// The workload's name.
    pub workload: String,
    /// The binary compared with (the one given, else the file at the profiled path).
    pub path: std::path::PathBuf,
    /// The build-id the profile recorded.
    pub profiled: String,
    /// The build-id the binary has.
    pub found: String,
}

/// The module that touched the most functions, when the executable ordered first is not it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusierModule {
    /// The executable ordered first.
    pub ordered: PathBuf,
    /// How many functions start-up touched in it.
    pub ordered_touched: usize,
    /// The module that touched the most (the C and C++ runtime left out).
    pub busiest: PathBuf,
    /// How many functions start-up touched in it.
    pub busiest_touched: usize,
    /// Whether that module is ordered too (the program's own), or left out (a system library).
    pub busiest_ordered: bool,
}

/// The C and C++ runtime, which start-up always runs and nobody relinks: never the module a
/// wrapper hides.
fn is_runtime_library(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    ["ld-linux", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libpthread.so", "libdl.so"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// What an order request produced.
#[derive(Debug, Clone)]
pub struct OrderOutcome {
    /// The order.
    pub order: Order,
    /// The algorithm the order was made with.
    pub chosen: Algorithm,
    /// The evaluation on the held-out profile, when there was one.
    pub evaluation: Option<Evaluation>,
    /// The leave-one-out over the training workloads that chose where the untouched
    /// functions go, when it decided (no placement asked for, no held-out profile).
    pub cross_validation: Option<CrossValidation>,
    /// The order file.
    pub text: String,
    /// What writing the order file found out.
    pub report: WriteReport,
    /// Modules whose call graph could not be read (their untouched functions stay in
    /// input order), with the reason.
    pub unread: Vec<(PathBuf, String)>,
}

impl<'a> OrderRequest<'a> {
    /// A request for `workloads` (for the `binary` when given, whose symbols fill in the
    /// function sizes the profiles lack); first-touch in lld's format unless changed.
    pub fn new(mut workloads: Vec<Workload>, binary: Option<&'a Binary>) -> OrderRequest<'a> {
        if let Some(b) = binary {
            b.fill_sizes(&mut workloads);
        }
        OrderRequest {
            workloads,
            binary,
            module: None,
            all_modules: false,
            algorithm: None,
            unprofiled: None,
            data: None,
            holdout: None,
            model: PageModel::default(),
            cluster: ClusterOptions::default(),
            format: Format::Lld,
        }
    }

    /// The module evaluated: the one asked for, else the binary's file name.
    pub fn module(&self) -> Option<String> {
        self.module.clone().or_else(|| {
            let binary = self.binary?;
            binary.info.path.file_name().map(|f| f.to_string_lossy().into_owned())
        })
    }

    /// The training profiles recorded from another build of the module ordered: compared with
    /// the binary given, else with the file at the profiled path; once per build.
    pub fn another_build(&self) -> Vec<AnotherBuild> {
        let module = self.module();
        let binary_path = self.binary.map(|b| b.info.path.as_path());
        let mut out: Vec<AnotherBuild> = Vec::new();
        for w in &self.workloads {
            let Ok(m) = find_module(&w.modules, binary_path, module.as_deref()) else { continue };
            let Some(want) = m.build_id.as_deref() else { continue };
            let (path, have) = match self.binary {
                Some(b) => (b.info.path.clone(), b.info.build_id_hex()),
                None => match Binary::open(&m.path) {
                    Ok(b) => (m.path.clone(), b.info.build_id_hex()),
                    Err(_) => continue,
                },
            };
            let Some(have) = have.filter(|h| h != want) else { continue };
            if !out.iter().any(|o| o.path == path && o.profiled == want) {
                out.push(AnotherBuild {
                    workload: w.name.clone(),
                    path,
                    profiled: want.to_owned(),
                    found: have,
                });
            }
        }
        out
    }

    /// When start-up ran most in another module than `first`, the executable ordered first:
    /// that module, and whether it is among those `ordered`. The executable may be a wrapper
    /// (a shell script's interpreter, `env`, a version manager's shim) or a small driver over
    /// libraries that do the work (clang over libclang-cpp, in a system directory, which is
    /// not ordered by default). Counted in the first workload.
    pub fn busier_module(&self, first: &Path, ordered: &[PathBuf]) -> Option<BusierModule> {
        let modules = &self.workloads.first()?.modules;
        let first_touched =
            modules.iter().find(|m| m.path == first).map_or(0, |m| m.functions.len());
        let busiest = modules
            .iter()
            .filter(|m| !is_runtime_library(&m.path))
            .max_by_key(|m| m.functions.len())?;
        if busiest.path == first || busiest.functions.len() <= first_touched {
            return None;
        }
        Some(BusierModule {
            ordered: first.to_owned(),
            ordered_touched: first_touched,
            busiest: busiest.path.clone(),
            busiest_touched: busiest.functions.len(),
            busiest_ordered: ordered.contains(&busiest.path),
        })
    }

    /// The modules ordered: the one asked for, else the program's own (the executable
    /// first) and the binary's.
    pub fn ordered_modules(&self) -> Vec<PathBuf> {
        if self.module.is_some() {
            let Some(first) = self.workloads.first() else { return Vec::new() };
            return crate::input::find_module(&first.modules, None, self.module.as_deref())
                .map(|m| vec![m.path.clone()])
                .unwrap_or_default();
        }
        let mut own = own_modules(&self.workloads);
        if let Some(b) = self.binary {
            let name = b.info.path.file_name();
            if !own.iter().any(|p| p.file_name() == name) {
                if let Some(first) = self.workloads.first() {
                    if let Ok(m) = first.module(Some(&b.info.path), None) {
                        own.push(m.path.clone());
                    }
                }
            }
        }
        own
    }

    /// The files to read call graphs from: the modules ordered (and the program's own, whose
    /// calls reach them), the binary standing for the module named like it.
    fn graph_files(&self) -> Vec<PathBuf> {
        let mut files = own_modules(&self.workloads);
        for m in self.ordered_modules() {
            if !files.contains(&m) {
                files.push(m);
            }
        }
        if let Some(b) = self.binary {
            let name = b.info.path.file_name();
            match files.iter().position(|p| p.file_name() == name) {
                Some(i) => files[i] = b.info.path.clone(),
                None => files.push(b.info.path.clone()),
            }
        }
        files
    }

    /// The untouched functions the touched ones call, per file of [`graph_files`], and the
    /// files whose call graph could not be read.
    /// With [`Unprofiled::Siblings`], each file's siblings of its touched functions follow its
    /// callees.
    fn callees(&self, unprofiled: Unprofiled) -> (Vec<FileCallees>, Vec<(PathBuf, String)>) {
        let files = self.graph_files();
        let (program, failed) = Program::read(&files, unprofiled == Unprofiled::References);
        let hot = touched(&self.workloads, &files, self.cluster);
        let mut lists = neighbours(&program, &hot);
        if unprofiled == Unprofiled::Siblings {
            for ((path, names), list) in hot.iter().zip(&mut lists) {
                let Some(graph) = program.graphs.iter().find(|g| &g.path == path) else {
                    continue;
                };
                let placed: std::collections::HashSet<String> =
                    names.iter().chain(list.iter().map(|(n, _)| n)).cloned().collect();
                list.extend(crate::siblings::siblings(graph, names, &placed));
            }
        }
        let unread = failed.into_iter().map(|(p, e)| (p, e.to_string())).collect();
        (files.into_iter().zip(lists).collect(), unread)
    }

    /// With two or more training workloads and the binary: where the untouched functions
    /// should go, by leave-one-out over the training workloads (see [`CrossValidation`]).
    /// `None` with fewer workloads, without the binary, or when no fold could be scored.
    pub fn cross_validate(&self) -> Option<CrossValidation> {
        let binary = self.binary?;
        if self.workloads.len() < 2 {
            return None;
        }
        let files = self.graph_files();
        let (program, _) = Program::read(&files, false);
        let module = self.module();
        let wanted = module.as_deref().and_then(|m| Path::new(m).file_name());
        let mut cv = CrossValidation { folds: 0, input_faults: 0, callees_faults: 0 };
        for i in 0..self.workloads.len() {
            let mut training = self.workloads.clone();
            let held = training.remove(i);
            let lists = neighbours(&program, &touched(&training, &files, self.cluster));
            let Some(list) = files
                .iter()
                .zip(lists)
                .find(|(p, _)| p.file_name() == wanted)
                .map(|(_, l)| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
            else {
                continue;
            };
            let placed = [(Unprofiled::Callees, list)];
            let Ok(e) = evaluate(
                binary,
                &training,
                &held,
                module.as_deref(),
                self.cluster,
                self.model,
                &placed,
            ) else {
                continue;
            };
            let faults =
                |layout: &str| e.rows.iter().find(|r| r.layout == layout).map(|r| r.cost.faults);
            let (Some(input), Some(callees)) =
                (faults("first-touch"), faults("first-touch + callees"))
            else {
                continue;
            };
            cv.folds += 1;
            cv.input_faults += input;
            cv.callees_faults += callees;
        }
        (cv.folds > 0).then_some(cv)
    }

    /// Score every layout on the held-out profile, when there is one.
    pub fn evaluate(&self) -> Result<Option<Evaluation>, LayoutError> {
        let Some(holdout) = self.holdout else { return Ok(None) };
        let Some(binary) = self.binary else {
            return Err(LayoutError::Invalid(
                "--evaluate needs --binary: the layouts are evaluated on the binary's functions"
                    .into(),
            ));
        };
        let held = Workload::read_profile(holdout)?;
        let held = held
            .first()
            .ok_or_else(|| LayoutError::Invalid("the held-out profile has no workload".into()))?;
        let module = self.module();
        let wanted = module.as_deref().map(|m| Path::new(m).file_name().map(|f| f.to_owned()));
        let kinds: Vec<Unprofiled> = match self.unprofiled {
            Some(Unprofiled::Input) => vec![],
            Some(u) => vec![u],
            None => vec![Unprofiled::Callees, Unprofiled::References, Unprofiled::Siblings],
        };
        let mut placed = Vec::new();
        for kind in kinds {
            let (lists, _) = self.callees(kind);
            if let Some((_, l)) = lists
                .into_iter()
                .find(|(p, _)| wanted.as_ref().is_some_and(|w| p.file_name() == w.as_deref()))
            {
                placed.push((kind, l.into_iter().map(|(n, _)| n).collect()));
            }
        }
        evaluate(
            binary,
            &self.workloads,
            held,
            module.as_deref(),
            self.cluster,
            self.model,
            &placed,
        )
        .map(Some)
    }

    /// Make the order and its file, with the algorithm and placement asked for, else the
    /// best of `evaluation` (from [`evaluate`](Self::evaluate)), else first-touch with the
    /// callees of the touched functions after them.
    pub fn order(&self, evaluation: Option<Evaluation>) -> Result<OrderOutcome, LayoutError> {
        let chosen =
            self.algorithm.or(evaluation.as_ref().map(|e| e.best)).unwrap_or(Algorithm::FirstTouch);
        let cross_validation = if self.unprofiled.is_none() && evaluation.is_none() {
            self.cross_validate()
        } else {
            None
        };
        let unprofiled = self
            .unprofiled
            .or(evaluation.as_ref().map(|e| e.best_unprofiled))
            .or(cross_validation.map(|c| c.best()))
            .unwrap_or(Unprofiled::Callees);
        let modules = self.ordered_modules();
        // One module asked for: an unknown name is an error that lists the modules there.
        let mut order = match &self.module {
            Some(m) => compute(&self.workloads, Some(m), chosen, self.cluster),
            None => compute_modules(&self.workloads, &modules, chosen, self.cluster),
        }?;
        let mut unread = Vec::new();
        if unprofiled != Unprofiled::Input {
            let (lists, failed) = self.callees(unprofiled);
            unread = failed;
            order = with_callees(order, &lists, unprofiled);
        }
        if let Some(data) = self.data_order()? {
            order.data = data;
        }
        let (text, mut report) = writers::write(&order, self.format, None);
        if let Some(b) = self.binary {
            // Names of the binary's module only: the other modules define the rest.
            let bindings = Bindings::read(&b.info.path)?;
            let name = b.info.path.file_name();
            let mine = self
                .workloads
                .iter()
                .flat_map(|w| &w.modules)
                .filter(|m| m.path.file_name() == name)
                .flat_map(|m| m.functions.iter().map(|t| t.name().to_owned()))
                .collect::<std::collections::HashSet<_>>();
            // The callees placed in the binary's module count as its names too.
            let mut at = 0;
            let mut graph = std::collections::HashSet::new();
            for r in &order.runs {
                if r.path.file_name() == name {
                    let placed = &order.functions[at + r.touched..at + r.touched + r.untouched];
                    graph.extend(placed.iter().map(|f| f.name()));
                }
                at += r.touched + r.untouched;
            }
            let own = Order {
                functions: order
                    .functions
                    .iter()
                    .filter(|f| mine.contains(f.name()) || graph.contains(f.name()))
                    .cloned()
                    .collect(),
                data: Vec::new(),
                ..order.clone()
            };
            let (_, r) = writers::write(&own, self.format, Some(&bindings));
            report.ambiguous = r.ambiguous;
            report.not_in_binary = r.not_in_binary;
        }
        Ok(OrderOutcome { order, chosen, evaluation, cross_validation, text, report, unread })
    }

    /// [`evaluate`](Self::evaluate), then [`order`](Self::order).
    pub fn run(&self) -> Result<OrderOutcome, LayoutError> {
        let evaluation = self.evaluate()?;
        self.order(evaluation)
    }

    /// The binary's data objects in the order start-up first touched their pages, when
    /// asked for or (by default) when the profiles have page data for the binary.
    fn data_order(&self) -> Result<Option<Vec<crate::data::DataSymbol>>, LayoutError> {
        if self.data == Some(false) {
            return Ok(None);
        }
        let required = self.data == Some(true);
        let path = match self.binary {
            Some(binary) => binary.info.path.clone(),
            None if required => {
                return Err(LayoutError::Invalid(
                    "--data needs --binary: data objects are found in the binary's symbols".into(),
                ));
            }
            // By default, the program's executable where it was profiled (the first module
            // ordered), when it is still there and is the build the profile recorded.
            None => match self.ordered_modules().into_iter().next() {
                Some(p) if p.is_file() && self.another_build().is_empty() => p,
                _ => return Ok(None),
            },
        };
        let path = &path;
        let Some(pages) = self.workloads.iter().find_map(|w| w.pages_of(path)) else {
            if required {
                return Err(LayoutError::Invalid(format!(
                    "the profile has no page data for {}: record it with `coldstart profile --pages`",
                    path.display()
                )));
            }
            return Ok(None);
        };
        let symbols = crate::data::data_symbols(path)?;
        // Pages start-up faulted on, when a traced profile has them: pages merely read ahead
        // or mapped around a fault were not touched. (Read events are read-around windows, 32
        // pages for each fault at 128 KiB; fault-around maps cached neighbours without a
        // fault event.) An exact profile's pages are the touches themselves.
        let touched = if pages.faulted.is_empty() { &pages.pages } else { &pages.faulted };
        Ok(Some(crate::data::order_data(&symbols, touched)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::{ModuleTouches, Touched};

    fn workload(funcs: &[&str]) -> Workload {
        let touched = |(i, f): (usize, &&str)| Touched {
            names: vec![(*f).into()],
            address: 0x1000 + 0x100 * i as u64,
            size: 100,
            first_touch_ns: i as u64,
        };
        Workload {
            name: "a".into(),
            weight: 1.0,
            modules: vec![ModuleTouches {
                path: "/bin/prog".into(),
                build_id: None,
                functions: funcs.iter().enumerate().map(touched).collect(),
            }],
            pages: vec![],
        }
    }

    #[test]
    fn without_an_evaluation_or_an_algorithm_the_order_is_first_touch() {
        let outcome = OrderRequest::new(vec![workload(&["main", "init"])], None).run().unwrap();
        assert_eq!(outcome.chosen, Algorithm::FirstTouch);
        assert!(outcome.evaluation.is_none());
        assert!(outcome.text.ends_with("main\ninit\n"), "{}", outcome.text);
        assert_eq!(outcome.report.written, 2);
    }

    #[test]
    fn the_algorithm_asked_for_is_used() {
        let mut request = OrderRequest::new(vec![workload(&["main", "init"])], None);
        request.algorithm = Some(Algorithm::Cluster);
        request.format = Format::Bolt;
        let outcome = request.run().unwrap();
        assert_eq!(outcome.chosen, Algorithm::Cluster);
        assert_eq!(outcome.order.algorithm, Algorithm::Cluster);
    }

    #[test]
    fn an_unknown_module_is_an_error_naming_the_modules_there() {
        let mut request = OrderRequest::new(vec![workload(&["main"])], None);
        request.module = Some("libnone.so".into());
        let err = request.run().unwrap_err().to_string();
        assert!(err.contains("libnone.so") && err.contains("/bin/prog"), "{err}");
    }

    #[test]
    fn cross_validation_keeps_the_placement_with_fewer_faults_and_callees_on_a_tie() {
        let cv = |input_faults, callees_faults| CrossValidation {
            folds: 2,
            input_faults,
            callees_faults,
        };
        assert_eq!(cv(10, 9).best(), Unprofiled::Callees);
        assert_eq!(cv(10, 10).best(), Unprofiled::Callees);
        assert_eq!(cv(9, 10).best(), Unprofiled::Input);
        // One workload: nothing to hold out.
        assert!(OrderRequest::new(vec![workload(&["main"])], None).cross_validate().is_none());
    }

    #[test]
    fn evaluation_and_data_need_the_binary() {
        let mut request = OrderRequest::new(vec![workload(&["main"])], None);
        request.holdout = Some(Path::new("held-out.json"));
        let err = request.evaluate().unwrap_err().to_string();
        assert!(err.contains("--evaluate needs --binary"), "{err}");
        request.holdout = None;
        request.data = Some(true);
        let err = request.run().unwrap_err().to_string();
        assert!(err.contains("--data needs --binary"), "{err}");
    }
}
