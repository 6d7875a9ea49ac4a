//! What the network commands share: the flags of `mount` and `run`, the network flags and the
//! `--link-hint` and `--readahead` values `predict` takes too, and how a mount's report and
//! errors are printed. What the flags mean and default to is decided by `coldstart_lazyfs`
//! ([`MountRequest`], [`NetworkRequest`]); here they are only parsed and handed over.

use std::path::{Path, PathBuf};
use std::time::Duration;

use coldstart_bundle::Cancel;
use coldstart_lazyfs::model::LinkEstimate;
use coldstart_lazyfs::{
    MountError, MountOptions, MountRequest, NetworkRequest, Report, StrategyOrAuto,
};
use coldstart_units::{DAY, MILLISECOND};

/// The most requests a fetcher may keep in flight (`--connections`).
pub const MAX_CONNECTIONS: u64 = 256;

/// Options shared by `mount` and `run`.
#[derive(Debug, clap::Args)]
pub struct MountFlags {
    /// auto (predict each strategy on the measured link, counting the misses outside the hot
    /// set of earlier starts, and pick the fastest), or original, paged, reordered-paged,
    /// reordered, stream.
    #[arg(long, default_value = "auto")]
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
    /// At unmount, write a record of what this start read outside the hot set (offsets,
    /// lengths and times of the bundle's pieces, named by file content: never a byte or a
    /// path) for `pack --learn-from`: DEST is a directory (one new file per start), an
    /// s3://BUCKET/PREFIX/ (the credentials `publish` uses) or an http(s):// URL that takes
    /// PUT. A record that cannot be written is a warning, never the command's failure
    /// (docs/learn.md).
    #[arg(long, value_name = "DEST", value_parser = parse_learn_dest)]
    pub learn: Option<coldstart_bundle::learn::store::Place>,
    /// With --learn, the share of starts that write a record, 0 to 1 (0.01: one in 100, drawn
    /// at random): what a fleet sends.
    #[arg(long, value_name = "P", default_value = "1", requires = "learn", value_parser = parse_share)]
    pub learn_rate: f64,
    #[command(flatten)]
    pub network: NetworkFlags,
    /// The kernel's read-ahead and page-fault read-around, in bytes (k or m suffix): how much
    /// past a read the kernel asks for. Smaller keeps a page fault from fetching neighbouring
    /// chunks the program never touches; larger helps sequential reads [default: 4k when a
    /// read may fetch or with --record; 128k for `original` or with every chunk cached].
    #[arg(long, value_parser = parse_readahead)]
    pub readahead: Option<u32>,
    /// Print the statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How to use the network: `mount`, `run` and `predict` (docs/network.md, "Bounds").
#[derive(Debug, clap::Args)]
pub struct NetworkFlags {
    /// Retries of a failed fetch before a read fails with EIO (at most 10).
    #[arg(long, default_value_t = 3, value_parser = coldstart_units::count_in::<u32>(0, coldstart_bundle::remote::MAX_RETRIES as u64))]
    pub retries: u32,
    /// Bound in seconds on connecting, on waiting for an answer, and on each wait for more
    /// bytes.
    #[arg(long, default_value = "10", value_parser = coldstart_units::duration_in(MILLISECOND, DAY))]
    pub timeout: Duration,
    /// The slowest transfer accepted, in bytes per second (k or m suffix): a response that
    /// brings fewer bytes per second over any --timeout seconds fails and is retried.
    #[arg(long, default_value = "1k", value_parser = coldstart_units::size_in(1, 1 << 30))]
    pub min_rate: u64,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 4, value_parser = coldstart_units::count_in::<usize>(1, MAX_CONNECTIONS))]
    pub connections: usize,
    /// CA certificates (PEM) to trust for https:// besides the system's, e.g. a private CA, or
    /// the server's own self-signed certificate (`openssl req -x509`), as curl --cacert.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// For an s3:// URL: the store's URL, e.g. http://127.0.0.1:5000 [default:
    /// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's].
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// For an s3:// URL: the bucket's region [default: AWS_REGION, AWS_DEFAULT_REGION, the
    /// profile's region, else us-east-1].
    #[arg(long)]
    pub region: Option<String>,
    /// Accept only a bundle signed by this public key (PEM, from `coldstart key new` or
    /// OpenSSL): repeat it to accept any of several keys, as when rotating. A bundle unsigned,
    /// signed by another key or altered is refused before anything runs (exit code 4).
    #[arg(long, value_name = "PUBKEY")]
    pub trust: Vec<PathBuf>,
}

impl NetworkFlags {
    /// What `coldstart_lazyfs` checks and turns into the fetcher's options; `cancel` stops
    /// every fetch.
    pub fn request(&self, cancel: Cancel) -> NetworkRequest {
        // Every fetcher of this process trusts --ca-file and says its warnings on stderr.
        coldstart_bundle::remote::set_defaults(
            self.ca_file.clone(),
            coldstart_bundle::remote::Warn::new(|m| eprintln!("coldstart: warning: {m}")),
        );
        // And signs for s3:// URLs with these settings over the environment's.
        coldstart_bundle::remote::set_s3_defaults(coldstart_bundle::s3::S3Settings {
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
        });
        NetworkRequest {
            retries: self.retries,
            timeout: self.timeout.as_secs_f64(),
            min_rate: self.min_rate,
            connections: self.connections,
            cancel,
            trust: self.trust.clone(),
        }
    }
}

impl MountFlags {
    /// The mount's options, as `coldstart_lazyfs` derives them from these flags; `cancel`
    /// stops every fetch of the mount.
    pub fn options(&self, cancel: Cancel) -> Result<MountOptions, MountError> {
        MountRequest {
            strategy: self.strategy,
            link_hint: link_hint(self.link_hint),
            cache_dir: self.cache_dir.clone(),
            record: self.record.clone(),
            network: self.network.request(cancel),
            readahead: self.readahead,
        }
        .options()
    }
}

/// A progress bar for the downloads a mount makes before start (`original`'s whole files),
/// when stderr is a terminal: set as the mount's progress callback. The caller clears it once
/// the mount is made, before the program writes to the terminal.
pub fn fetch_bar(opts: &mut MountOptions) -> Option<indicatif::ProgressBar> {
    // Drawn once the first bytes arrive: a strategy that fetches nothing before start shows none.
    let bar = super::byte_bar("fetching", 0)?;
    let b = bar.clone();
    opts.progress = Some(coldstart_bundle::Progress(std::sync::Arc::new(move |done, total| {
        super::show_bytes(&b, done, total)
    })));
    Some(bar)
}

/// `--link-hint` as the model's link, marked as given.
pub fn link_hint(link: Option<coldstart_serve::Link>) -> Option<LinkEstimate> {
    link.map(|l| LinkEstimate::given(l.bits_per_second, l.latency))
}

/// `--readahead`: a size, and one a mount takes.
pub fn parse_readahead(s: &str) -> Result<u32, String> {
    let v = coldstart_units::parse_size(s)?;
    coldstart_lazyfs::readahead(v).map_err(|e| format!("`{s}`: {e}"))
}

/// A mount's statistics at unmount, on standard error: two lines, or JSON.
pub fn print_report(r: &Report, json: bool) -> anyhow::Result<()> {
    use coldstart_units::count;
    if json {
        eprintln!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    eprintln!(
        "coldstart: {}: fetched {} in {} ({}); {}, {} ({} outside the hot set), {}",
        r.strategy,
        coldstart_units::bytes(r.bytes_fetched),
        count(r.requests, "request"),
        count(r.failed_attempts, "failed attempt"),
        count(r.cache_hits, "cache hit"),
        count(r.misses, "miss"),
        r.held_out_misses,
        count(r.errors, "error")
    );
    eprintln!(
        "coldstart: before start {:.1} ms; waiting on misses {:.1} ms in total (median {:.2} ms, longest {:.1} ms); {} hot and {} background chunks; {} brought with misses ({} read); read-ahead {}",
        r.prefetch_ms,
        r.miss_wait_total_ms,
        r.miss_wait_median_ms,
        r.miss_wait_max_ms,
        r.hot_chunks,
        r.background_chunks,
        r.ahead_chunks,
        r.ahead_read,
        coldstart_units::bytes(r.readahead as u64)
    );
    if let Some(e) = &r.background_error {
        eprintln!("coldstart: background fetch stopped: {e}");
    }

    Ok(())
}

/// Mounts `url` on `dir` with a fetch bar on standard error. A signal that cancelled the
/// mount is said on standard error, with `instead` (what did not happen), and gives the exit
/// code to return; any other error names the mount point as [`mount_error`] does.
pub fn mount_with_bar(
    url: &str,
    dir: &Path,
    mut opts: MountOptions,
    signals: &super::signals::Signals,
    instead: &str,
) -> anyhow::Result<Result<coldstart_lazyfs::Mount, std::process::ExitCode>> {
    let bar = fetch_bar(&mut opts);
    let mounted = coldstart_lazyfs::mount(url, dir, opts);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match mounted {
        Ok(m) => Ok(Ok(m)),
        Err(e) => match signals.first() {
            Some(s) if e.is_cancelled() => {
                eprintln!("coldstart: {} while mounting: {instead}", super::signals::name(s));
                Ok(Err(super::signals::exit_code(s)))
            }
            _ => Err(mount_error(dir, e)),
        },
    }
}

/// A mount error, with the mount point where the error itself does not name it (bad input,
/// a missing privilege and an untrusted bundle do: the message says which path, URL, device
/// or key and what to do).
pub fn mount_error(dir: &Path, e: MountError) -> anyhow::Error {
    use coldstart_error::Category;
    match e.category() {
        Category::Usage | Category::Privilege | Category::Untrusted => e.into(),
        _ => anyhow::Error::new(e).context(format!("cannot mount on {}", dir.display())),
    }
}

/// `--learn`'s and `--learn-from`'s value: a directory, `s3://BUCKET/PREFIX/` or
/// `http[s]://...`.
pub fn parse_learn_dest(s: &str) -> Result<coldstart_bundle::learn::store::Place, String> {
    coldstart_bundle::learn::store::Place::parse(s).map_err(|e| e.to_string())
}

/// `--learn-rate` and `--learn-share`: a share from 0 to 1.
pub fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{s}`: give a share from 0 to 1, e.g. 0.01 for one start in 100")),
    }
}
