//! `coldstart mount`: a bundle as a read-only file system until Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use coldstart_lazyfs::model::LinkEstimate;
use coldstart_lazyfs::{is_mount_point, AutoOptions, MountOptions, Report, Strategy};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bundle: `http://HOST[:PORT]/PATH/` (as printed by `coldstart serve`) or a directory.
    pub url: String,
    /// An empty directory to mount on.
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

/// Options shared by `mount` and `run`.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// original, paged, reordered-paged, reordered, stream, or auto (predict each on the
    /// measured link and pick the fastest).
    #[arg(long, default_value = "stream")]
    pub strategy: StrategyArg,
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

/// A strategy, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyArg {
    Auto,
    Fixed(Strategy),
}

impl std::str::FromStr for StrategyArg {
    type Err = coldstart_lazyfs::StrategyParseError;
    fn from_str(s: &str) -> Result<StrategyArg, Self::Err> {
        if s == "auto" {
            Ok(StrategyArg::Auto)
        } else {
            s.parse().map(StrategyArg::Fixed)
        }
    }
}

impl std::fmt::Display for StrategyArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StrategyArg::Auto => f.write_str("auto"),
            StrategyArg::Fixed(s) => s.fmt(f),
        }
    }
}

/// A link hint as the model's link, marked as given.
pub fn hint(link: Option<coldstart_serve::Link>) -> Option<LinkEstimate> {
    link.map(|l| LinkEstimate::given(l.bits_per_second, l.latency))
}

/// A read-ahead: a size of 4 KiB to 1 MiB.
pub fn parse_readahead(s: &str) -> Result<u32, String> {
    let v = super::common::parse_size(s)?;
    if (4096..=1 << 20).contains(&v) {
        Ok(v as u32)
    } else {
        Err(format!("`{s}`: a read-ahead is between 4k and 1m"))
    }
}

impl Common {
    pub fn options(&self) -> anyhow::Result<MountOptions> {
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(crate::exit::usage("--timeout must be a positive number of seconds"));
        }
        let cache = match &self.cache_dir {
            Some(d) => d.clone(),
            None => default_cache_dir()?,
        };
        let fixed = match self.strategy {
            StrategyArg::Fixed(s) => s,
            StrategyArg::Auto => Strategy::Stream,
        };
        if self.link_hint.is_some() && self.strategy != StrategyArg::Auto {
            return Err(crate::exit::usage("--link-hint is for --strategy auto"));
        }
        let mut o = MountOptions::new(fixed, cache);
        if self.strategy == StrategyArg::Auto {
            o.auto = Some(AutoOptions { link: hint(self.link_hint), local: None, manifest: None });
        }
        o.record = self.record.clone();
        o.readahead = self.readahead;
        o.fetch.retries = self.retries;
        o.fetch.connections = self.connections.max(1);
        o.fetch.connect_timeout = Duration::from_secs_f64(self.timeout);
        o.fetch.io_timeout = Duration::from_secs_f64(self.timeout);
        // A read waits at most for every attempt of the fetch it depends on.
        o.read_timeout = Duration::from_secs_f64(self.timeout * 2.0 * (self.retries + 1) as f64)
            + Duration::from_secs(10);
        Ok(o)
    }
}

pub fn default_cache_dir() -> anyhow::Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("coldstart/chunks"));
    }
    match std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/coldstart/chunks")),
        None => Err(crate::exit::usage("no HOME or XDG_CACHE_HOME: give --cache-dir")),
    }
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
pub fn mount_error(dir: &Path, e: coldstart_lazyfs::MountError) -> anyhow::Error {
    match e.category() {
        coldstart_error::Category::Usage => e.into(),
        _ => anyhow::Error::new(e).context(format!("cannot mount on {}", dir.display())),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = args.common.options()?;
    let signals = block_signals();
    let mount = coldstart_lazyfs::mount(&args.url, &args.dir, opts)
        .map_err(|e| mount_error(&args.dir, e))?;
    if let Some(c) = mount.choice() {
        eprintln!("coldstart: {}", c.summary());
    }
    let strategy =
        mount.choice().map_or(args.common.strategy.to_string(), |c| c.chosen.to_string());
    eprintln!(
        "coldstart: mounted {} on {} ({strategy}); Ctrl-C to unmount",
        args.url,
        args.dir.display(),
    );
    // Until a signal, or until someone else unmounts it.
    while wait_signal(&signals, Duration::from_millis(500)).is_none() {
        if !is_mount_point(&args.dir) {
            break;
        }
    }
    let report = mount.unmount()?;
    print_report(&report, args.common.json)?;
    Ok(crate::exit::SUCCESS)
}
