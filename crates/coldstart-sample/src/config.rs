//! What to generate: the size and shape of the sample program.

use serde::{Deserialize, Serialize};

use crate::Error;

/// A named size preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// A few hundred functions: builds in a few seconds, for unit and integration tests.
    Small,
    /// A few thousand functions: big enough that layout shows, still quick to build.
    Medium,
    /// At least 20,000 functions and 40 MiB of code: for benchmarks.
    Bench,
}

impl Size {
    /// Parse `small`, `medium` or `bench`.
    pub fn parse(name: &str) -> Result<Size, Error> {
        match name {
            "small" => Ok(Size::Small),
            "medium" => Ok(Size::Medium),
            "bench" => Ok(Size::Bench),
            other => {
                Err(Error::Config(format!("unknown size `{other}`: use small, medium or bench")))
            }
        }
    }
}

/// The shape of a sample program. Two equal configs generate byte-identical sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Seed of every random choice (constants, placement, hot sets, data).
    pub seed: u64,
    /// Generated work functions in all modules together (exe 40%, each library 25%, plugin 10%).
    pub functions: usize,
    /// Arithmetic statements in each function body (about 35 bytes of x86-64 code each).
    pub body_statements: usize,
    /// Share of each module's work functions that one workload runs at start-up.
    pub hot_fraction: f64,
    /// Share of one workload's start-up work functions that the other workload also runs.
    pub overlap: f64,
    /// Work functions only one workload runs come in runs of up to this many neighbours in
    /// source order (a feature one workload uses lives in one place); 1 scatters them like
    /// the shared ones.
    pub unique_run: usize,
    /// Groups of start-up functions that `--threads N` runs on worker threads; also the
    /// largest N the program accepts.
    pub thread_groups: usize,
    /// Share of the start-up work functions of the executable and its libraries that belong
    /// to thread groups (run on the main thread without `--threads`).
    pub thread_share: f64,
    /// Size in pages of the data file the program maps and touches at scattered pages.
    pub mapped_pages: usize,
    /// Work functions per C file (more files build in parallel).
    pub functions_per_file: usize,
}

impl Config {
    /// The preset for `size` with `seed`.
    pub fn for_size(size: Size, seed: u64) -> Config {
        let base = Config {
            seed,
            functions: 300,
            body_statements: 6,
            hot_fraction: 0.15,
            overlap: 0.8,
            unique_run: 16,
            thread_groups: 4,
            thread_share: 0.25,
            mapped_pages: 32,
            functions_per_file: 60,
        };
        match size {
            Size::Small => base,
            Size::Medium => Config {
                functions: 3000,
                body_statements: 12,
                mapped_pages: 256,
                functions_per_file: 400,
                ..base
            },
            Size::Bench => Config {
                functions: 20_000,
                body_statements: 66,
                hot_fraction: 0.10,
                mapped_pages: 4096,
                functions_per_file: 500,
                ..base
            },
        }
    }

    /// Check that the numbers make a program; says which field is wrong and what is allowed.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.functions < 40 {
            return bad(format!("functions = {}: use at least 40", self.functions));
        }
        if self.functions > 1_000_000 {
            return bad(format!("functions = {}: use at most 1000000", self.functions));
        }
        if self.body_statements == 0 || self.body_statements > 10_000 {
            return bad(format!("body statements = {}: use 1 to 10000", self.body_statements));
        }
        if !(self.hot_fraction > 0.0 && self.hot_fraction <= 0.5) {
            return bad(format!("hot fraction = {}: use a value in (0, 0.5]", self.hot_fraction));
        }
        if !(0.0..=1.0).contains(&self.overlap) {
            return bad(format!("overlap = {}: use a value in [0, 1] (e.g. 0.8)", self.overlap));
        }
        if self.unique_run == 0 {
            return bad("unique run = 0: use at least 1".to_string());
        }
        if self.thread_groups == 0 || self.thread_groups > 64 {
            return bad(format!("thread groups = {}: use 1 to 64", self.thread_groups));
        }
        if !(0.0..=0.9).contains(&self.thread_share) {
            return bad(format!("thread share = {}: use a value in [0, 0.9]", self.thread_share));
        }
        if self.mapped_pages < 4 || self.mapped_pages > 1 << 20 {
            return bad(format!("mapped pages = {}: use 4 to 1048576", self.mapped_pages));
        }
        if self.functions_per_file == 0 {
            return bad("functions per file = 0: use at least 1".to_string());
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::for_size(Size::Small, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_grow() {
        let s = Config::for_size(Size::Small, 1);
        let m = Config::for_size(Size::Medium, 1);
        let b = Config::for_size(Size::Bench, 1);
        for c in [&s, &m, &b] {
            c.validate().unwrap();
        }
        assert!(s.functions < m.functions && m.functions < b.functions);
        assert!(b.functions >= 20_000);
    }

    #[test]
    fn bad_values_name_the_field() {
        let c = Config { overlap: 1.5, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("overlap"));
        let c = Config { functions: 3, ..Config::default() };
        assert!(c.validate().unwrap_err().to_string().contains("functions"));
        assert!(Size::parse("huge").unwrap_err().to_string().contains("small, medium or bench"));
    }
}
