//! What the network commands share: the flags of `mount` and `run`, the `--link-hint` and
//! `--readahead` values `predict` takes too, the signals a mount lasts until, and how a
//! mount's report and errors are printed. What the flags mean and default to is decided by
//! `coldstart_lazyfs` ([`MountRequest`]); here they are only parsed and handed over.

use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_lazyfs::model::LinkEstimate;
use coldstart_lazyfs::{MountError, MountOptions, MountRequest, Report, StrategyOrAuto};

/// Options shared by `mount` and `run`.
#[derive(Debug, clap::Args)]
pub struct MountFlags {
    /// original, paged, reordered-paged, reordered, stream, or auto (predict each on the
    /// measured link and pick the fastest).
    #[arg(long, default_value = "stream")]
    pub strategy: StrategyOrAuto,
    /// The link for `--strategy auto`, e.g. 20mbit/40ms, instead of measuring it.
    #[arg(long, value_name = "BW/LAT")]
    pub link_hint: Option<coldstart_serve::Link>,
    /// The chunk cache, shared by mounts [default: $XDG_CACHE_HOME/coldstart/chunks or
    /// ~/.cache/coldstart/chunks].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// At unmount, write what was read, in first-touch order, as a hot list for `pack`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Retries of a failed fetch before a read fails with EIO.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
    /// Bound in seconds on connecting and on each network read.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// The kernel's read-ahead and page-fault read-around, in bytes (k or m suffix): how much
    /// past a read the kernel asks for. Smaller keeps a page fault from fetching neighbouring
    /// chunks the program never touches; larger helps sequential reads.
    #[arg(long, default_value = "128k", value_parser = parse_readahead)]
    pub readahead: u32,
    /// Print the statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

impl MountFlags {
    /// The mount's options, as `coldstart_lazyfs` derives them from these flags.
    pub fn options(&self) -> Result<MountOptions, MountError> {
        MountRequest {
            strategy: self.strategy,
            link_hint: link_hint(self.link_hint),
            cache_dir: self.cache_dir.clone(),
            record: self.record.clone(),
            retries: self.retries,
            timeout: self.timeout,
            connections: self.connections,
            readahead: self.readahead,
        }
        .options()
    }
}

/// `--link-hint` as the model's link, marked as given.
pub fn link_hint(link: Option<coldstart_serve::Link>) -> Option<LinkEstimate> {
    link.map(|l| LinkEstimate::given(l.bits_per_second, l.latency))
}

/// `--readahead`: a size, and one a mount takes.
pub fn parse_readahead(s: &str) -> Result<u32, String> {
    let v = super::parse_size(s)?;
    coldstart_lazyfs::readahead(v).map_err(|e| format!("`{s}`: {e}"))
}

/// Blocks the signals that end a mount, so that they can be waited for (threads started
/// afterwards inherit the mask).
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; returns it.
pub fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let s = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

/// A mount's statistics at unmount, on standard error: two lines, or JSON.
pub fn print_report(r: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        eprintln!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    eprintln!(
        "coldstart: {}: fetched {} bytes in {} requests ({} failed attempts); {} cache hits, {} misses, {} errors",
        r.strategy, r.bytes_fetched, r.requests, r.failed_attempts, r.cache_hits, r.misses, r.errors
    );
    eprintln!(
        "coldstart: before start {:.1} ms; waiting on misses {:.1} ms in total (median {:.2} ms, longest {:.1} ms); {} hot and {} background chunks",
        r.prefetch_ms,
        r.miss_wait_total_ms,
        r.miss_wait_median_ms,
        r.miss_wait_max_ms,
        r.hot_chunks,
        r.background_chunks
    );
    if let Some(e) = &r.background_error {
        eprintln!("coldstart: background fetch stopped: {e}");
    }

    Ok(())
}

/// A mount error, with the mount point where the error itself does not name it (bad input
/// does: its message says which path and what to do).
pub fn mount_error(dir: &Path, e: MountError) -> anyhow::Error {
    match e.category() {
        coldstart_error::Category::Usage => e.into(),
        _ => anyhow::Error::new(e).context(format!("cannot mount on {}", dir.display())),
    }
}
