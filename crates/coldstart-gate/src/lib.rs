//! A CI gate on start-up: "start-up can never get any slower", without flaky jobs.
//!
//! `coldstart gate --baseline BASE.json -- CMD` measures a start-up as its baseline was
//! measured and says **slower**, **not slower** or **unclear**, figure by figure:
//!
//! - **Steady figures** of a cold start, which barely move between runs: bytes and requests
//!   read (exactly, from the emulated device, under the storage emulation), major faults, the
//!   pages start-up touched (from page profiles) and the instructions it ran (counted by the
//!   CPU, or under valgrind where the CPU does not: [`instructions`]). Each is slower when its median now is above a limit that the baseline's
//!   own spread sets, plus a configurable slack ([`steady`]): one more read request over a
//!   figure that never moved is caught.
//! - **New functions run**, for a new build (`--new-build`): the code of the functions start-up
//!   runs that the baseline's runs did not, by symbol name, from function profiles
//!   ([`functions`]): a relink moves pages, not which functions run.
//! - **Time**, cold and hot: a Mann-Whitney rank test with a minimum effect above the
//!   measured noise, net of how much slower the machine itself is now (a calibration loop run
//!   between the runs); runs are added while it is unclear, up to a bound sized from the
//!   effect in interquartile ranges ([`time`]). Hot CPU time that a busier machine stretched
//!   is settled by the instructions ([`compare`]).
//!
//! The baseline ([`baseline`]) records the machine, kernel, disk and storage profile, so a
//! baseline from elsewhere is flagged ([`environment`]); the history ([`history`]) keeps each
//! gated run's medians, and [`drift`] finds a slow rise over many of them.
//!
//! The decision rules ([`steady`], [`time`], [`drift`]) are pure functions of samples; the
//! order of steps ([`run`]) measures through a [`run::Runner`], which [`linux`] implements
//! with `coldstart-measure` and `coldstart-profile`.
//!
//! ```
//! use coldstart_gate::figure::{Figure, Verdict};
//! use coldstart_gate::noise::FigureNoise;
//! use coldstart_gate::{steady, time};
//!
//! // 4,690 pages touched in every baseline profile: two more are within what comes and goes
//! // on an unchanged program, five more (one more far function) are slower.
//! let pages = FigureNoise::of(Figure::PagesTouched);
//! assert_eq!(steady::judge(&[4690.0; 6], &[4692.0; 2], pages, 0.0).verdict, Verdict::NotSlower);
//! assert_eq!(steady::judge(&[4690.0; 6], &[4695.0; 2], pages, 0.0).verdict, Verdict::Slower);
//!
//! // 40 ms and 48 ms, a little noise: 20% slower.
//! let base: Vec<f64> = (0..20).map(|i| 0.040 + (i % 5) as f64 * 1e-4).collect();
//! let now: Vec<f64> = (0..10).map(|i| 0.048 + (i % 5) as f64 * 1e-4).collect();
//! assert_eq!(time::judge(&base, &now, &time::TimeRule::default(), None).verdict, Verdict::Slower);
//! ```

pub mod baseline;
pub mod budget;
pub mod compare;
pub mod drift;
pub mod environment;
pub mod error;
pub mod figure;
pub mod functions;
pub mod history;
pub mod identity;
pub mod instructions;
pub mod linux;
pub mod noise;
pub mod pages;
pub mod plan;
pub mod replay;
pub mod report;
pub mod run;
pub mod steady;
pub mod summary;
pub mod time;

pub use baseline::Baseline;
pub use error::GateError;
pub use figure::{Figure, Slack, Verdict};
pub use report::{GateReport, Outcome, Policy};
pub use run::{gate, record, GateOptions, StorageChoice};

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::GateError)
}
