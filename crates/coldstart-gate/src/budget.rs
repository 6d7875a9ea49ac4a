//! The time a gate may take (`--budget SECONDS`), and what its steps cost.
//!
//! A gate is a few steps: a batch of runs of each cache state, page profiles, then more of
//! either while a figure is unclear. Each step's cost is known before it starts, from what the
//! same step cost while the baseline was recorded ([`Costs`], kept in the baseline) and, once
//! this gate has made one, from this gate. With a budget:
//!
//! - the first steps always run (a gate with no runs says nothing), each as small as it must be
//!   for all of them to fit: batches down to 3 runs, one page profile;
//! - a later step runs only if it fits in what is left;
//! - when one does not, the gate judges what it measured: a figure still unclear stays
//!   unclear, and the report says that the budget ran out and which figures wanted more.
//!
//! Steps are never cut in the middle (a run is measured whole), so a gate ends within the
//! budget unless its first steps alone take longer, or a step takes far longer than it did
//! before.

use std::collections::BTreeMap;
use std::time::Duration;

use coldstart_measure::CacheState;
use serde::{Deserialize, Serialize};

use crate::time::MIN_RUNS;

/// What the steps of a measurement cost on the machine it ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Seconds per run of each cache state, the measurement's own work included (discovery,
    /// the copy onto the emulated device, warm-up, dropping the cache, the calibration loop).
    pub run_s: BTreeMap<String, f64>,
    /// Seconds per exact page profile (its discovery, copy and run).
    pub profile_s: Option<f64>,
    /// Seconds per function profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions_s: Option<f64>,
    /// Seconds per count of instructions under valgrind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_s: Option<f64>,
}

impl Costs {
    /// Seconds per run of `state`, when known.
    pub fn run(&self, state: CacheState) -> Option<f64> {
        self.run_s.get(&state.to_string()).copied()
    }

    /// Seconds per page profile, when known.
    pub fn profile(&self) -> Option<f64> {
        self.profile_s
    }
}

/// The seconds spent so far against the budget, and the costs learned on the way.
#[derive(Debug, Clone)]
pub struct Clock {
    budget: Option<f64>,
    /// Seconds the steps took so far.
    pub spent: f64,
    pub costs: Costs,
}

impl Clock {
    /// A clock with `budget`, planning with `costs` until steps of its own say better.
    pub fn new(budget: Option<Duration>, costs: Costs) -> Clock {
        Clock { budget: budget.map(|b| b.as_secs_f64()), spent: 0.0, costs }
    }

    fn left(&self) -> f64 {
        self.budget.map_or(f64::INFINITY, |b| b - self.spent)
    }

    /// Whether `runs` more runs of `state` fit (unknown costs fit).
    pub fn allows_runs(&self, state: CacheState, runs: usize) -> bool {
        self.costs.run(state).is_none_or(|c| c * runs as f64 <= self.left())
    }

    /// Whether `n` more page profiles fit.
    pub fn allows_profiles(&self, n: usize) -> bool {
        self.costs.profile().is_none_or(|c| c * n as f64 <= self.left())
    }

    /// Whether `n` more function profiles fit.
    pub fn allows_function_profiles(&self, n: usize) -> bool {
        self.costs.functions_s.is_none_or(|c| c * n as f64 <= self.left())
    }

    /// Whether `n` more counts of instructions fit.
    pub fn allows_counts(&self, n: usize) -> bool {
        self.costs.instructions_s.is_none_or(|c| c * n as f64 <= self.left())
    }

    /// `n` counts of instructions took `seconds`.
    pub fn counted(&mut self, n: usize, seconds: f64) {
        self.spent += seconds;
        if n > 0 && seconds > 0.0 {
            self.costs.instructions_s = Some(seconds / n as f64);
        }
    }

    /// `n` function profiles took `seconds`.
    pub fn profiled_functions(&mut self, n: usize, seconds: f64) {
        self.spent += seconds;
        if n > 0 && seconds > 0.0 {
            self.costs.functions_s = Some(seconds / n as f64);
        }
    }

    /// Shrink the first batches (`(state, runs)`) and leave room for `profiles` page profiles,
    /// so that they all fit the budget, each batch keeping at least [`MIN_RUNS`] runs.
    pub fn shrink(&self, first: &mut [(CacheState, usize)], profiles: usize) {
        let Some(budget) = self.budget else { return };
        let cost = |first: &[(CacheState, usize)]| -> f64 {
            first.iter().map(|(s, n)| self.costs.run(*s).unwrap_or(0.0) * *n as f64).sum::<f64>()
                + self.costs.profile().unwrap_or(0.0) * profiles as f64
        };
        // Take a run off the costliest batch that can spare one until they fit.
        while cost(first) > budget {
            let costliest = first.iter_mut().filter(|(_, n)| *n > MIN_RUNS).max_by(|a, b| {
                let c = |x: &(CacheState, usize)| self.costs.run(x.0).unwrap_or(0.0);
                c(a).total_cmp(&c(b))
            });
            match costliest {
                Some(batch) => batch.1 -= 1,
                None => return,
            }
        }
    }

    /// `runs` runs of `state` took `seconds`.
    pub fn ran(&mut self, state: CacheState, runs: usize, seconds: f64) {
        self.spent += seconds;
        if runs > 0 && seconds > 0.0 {
            self.costs.run_s.insert(state.to_string(), seconds / runs as f64);
        }
    }

    /// `n` page profiles took `seconds`.
    pub fn profiled(&mut self, n: usize, seconds: f64) {
        self.spent += seconds;
        if n > 0 && seconds > 0.0 {
            self.costs.profile_s = Some(seconds / n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> Costs {
        Costs {
            run_s: [("cold".to_string(), 7.0), ("hot".to_string(), 0.3)].into_iter().collect(),
            profile_s: Some(10.0),
            functions_s: None,
            instructions_s: None,
        }
    }

    #[test]
    fn the_first_batches_shrink_to_fit_and_keep_three_runs() {
        let mut first = [(CacheState::Cold, 5), (CacheState::Hot, 10)];
        // 35 + 3 + 10 = 48 s: fits 60.
        Clock::new(Some(Duration::from_secs(60)), costs()).shrink(&mut first, 1);
        assert_eq!(first, [(CacheState::Cold, 5), (CacheState::Hot, 10)]);
        // 40 s: the cold batch gives up runs first.
        Clock::new(Some(Duration::from_secs(40)), costs()).shrink(&mut first, 1);
        assert_eq!(first, [(CacheState::Cold, 3), (CacheState::Hot, 10)]);
        // Too small for even three each: three each, over the budget (the least a gate needs).
        Clock::new(Some(Duration::from_secs(5)), costs()).shrink(&mut first, 1);
        assert_eq!(first, [(CacheState::Cold, 3), (CacheState::Hot, 3)]);
    }

    #[test]
    fn a_later_step_runs_only_if_it_fits_and_costs_are_learned() {
        let mut c = Clock::new(Some(Duration::from_secs(60)), costs());
        c.ran(CacheState::Cold, 5, 40.0);
        assert_eq!(c.costs.run(CacheState::Cold), Some(8.0));
        assert!(c.allows_runs(CacheState::Hot, 10));
        assert!(!c.allows_runs(CacheState::Cold, 5), "40 s more in 20 s");
        assert!(c.allows_profiles(2));
        assert!(!c.allows_profiles(3));
        // Without a budget everything fits.
        assert!(Clock::new(None, costs()).allows_runs(CacheState::Cold, 60));
    }
}
