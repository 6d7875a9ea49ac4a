//! `coldstart predict`: each strategy's predicted start-up time for a bundle, from the model
//! `--strategy auto` chooses with, on the measured (or given) link and the local chunk cache.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use coldstart_bundle::remote::{get_manifest, open};
use coldstart_bundle::{ChunkCache, FetchOptions};
use coldstart_lazyfs::model::ManifestCost;
use coldstart_lazyfs::{AutoOptions, MountOptions, Strategy};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bundle: `http://HOST[:PORT]/PATH/` or a directory.
    pub url: String,
    /// The link, e.g. 20mbit/40ms, instead of measuring it.
    #[arg(long, value_name = "BW/LAT")]
    pub link_hint: Option<coldstart_serve::Link>,
    /// The chunk cache whose chunks need no fetch [default: as `mount`].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Requests in flight at most, as `mount --connections`.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// The read-ahead `mount --readahead` would use.
    #[arg(long, default_value = "128k", value_parser = super::mount::parse_readahead)]
    pub readahead: u32,
    /// The program's start-up time with every byte local, in milliseconds, if known.
    #[arg(long, value_name = "MS")]
    pub local_ms: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cache_dir = match args.cache_dir {
        Some(d) => d,
        None => super::mount::default_cache_dir()?,
    };
    let local = match args.local_ms {
        Some(ms) if ms.is_finite() && ms >= 0.0 => {
            Some(std::time::Duration::from_secs_f64(ms / 1e3))
        }
        Some(_) => return Err(crate::exit::usage("--local-ms must be a non-negative number")),
        None => None,
    };
    let fetch = FetchOptions { connections: args.connections.max(1), ..FetchOptions::default() };
    let remote = open(&args.url, fetch.clone())
        .map_err(|e| crate::exit::usage(format!("cannot open {}: {e}", args.url)))?;
    let t = Instant::now();
    let fetched = get_manifest(remote.as_ref())
        .map_err(|e| crate::exit::usage(format!("cannot read the bundle's manifest: {e}")))?;
    let manifest_fetch = (fetched.bytes, t.elapsed());
    let manifest = fetched.manifest;
    // A bundle with the compressed manifest was packed with the start object too.
    let cost = ManifestCost {
        bytes: fetched.bytes,
        start_object: fetched.source == coldstart_bundle::start::MANIFEST_ZST,
        hot_received: 0,
    };
    let cache = ChunkCache::open(&cache_dir)?;
    let mut opts = MountOptions::new(Strategy::Stream, cache_dir);
    opts.fetch = fetch;
    opts.readahead = args.readahead;
    let auto =
        AutoOptions { link: super::mount::hint(args.link_hint), local, manifest: Some(cost) };
    let choice = coldstart_lazyfs::choose(
        remote.as_ref(),
        &manifest,
        &cache,
        Some(manifest_fetch),
        &auto,
        &opts,
        false,
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&choice)?);
        return Ok(crate::exit::SUCCESS);
    }
    let l = &choice.link;
    let how = |e: bool| if e { "estimated" } else { "given" };
    println!(
        "link: {:.3} Mbit/s ({}), latency {:.1} ms ({})",
        l.bytes_per_second * 8.0 / 1e6,
        how(l.bandwidth_estimated),
        l.latency_ms,
        how(l.latency_estimated)
    );
    if local.is_none() {
        println!("local start-up: unknown (not counted; give --local-ms)");
    }
    println!("{:<16} {:>12}", "strategy", "predicted ms");
    for p in &choice.predictions {
        let mark = if p.strategy == choice.chosen { "  <- auto" } else { "" };
        println!("{:<16} {:>12.1}{mark}", p.strategy.to_string(), p.ms);
    }
    Ok(crate::exit::SUCCESS)
}
