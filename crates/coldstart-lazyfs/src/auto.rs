//! Choosing a strategy with the model: what `--strategy auto` does while mounting, and what
//! `coldstart predict` shows without mounting. The model ([`crate::model`]) predicts from a
//! bundle's shape and a link; this module gathers those (the manifest, the chunk cache, the
//! link given or measured) the way a mount would.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use coldstart_bundle::remote::{get_manifest, open, redact_url};
use coldstart_bundle::start::MANIFEST_ZST;
use coldstart_bundle::{ChunkCache, Manifest, Remote};

use crate::error::MountError;
use crate::history::History;
use crate::model::{self, Choice, LinkEstimate, ManifestCost, Params, Probe, Shape};
use crate::options::{default_cache_dir, AutoOptions, NetworkRequest};
use crate::strategy::Strategy;

/// How to predict, besides the bundle and the cache.
#[derive(Debug, Clone)]
pub(crate) struct ChooseOptions {
    /// The link given, and the local start-up time.
    pub(crate) auto: AutoOptions,
    /// The manifest's cost, to predict a mount that has yet to read it (`coldstart predict`),
    /// or that reads it from the start object with the hot set; `None` for a mount that has
    /// read it on its own.
    pub(crate) manifest_cost: Option<ManifestCost>,
    /// Bytes and time of the manifest's fetch: a bandwidth sample, if large enough.
    pub(crate) manifest_fetch: Option<(u64, Duration)>,
    /// Requests in flight at most.
    pub(crate) connections: usize,
    /// The kernel's read-ahead in bytes.
    pub(crate) readahead: u32,
    /// Keep the hot chunks the link probe brought: into the cache, and counted as cached (a
    /// mount, which is about to need them). Otherwise the prediction is for the cache as it
    /// is, and the cache is left alone (`coldstart predict`).
    pub(crate) keep_probed: bool,
    /// Earlier mounts of the bundle: the misses outside its hot set to expect.
    pub(crate) history: History,
}

/// Predicts every strategy for this bundle, cache and link (measured unless given) and picks
/// the fastest: what `--strategy auto` and `coldstart predict` do.
pub(crate) fn choose(
    remote: &dyn Remote,
    manifest: &Manifest,
    cache: &ChunkCache,
    how: &ChooseOptions,
) -> Result<Choice, MountError> {
    let probe = model::estimate_link(remote, manifest, how.manifest_fetch, how.auto.link)
        .map_err(MountError::Probe)?;
    Ok(choose_with(probe, manifest, cache, how))
}

/// [`choose`] with the link (and the hot chunks its measuring brought) already at hand.
pub(crate) fn choose_with(
    probe: Probe,
    manifest: &Manifest,
    cache: &ChunkCache,
    how: &ChooseOptions,
) -> Choice {
    let link = probe.link;
    let mut probed = HashSet::new();
    for (c, data) in &probe.chunks {
        if how.keep_probed {
            let _ = cache.put(&c.sha256, data);
            probed.insert(c.sha256.clone());
        }
    }
    let cached = |h: &_| probed.contains(h) || cache.contains(h);
    let mut shape = Shape::of(manifest, cached);
    shape.ahead = crate::readahead::beyond_hot_set(manifest, how.readahead, cached);
    shape.manifest = how.manifest_cost;
    if shape.has_hot_set {
        shape.held_out = Strategy::ALL.iter().filter_map(|&s| how.history.held_out(s)).collect();
    }
    let params =
        Params { connections: how.connections, readahead: how.readahead, local: how.auto.local };
    let predictions = model::predict(&shape, &link, &params);
    Choice {
        chosen: model::choose(&predictions),
        link,
        predictions,
        held_out: shape.held_out,
        ahead: shape.ahead,
    }
}

/// What `coldstart predict` is given: what a mount would use, and the local start-up time.
#[derive(Debug, Clone)]
pub struct PredictOptions {
    /// The link, given instead of measured.
    pub link_hint: Option<LinkEstimate>,
    /// The chunk cache whose chunks need no fetch; `None`: [`default_cache_dir`], as a mount.
    pub cache_dir: Option<PathBuf>,
    /// How to fetch (requests in flight, timeouts, retries; a mount's too).
    pub network: NetworkRequest,
    /// The read-ahead a mount would use, in bytes.
    pub readahead: u32,
    /// The program's start-up time with every byte local, in milliseconds (not negative), if
    /// known.
    pub local_ms: Option<f64>,
}

/// Each strategy's predicted start-up time for the bundle at `url` and the strategy `auto`
/// would choose, for a mount that has yet to read the manifest. The local chunk cache is read,
/// never written: the hot chunks the link probe brings are not kept.
pub fn predict(url: &str, opts: &PredictOptions) -> Result<Choice, MountError> {
    let cache_dir = match &opts.cache_dir {
        Some(d) => d.clone(),
        None => default_cache_dir()?,
    };
    let local = match opts.local_ms {
        Some(ms) if (0.0..=86_400_000.0).contains(&ms) => Some(Duration::from_secs_f64(ms / 1e3)),
        Some(_) => return Err(MountError::LocalTime),
        None => None,
    };
    let fetch = opts.network.fetch_options()?;
    let remote = open(url, fetch.clone())
        .map_err(|source| MountError::Open { url: redact_url(url), source })?;
    let t = Instant::now();
    let trust = opts.network.trusted_keys()?;
    let fetched = get_manifest(remote.as_ref()).map_err(MountError::Manifest)?;
    let manifest_fetch = (fetched.bytes, t.elapsed());
    if !trust.is_empty() {
        let signature = coldstart_bundle::sign::fetch_signature(remote.as_ref())
            .map_err(MountError::Signature)?;
        let url = remote.describe(coldstart_bundle::sign::SIGNATURE);
        coldstart_bundle::sign::check(signature.as_deref(), &url, &fetched.sha256, &trust)?;
    }
    // A bundle with the compressed manifest was packed with the start object too.
    let cost = ManifestCost {
        bytes: fetched.bytes,
        start_object: fetched.source == MANIFEST_ZST,
        hot_received: 0,
    };
    let cache = ChunkCache::open(&cache_dir)?;
    let history = History::read(&crate::history::path(&cache_dir, &fetched.sha256));
    let how = ChooseOptions {
        auto: AutoOptions { link: opts.link_hint, local },
        manifest_cost: Some(cost),
        manifest_fetch: Some(manifest_fetch),
        connections: fetch.connections,
        readahead: opts.readahead,
        keep_probed: false,
        history,
    };
    choose(remote.as_ref(), &fetched.manifest, &cache, &how)
}
