//! `coldstart predict`: each strategy's predicted start-up time for a bundle, from the model
//! `--strategy auto` chooses with, on the measured (or given) link and the local chunk cache.

use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_bundle::Cancel;
use coldstart_lazyfs::PredictOptions;

use super::common::network::{link_hint, parse_readahead, NetworkFlags};
use super::common::signals::{self, Signals};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart predict http://bundles.example/app/\n  \
    coldstart predict /srv/bundles/app --link-hint 20mbit/40ms --local-ms 120\n  \
    coldstart predict s3://my-bundles/app --region eu-west-3   (a private bucket, AWS credentials)")]
pub struct Args {
    /// The bundle: `http[s]://HOST[:PORT]/PATH/[?QUERY]`, `s3://BUCKET/PREFIX` or a directory.
    pub url: String,
    /// The link, e.g. 20mbit/40ms, instead of measuring it.
    #[arg(long, value_name = "BW/LAT")]
    pub link_hint: Option<coldstart_serve::Link>,
    /// The chunk cache whose chunks need no fetch [default: as `mount`].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// How to fetch, as `mount` would.
    #[command(flatten)]
    pub network: NetworkFlags,
    /// The read-ahead `mount` would use (its default while chunks are still to be fetched:
    /// one page).
    #[arg(long, default_value = "4k", value_parser = parse_readahead)]
    pub readahead: u32,
    /// The program's start-up time with every byte local, in milliseconds, if known.
    #[arg(long, value_name = "MS", value_parser = coldstart_units::number_in(0.0, 86_400_000.0))]
    pub local_ms: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cancel = Cancel::new();
    let opts = PredictOptions {
        link_hint: link_hint(args.link_hint),
        cache_dir: args.cache_dir,
        network: args.network.request(cancel.clone()),
        readahead: args.readahead,
        local_ms: args.local_ms,
    };
    // A signal stops every fetch at once.
    let signals = Signals::start(cancel)?;
    let choice = match coldstart_lazyfs::predict(&args.url, &opts) {
        Ok(c) => c,
        Err(e) => match signals.first() {
            Some(s) if e.is_cancelled() => {
                eprintln!("coldstart: {}: stopped", signals::name(s));
                return Ok(signals::exit_code(s));
            }
            _ => return Err(e.into()),
        },
    };
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
    if opts.local_ms.is_none() {
        println!("local start-up: unknown (not counted; give --local-ms)");
    }
    println!("{}", choice.held_out_summary());
    println!(
        "read-ahead {}: {}",
        coldstart_units::bytes(u64::from(args.readahead)),
        choice.ahead.summary()
    );
    println!("{:<16} {:>12}", "strategy", "predicted ms");
    for p in &choice.predictions {
        let mark = if p.strategy == choice.chosen { "  <- auto" } else { "" };
        println!("{:<16} {:>12.1}{mark}", p.strategy.to_string(), p.ms);
    }
    Ok(crate::exit::SUCCESS)
}
