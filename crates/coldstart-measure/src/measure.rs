//! Orchestration of a measurement: warm-up, cache preparation, runs, statistics.
//!
//! STATUS: implementation in progress.

use crate::{CacheState, Ready};

/// Everything a measurement needs, validated by the caller.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// The command (argv) to measure; a second one when comparing.
    pub commands: Vec<Vec<String>>,
    pub cache: CacheState,
    pub ready: Ready,
    pub runs: usize,
    pub warmup: usize,
    pub timeout: std::time::Duration,
}

/// Run a measurement (not implemented yet).
pub fn measure(_opts: &MeasureOptions) -> Result<crate::MeasureReport, std::io::Error> {
    Err(std::io::Error::other("not implemented"))
}
