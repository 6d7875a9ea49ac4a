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
    pub cost: Cost,
}

/// The evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub holdout: String,
    pub model: PageModel,
    pub rows: Vec<Row>,
    /// The algorithm with the fewest faults (then fewest pages read).
    pub best: Algorithm,
    /// Where the untouched functions go in the best layout.
    pub best_unprofiled: Unprofiled,
    /// Held-out touched functions the binary does not define.
    pub unknown_functions: usize,
}

/// Evaluate every algorithm trained on `training` against `holdout` for `binary`, each with
/// the untouched functions in input order and, when `callees` is given (the untouched
/// functions of the binary's module that the touched ones call, likeliest first), with
/// those right after the touched ones.
pub fn evaluate(
    binary: &Binary,
    training: &[Workload],
    holdout: &Workload,
    module: Option<&str>,
    cluster: ClusterOptions,
    model: PageModel,
    callees: Option<&[String]>,
) -> Result<Evaluation, LayoutError> {
    let m = holdout.module(Some(&binary.info.path), module)?;
    let sequence: Vec<Vec<String>> = m.functions.iter().map(|t| t.names.clone()).collect();
    let actual = Placement::actual(&binary.functions, model);
    let known: Vec<Vec<String>> =
        sequence.iter().filter(|n| actual.get(n).is_some()).cloned().collect();
    let unknown_functions = sequence.len() - known.len();
    let cost_of = |place: &Placement| {
        let (t, _) = place.touches(&known, model);
        simulate(&t, place.lo, place.hi, model)
    };
    let mut rows = vec![Row { layout: "default".into(), cost: cost_of(&actual) }];
    let module_name = module
        .map(str::to_owned)
        .or_else(|| binary.info.path.file_name().map(|f| f.to_string_lossy().into_owned()));
    // Fewest faults, then fewest pages read; on a tie the callees placement (the default).
    let mut best: Option<(Algorithm, Unprofiled, (u64, u64, bool))> = None;
    for algorithm in Algorithm::ALL {
        let order = compute(training, module_name.as_deref(), algorithm, cluster)?;
        let mut names: Vec<String> = order.functions.iter().map(|f| f.name().to_owned()).collect();
        let mut candidates = vec![(Unprofiled::Input, names.clone())];
        if let Some(extra) = callees {
            names.extend(extra.iter().cloned());
            candidates.push((Unprofiled::Callees, names));
        }
        for (unprofiled, names) in candidates {
            let cost = cost_of(&Placement::ordered(&binary.functions, &names, 16, model));
            let key = (cost.faults, cost.pages_read, unprofiled != Unprofiled::Callees);
            if best.as_ref().map_or(true, |b| key < b.2) {
                best = Some((algorithm, unprofiled, key));
            }
            let layout = match unprofiled {
                Unprofiled::Input => algorithm.name().to_owned(),
                Unprofiled::Callees => format!("{} + callees", algorithm.name()),
            };
            rows.push(Row { layout, cost });
        }
    }
    let ideal_order: Vec<String> = known.iter().map(|n| n[0].clone()).collect();
    rows.push(Row {
        layout: "ideal".into(),
        cost: cost_of(&Placement::ordered(&binary.functions, &ideal_order, 1, model)),
    });
    Ok(Evaluation {
        holdout: holdout.name.clone(),
        model,
        rows,
        best: best.as_ref().map_or(Algorithm::FirstTouch, |b| b.0),
        best_unprofiled: best.as_ref().map_or(Unprofiled::Input, |b| b.1),
        unknown_functions,
    })
}
