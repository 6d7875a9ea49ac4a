//! How to mount, and how what a user gives becomes it: the defaults (the chunk cache's
//! directory, the read-ahead) and the settings derived from others (how long a read may wait)
//! are decided here, once, for every front end.

use std::path::PathBuf;
use std::time::Duration;

use coldstart_bundle::FetchOptions;

use crate::engine::EngineOptions;
use crate::error::MountError;
use crate::model::LinkEstimate;
use crate::strategy::{Strategy, StrategyOrAuto};

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub strategy: Strategy,
    /// The chunk cache directory (shared by mounts).
    pub cache_dir: PathBuf,
    /// Write what was read, in first-touch order, here at unmount.
    pub record: Option<PathBuf>,
    pub fetch: FetchOptions,
    /// Bound on a read waiting for a chunk another fetch is bringing.
    pub read_timeout: Duration,
    /// The kernel's read-ahead (and page-fault read-around) in bytes: how far past a read it
    /// asks for more. Larger helps sequential reads of cached data; smaller keeps a page
    /// fault from fetching neighbouring chunks the program never touches.
    pub readahead: u32,
    /// Choose the strategy with the model ([`crate::model`]) instead of `strategy`.
    pub auto: Option<AutoOptions>,
}

/// What `--strategy auto` is told.
#[derive(Debug, Clone, Default)]
pub struct AutoOptions {
    /// The link, given instead of measured.
    pub link: Option<LinkEstimate>,
    /// The program's start-up time with every byte local, if known.
    pub local: Option<Duration>,
}

/// The default of [`MountOptions::readahead`]: 128 KiB, the kernel's own default.
pub const DEFAULT_READAHEAD: u32 = 128 * 1024;

impl MountOptions {
    pub fn new(strategy: Strategy, cache_dir: PathBuf) -> MountOptions {
        MountOptions {
            strategy,
            cache_dir,
            record: None,
            fetch: FetchOptions::default(),
            read_timeout: EngineOptions::default().read_timeout,
            readahead: DEFAULT_READAHEAD,
            auto: None,
        }
    }
}

/// What a user asked of a mount (`coldstart mount` and `run`), as given;
/// [`MountRequest::options`] checks it and derives the rest.
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// A strategy, or `auto`.
    pub strategy: StrategyOrAuto,
    /// The link for `auto`, given instead of measured; only with `auto`.
    pub link_hint: Option<LinkEstimate>,
    /// The chunk cache, shared by mounts; `None`: [`default_cache_dir`].
    pub cache_dir: Option<PathBuf>,
    /// At unmount, write what was read, in first-touch order, as a hot list for `pack`.
    pub record: Option<PathBuf>,
    /// Retries of a failed fetch before a read fails with `EIO`.
    pub retries: u32,
    /// Bound in seconds on connecting and on each network read; positive.
    pub timeout: f64,
    /// Requests in flight at most (0 is taken as 1).
    pub connections: usize,
    /// The kernel's read-ahead in bytes ([`readahead`] checks a value).
    pub readahead: u32,
}

impl MountRequest {
    /// The mount's options; a usage error for a timeout that is not a positive number, no
    /// home directory to put the cache in, or a link hint without `auto`.
    ///
    /// Under `auto` the strategy is `stream` until the model has chosen. A read waits at most
    /// for every attempt of the fetch it depends on: connecting and reading, each bounded by
    /// the timeout, once and again for each retry, and 10 s more.
    pub fn options(&self) -> Result<MountOptions, MountError> {
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(MountError::Timeout);
        }
        let cache = match &self.cache_dir {
            Some(d) => d.clone(),
            None => default_cache_dir()?,
        };
        let fixed = match self.strategy {
            StrategyOrAuto::Fixed(s) => s,
            StrategyOrAuto::Auto => Strategy::Stream,
        };
        if self.link_hint.is_some() && self.strategy != StrategyOrAuto::Auto {
            return Err(MountError::LinkHintWithoutAuto);
        }
        let mut o = MountOptions::new(fixed, cache);
        if self.strategy == StrategyOrAuto::Auto {
            o.auto = Some(AutoOptions { link: self.link_hint, local: None });
        }
        o.record = self.record.clone();
        o.readahead = self.readahead;
        o.fetch.retries = self.retries;
        o.fetch.connections = self.connections.max(1);
        o.fetch.connect_timeout = Duration::from_secs_f64(self.timeout);
        o.fetch.io_timeout = Duration::from_secs_f64(self.timeout);
        o.read_timeout = Duration::from_secs_f64(self.timeout * 2.0 * (self.retries + 1) as f64)
            + Duration::from_secs(10);
        Ok(o)
    }
}

/// The chunk cache's directory when none is given: `$XDG_CACHE_HOME/coldstart/chunks`, else
/// `~/.cache/coldstart/chunks`.
pub fn default_cache_dir() -> Result<PathBuf, MountError> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("coldstart/chunks"));
    }
    match std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/coldstart/chunks")),
        None => Err(MountError::NoCacheDir),
    }
}

/// A read-ahead of `bytes`, if it is one the mount takes: 4 KiB to 1 MiB.
pub fn readahead(bytes: u64) -> Result<u32, MountError> {
    if (4096..=1 << 20).contains(&bytes) {
        Ok(bytes as u32)
    } else {
        Err(MountError::Readahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> MountRequest {
        MountRequest {
            strategy: StrategyOrAuto::Fixed(Strategy::Paged),
            link_hint: None,
            cache_dir: Some("/c".into()),
            record: None,
            retries: 3,
            timeout: 10.0,
            connections: 0,
            readahead: DEFAULT_READAHEAD,
        }
    }

    #[test]
    fn a_read_waits_for_every_attempt_of_its_fetch() {
        let o = request().options().unwrap();
        assert_eq!(o.read_timeout, Duration::from_secs(4 * 20 + 10));
        assert_eq!((o.fetch.connections, o.fetch.io_timeout), (1, Duration::from_secs(10)));
        assert!(o.auto.is_none());
    }

    #[test]
    fn what_cannot_be_used_is_refused() {
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let r = MountRequest { timeout: t, ..request() };
            assert!(matches!(r.options(), Err(MountError::Timeout)), "{t}");
        }
        let link = Some(LinkEstimate::given(1e6, Duration::from_millis(10)));
        let r = MountRequest { link_hint: link, ..request() };
        assert!(matches!(r.options(), Err(MountError::LinkHintWithoutAuto)));
        let r = MountRequest { link_hint: link, strategy: StrategyOrAuto::Auto, ..request() };
        let o = r.options().unwrap();
        assert_eq!((o.strategy, o.auto.unwrap().link), (Strategy::Stream, link));
        assert!(readahead(4095).is_err() && readahead((1 << 20) + 1).is_err());
        assert_eq!(readahead(4096).unwrap(), 4096);
    }
}
