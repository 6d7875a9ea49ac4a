//! One order request (`coldstart order`) as a library call: training workloads and the binary
//! in, the order file out. Every default of the pipeline is decided here, not in the command
//! line:
//!
//! - the module ordered is [`OrderRequest::module`], else the binary's file name, else the
//!   executable of the first workload (see [`find_module`]);
//!   [`OrderRequest::all_modules`] orders every module outside the system directories
//!   instead, in one file;
//! - with a held-out profile ([`OrderRequest::holdout`], which needs the binary) every
//!   layout is scored on it first, and the best algorithm is used unless one was asked for;
//!   without either, first-touch;
//! - [`OrderRequest::data`] (which needs the binary and page data) appends the data objects
//!   in the order start-up first touched their pages: the pages it faulted on when the trace
//!   has them (pages merely read ahead or mapped around a fault were not touched), else every
//!   page it had in memory;
//! - with the binary, the order file reports names it defines more than once or not at all.
//!
//! The evaluation is a step of its own ([`OrderRequest::evaluate`], then
//! [`OrderRequest::order`]) so a caller can show it before the order is made;
//! [`OrderRequest::run`] does both.

use std::path::{Path, PathBuf};

use crate::binary::Binary;
use crate::evaluate::{evaluate, Evaluation};
use crate::input::{find_module, Workload};
use crate::model::PageModel;
use crate::order::{compute, compute_all, Algorithm, ClusterOptions, Order};
use crate::symbols::Bindings;
use crate::writers::{self, Format, WriteReport};
use crate::LayoutError;

/// What to order, for which binary, and how.
#[derive(Debug, Clone)]
pub struct OrderRequest<'a> {
    /// The training workloads (sizes the profiles lack filled in from the binary).
    workloads: Vec<Workload>,
    binary: Option<&'a Binary>,
    /// The module to order (a path or a file name); default: the binary's file name.
    pub module: Option<String>,
    /// Order every module outside the system directories in one file.
    pub all_modules: bool,
    /// The algorithm; default: the best of the evaluation, else first-touch.
    pub algorithm: Option<Algorithm>,
    /// Also order the data objects (needs the binary and a profile with page data).
    pub data: bool,
    /// A held-out profile to evaluate every layout on (needs the binary).
    pub holdout: Option<&'a Path>,
    /// The page model of the evaluation.
    pub model: PageModel,
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
    /// The build-id the profile recorded, and the one the binary has.
    pub profiled: String,
    pub found: String,
}

/// The module that touched the most functions, when the one ordered by default is not it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusierModule {
    /// The module ordered, and how many functions start-up touched in it.
    pub ordered: PathBuf,
    pub ordered_touched: usize,
    /// The module that touched the most (the C and C++ runtime left out), and how many.
    pub busiest: PathBuf,
    pub busiest_touched: usize,
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
    pub order: Order,
    /// The algorithm the order was made with.
    pub chosen: Algorithm,
    /// The evaluation on the held-out profile, when there was one.
    pub evaluation: Option<Evaluation>,
    /// The order file.
    pub text: String,
    pub report: WriteReport,
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
            data: false,
            holdout: None,
            model: PageModel::default(),
            cluster: ClusterOptions::default(),
            format: Format::Lld,
        }
    }

    /// The module to order: the one asked for, else the binary's file name.
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

    /// When the module `ordered` is not where start-up ran most, that module: the executable may
    /// be a wrapper (a shell script's interpreter, `env`, a version manager's shim) or a small
    /// driver over the libraries that do the work (clang over libclang-cpp). Counted in the
    /// first workload.
    pub fn busier_module(&self, ordered: &Path) -> Option<BusierModule> {
        let modules = &self.workloads.first()?.modules;
        let ordered_touched =
            modules.iter().find(|m| m.path == ordered).map_or(0, |m| m.functions.len());
        let busiest = modules
            .iter()
            .filter(|m| !is_runtime_library(&m.path))
            .max_by_key(|m| m.functions.len())?;
        if busiest.path == ordered || busiest.functions.len() <= ordered_touched {
            return None;
        }
        Some(BusierModule {
            ordered: ordered.to_owned(),
            ordered_touched,
            busiest: busiest.path.clone(),
            busiest_touched: busiest.functions.len(),
        })
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
        evaluate(binary, &self.workloads, held, module.as_deref(), self.cluster, self.model)
            .map(Some)
    }

    /// Make the order and its file, with the algorithm asked for, else the best of
    /// `evaluation` (from [`evaluate`](Self::evaluate)), else first-touch.
    pub fn order(&self, evaluation: Option<Evaluation>) -> Result<OrderOutcome, LayoutError> {
        let chosen =
            self.algorithm.or(evaluation.as_ref().map(|e| e.best)).unwrap_or(Algorithm::FirstTouch);
        let mut order = if self.all_modules {
            compute_all(&self.workloads, chosen, self.cluster)
        } else {
            compute(&self.workloads, self.module().as_deref(), chosen, self.cluster)
        }?;
        if self.data {
            order.data = self.data_order()?;
        }
        let bindings = self.binary.map(|b| Bindings::read(&b.info.path)).transpose()?;
        let (text, report) = writers::write(&order, self.format, bindings.as_ref());
        Ok(OrderOutcome { order, chosen, evaluation, text, report })
    }

    /// [`evaluate`](Self::evaluate), then [`order`](Self::order).
    pub fn run(&self) -> Result<OrderOutcome, LayoutError> {
        let evaluation = self.evaluate()?;
        self.order(evaluation)
    }

    /// The binary's data objects in the order start-up first touched their pages.
    fn data_order(&self) -> Result<Vec<crate::data::DataSymbol>, LayoutError> {
        let Some(binary) = self.binary else {
            return Err(LayoutError::Invalid(
                "--data needs --binary: data objects are found in the binary's symbols".into(),
            ));
        };
        let path = &binary.info.path;
        let pages = self.workloads.iter().find_map(|w| w.pages_of(path)).ok_or_else(|| {
            LayoutError::Invalid(format!(
                "the profile has no page data for {}: record it with `coldstart profile --pages`",
                path.display()
            ))
        })?;
        let symbols = crate::data::data_symbols(path)?;
        // Pages start-up faulted on, when the trace has them: pages merely read ahead or
        // mapped around a fault were not touched.
        let touched = if pages.faulted.is_empty() { &pages.pages } else { &pages.faulted };
        Ok(crate::data::order_data(&symbols, touched))
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
    fn evaluation_and_data_need_the_binary() {
        let mut request = OrderRequest::new(vec![workload(&["main"])], None);
        request.holdout = Some(Path::new("held-out.json"));
        let err = request.evaluate().unwrap_err().to_string();
        assert!(err.contains("--evaluate needs --binary"), "{err}");
        request.holdout = None;
        request.data = true;
        let err = request.run().unwrap_err().to_string();
        assert!(err.contains("--data needs --binary"), "{err}");
    }
}
