//! What earlier mounts of a bundle missed outside its hot set, kept beside the chunk cache
//! so that the model can count the misses of the next start ([`crate::model`]'s held-out
//! term).
//!
//! A hot set is recorded from one workload; a start that reads anything else (another
//! command line, other input) waits one round trip for each piece outside it, under every
//! strategy but `original`. Nothing in the bundle says how many such reads the next start
//! will make: they depend on the workload, which the bundle does not know. The mounts of a
//! bundle on this machine do: each writes, at unmount, how many reads outside the hot set
//! waited for the network and the bytes they brought, and the next prediction takes the
//! median of the latest of them. A bundle started here for the first time has no history,
//! and its prediction counts no such miss (as before this file existed).
//!
//! The file is `history/<manifest SHA-256>.json` under the chunk cache's directory: one per
//! bundle version (a new version has a new hot set, whose misses are others). It holds the
//! last [`KEEP`] mounts, and is written atomically; a history that cannot be read is taken
//! as none.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::strategy::Strategy;

/// The mounts a history keeps, newest last.
pub const KEEP: usize = 16;

/// The format name in a history file.
const FORMAT: &str = "coldstart-miss-history";

/// One mount's reads outside the hot set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldOutRun {
    /// The strategy the mount ran.
    pub strategy: Strategy,
    /// Reads of chunks outside the hot set that waited for the network.
    pub misses: u64,
    /// Their chunks' bytes on the wire.
    pub bytes: u64,
    /// Every byte fetched but the manifest's and the hot set's request: these misses, what
    /// they brought ahead, hot chunks fetched on their own while the hot request was far from
    /// them, background work.
    #[serde(default)]
    pub other_bytes: u64,
}

/// Earlier mounts of one bundle, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The format's name.
    pub format: String,
    /// The mounts, oldest first.
    pub runs: Vec<HeldOutRun>,
}

/// What the model counts for a start under `strategy` outside its hot set: the median of
/// earlier mounts'.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HeldOut {
    /// The strategy.
    pub strategy: Strategy,
    /// Reads outside the hot set that wait for a request of their own.
    pub misses: f64,
    /// Their bytes.
    pub bytes: f64,
    /// The bytes fetched besides the manifest's and the hot set's request (at least `bytes`).
    pub other_bytes: f64,
    /// Of how many earlier mounts.
    pub runs: usize,
}

/// The history file of the bundle whose `manifest.json` has SHA-256 `manifest` under chunk
/// cache `cache_dir`.
pub fn path(cache_dir: &Path, manifest: &[u8; 32]) -> PathBuf {
    let hex: String = manifest.iter().map(|b| format!("{b:02x}")).collect();
    cache_dir.join("history").join(format!("{hex}.json"))
}

impl History {
    /// The history at `path`; none when it is missing or cannot be read.
    pub fn read(path: &Path) -> History {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<History>(&b).ok())
            .filter(|h| h.format == FORMAT)
            .unwrap_or_default()
    }

    /// A history of `runs`, oldest first (the latest [`KEEP`] of them).
    pub fn new(runs: &[HeldOutRun]) -> History {
        let from = runs.len().saturating_sub(KEEP);
        History { format: FORMAT.into(), runs: runs[from..].to_vec() }
    }

    /// Adds a mount (dropping the oldest beyond [`KEEP`]) and writes the file atomically.
    pub fn append(path: &Path, run: HeldOutRun) -> std::io::Result<()> {
        let mut runs = History::read(path).runs;
        runs.push(run);
        History::new(&runs).write(path)
    }

    /// Writes the file atomically, creating its directory.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        coldstart_fs::write_atomic(path, &bytes)
    }

    /// The misses to expect of a start under `strategy`: the median of the earlier mounts
    /// under it, or, with none, the misses of every earlier mount that could miss (all but
    /// `original`), whose other bytes (a stream's background fetch, say) are their own and are
    /// not lent: only the misses' bytes are. `None`: no such mount, or `original`, which
    /// fetches every file before start and misses nothing.
    pub fn held_out(&self, strategy: Strategy) -> Option<HeldOut> {
        if strategy == Strategy::Original {
            return None;
        }
        let same: Vec<&HeldOutRun> = self.runs.iter().filter(|r| r.strategy == strategy).collect();
        let lent = same.is_empty();
        let runs = if lent {
            self.runs.iter().filter(|r| r.strategy != Strategy::Original).collect()
        } else {
            same
        };
        if runs.is_empty() {
            return None;
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        };
        Some(HeldOut {
            strategy,
            misses: median(runs.iter().map(|r| r.misses as f64).collect()),
            bytes: median(runs.iter().map(|r| r.bytes as f64).collect()),
            other_bytes: median(
                runs.iter()
                    .map(|r| if lent { r.bytes } else { r.other_bytes.max(r.bytes) } as f64)
                    .collect(),
            ),
            runs: runs.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: Strategy, misses: u64) -> HeldOutRun {
        HeldOutRun { strategy, misses, bytes: misses * 1000, other_bytes: misses * 1500 }
    }

    #[test]
    fn a_bundle_never_mounted_has_no_history() {
        let d = tempfile::tempdir().unwrap();
        let p = path(d.path(), &[7; 32]);
        assert!(p.ends_with(format!("history/{}.json", "07".repeat(32))));
        assert_eq!(History::read(&p).held_out(Strategy::Stream), None);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"not json").unwrap();
        assert_eq!(History::read(&p).held_out(Strategy::Stream), None, "unreadable: none");
    }

    #[test]
    fn the_median_of_the_same_strategy_else_of_every_strategy_that_misses() {
        let d = tempfile::tempdir().unwrap();
        let p = path(d.path(), &[1; 32]);
        for r in [
            run(Strategy::Original, 0),
            run(Strategy::Reordered, 20),
            run(Strategy::Reordered, 22),
            run(Strategy::Reordered, 30),
            run(Strategy::Stream, 4),
        ] {
            History::append(&p, r).unwrap();
        }
        let h = History::read(&p);
        let r = h.held_out(Strategy::Reordered).unwrap();
        assert_eq!((r.misses, r.bytes, r.other_bytes, r.runs), (22.0, 22_000.0, 33_000.0, 3));
        assert_eq!(h.held_out(Strategy::Stream).unwrap().misses, 4.0);
        // No paged mount yet: the four that could miss, original left out.
        let p = h.held_out(Strategy::Paged).unwrap();
        assert_eq!((p.misses, p.runs), (21.0, 4));
        // Of those only the misses' bytes are lent, not what else each strategy fetched.
        assert_eq!((p.bytes, p.other_bytes), (21_000.0, 21_000.0));
        assert_eq!(h.held_out(Strategy::Original), None, "original misses nothing");
    }

    #[test]
    fn only_the_latest_mounts_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = path(d.path(), &[2; 32]);
        for i in 0..KEEP as u64 + 5 {
            History::append(&p, run(Strategy::Paged, i)).unwrap();
        }
        let h = History::read(&p);
        assert_eq!(h.runs.len(), KEEP);
        assert_eq!(h.runs[0].misses, 5);
    }
}
