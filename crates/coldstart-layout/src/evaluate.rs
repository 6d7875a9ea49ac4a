//! Evaluation before linking: for a held-out start-up, the pages it would touch and its
//! page-fault curve under the default layout (the binary's address order), under each
//! algorithm's order (computed from the training workloads), and under the ideal (the
//! held-out start-up's own first-touch order: no order can beat it).

use serde::Serialize;

use crate::binary::Binary;
use crate::input::Workload;
use crate::model::{simulate, Cost, PageModel, Placement};
use crate::order::{compute, Algorithm, ClusterOptions, Unprofiled};
use crate::LayoutError;

/// One evaluated layout.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `default`, an algorithm name (`+ callees` when the untouched functions the touched
    /// ones call follow them), or `ideal`.
    pub layout: String,
    /// What the held-out start-up costs under it.
    pub cost: Cost,
}

/// The evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// The held-out workload's name.
    pub holdout: String,
    /// The page model of the costs.
    pub model: PageModel,
    /// Each layout's cost.
    pub rows: Vec<Row>,
    /// The algorithm with the fewest faults (then fewest pages read).
    pub best: Algorithm,
    /// Where the untouched functions go in the best layout.
    pub best_unprofiled: Unprofiled,
    /// Held-out touched functions the binary does not define.
    pub unknown_functions: usize,
}

/// Evaluate every algorithm trained on `training` against `holdout` for `binary`, each with
/// the untouched functions in input order and with each placement of `placed` (the
/// untouched functions of the binary's module it puts right after the touched ones).
pub fn evaluate(
    binary: &Binary,
    training: &[Workload],
    holdout: &Workload,
    module: Option<&str>,
    cluster: ClusterOptions,
    model: PageModel,
    placed: &[(Unprofiled, Vec<String>)],
) -> Result<Evaluation, LayoutError> {
    let (actual, known, unknown_functions) = touched_in(binary, holdout, module, model)?;
    let cost_of = |place: &Placement| cost(place, &known, model);
    let mut rows = vec![Row { layout: "default".into(), cost: cost_of(&actual) }];
    let module_name = module
        .map(str::to_owned)
        .or_else(|| binary.info.path.file_name().map(|f| f.to_string_lossy().into_owned()));
    // Fewest faults, then fewest pages read; on a tie the callees placement (the default),
    // then input order.
    let rank = |u: Unprofiled| match u {
        Unprofiled::Callees => 0,
        Unprofiled::Input => 1,
        Unprofiled::References => 2,
        Unprofiled::Siblings => 3,
    };
    let mut best: Option<(Algorithm, Unprofiled, (u64, u64, u8))> = None;
    for algorithm in Algorithm::ALL {
        let order = compute(training, module_name.as_deref(), algorithm, cluster)?;
        let names: Vec<String> = order.functions.iter().map(|f| f.name().to_owned()).collect();
        let mut candidates = vec![(Unprofiled::Input, names.clone())];
        for (unprofiled, extra) in placed {
            let mut with = names.clone();
            with.extend(extra.iter().cloned());
            candidates.push((*unprofiled, with));
        }
        for (unprofiled, names) in candidates {
            let cost = cost_of(&Placement::ordered(&binary.functions, &names, 16, model));
            let key = (cost.faults, cost.pages_read, rank(unprofiled));
            if best.as_ref().is_none_or(|b| key < b.2) {
                best = Some((algorithm, unprofiled, key));
            }
            let layout = match unprofiled {
                Unprofiled::Input => algorithm.name().to_owned(),
                other => format!("{} + {}", algorithm.name(), other.name()),
            };
            rows.push(Row { layout, cost });
        }
    }
    rows.push(Row { layout: "ideal".into(), cost: ideal(binary, &known, model) });
    Ok(Evaluation {
        holdout: holdout.name.clone(),
        model,
        rows,
        best: best.as_ref().map_or(Algorithm::FirstTouch, |b| b.0),
        best_unprofiled: best.as_ref().map_or(Unprofiled::Input, |b| b.1),
        unknown_functions,
    })
}

/// The binary's layout as linked, the functions of `workload`'s start-up it defines in their
/// first-touch order, and how many it does not define.
fn touched_in(
    binary: &Binary,
    workload: &Workload,
    module: Option<&str>,
    model: PageModel,
) -> Result<(Placement, Vec<Vec<String>>, usize), LayoutError> {
    let m = workload.module(Some(&binary.info.path), module)?;
    let sequence: Vec<Vec<String>> = m.functions.iter().map(|t| t.names.clone()).collect();
    let actual = Placement::actual(&binary.functions, model);
    let known: Vec<Vec<String>> =
        sequence.iter().filter(|n| actual.get(n).is_some()).cloned().collect();
    let unknown = sequence.len() - known.len();
    Ok((actual, known, unknown))
}

fn cost(place: &Placement, known: &[Vec<String>], model: PageModel) -> Cost {
    let (t, _) = place.touches(known, model);
    simulate(&t, place.lo, place.hi, model)
}

/// The cost of the start-up `known` under its own first-touch order: no order can beat it.
fn ideal(binary: &Binary, known: &[Vec<String>], model: PageModel) -> Cost {
    let order: Vec<String> = known.iter().map(|n| n[0].clone()).collect();
    cost(&Placement::ordered(&binary.functions, &order, 1, model), known, model)
}

/// How far a linked binary's code layout has fallen behind a start-up, for a closed loop that
/// orders again only when it must: a program changed since its order was made runs code the
/// order does not list, which lies among cold code, and stops running some that it lists.
#[derive(Debug, Clone, Serialize)]
pub struct Decay {
    /// The start-up (a profile of this build).
    pub workload: String,
    /// The page model of the costs.
    pub model: PageModel,
    /// The start-up's cost in the binary as linked.
    pub current: Cost,
    /// Its cost under its own first-touch order (what ordering again would give).
    pub ideal: Cost,
    /// Functions of the start-up the binary does not define (not counted).
    pub unknown_functions: usize,
}

impl Decay {
    /// Pages read as linked over pages read under the start-up's own order.
    pub fn ratio(&self) -> f64 {
        self.current.pages_read as f64 / self.ideal.pages_read.max(1) as f64
    }

    /// Whether the layout reads more than `bar` times the pages of the start-up's own order.
    pub fn decayed(&self, bar: f64) -> bool {
        self.ratio() > bar
    }
}

/// The decay of `binary`'s layout for `workload` (a profile of this build) under `model`.
pub fn decay(
    binary: &Binary,
    workload: &Workload,
    module: Option<&str>,
    model: PageModel,
) -> Result<Decay, LayoutError> {
    let (actual, known, unknown_functions) = touched_in(binary, workload, module, model)?;
    Ok(Decay {
        workload: workload.name.clone(),
        model,
        current: cost(&actual, &known, model),
        ideal: ideal(binary, &known, model),
        unknown_functions,
    })
}
