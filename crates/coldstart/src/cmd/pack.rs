//! `coldstart pack`: a directory into a bundle.

use coldstart_units as units;
use std::path::PathBuf;
use std::process::ExitCode;

use coldstart_bundle::{
    hot_list_from_profiles, pack, read_profiles, Cancel, Compression, HotList, PackError,
    PackOptions, ProfileMapping, RealFiles, DEFAULT_ZSTD_LEVEL,
};

use anyhow::Context;
use coldstart_bundle::sign::SigningKey;

use super::common::signals::{self, Signals};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sudo coldstart profile --pages -o p.json -- /opt/app/bin/app --version\n  \
    coldstart pack /opt/app --profile p.json -o /srv/bundles/app\n  \
    coldstart pack /opt/app --hot-list hot.json --compress zstd -o /srv/bundles/app\n  \
    coldstart pack /opt/app --hot-list hot.json --learn-from /var/tmp/learn/ -o /srv/bundles/app   (and what the users' starts read)"
)]
pub struct Args {
    /// The directory to pack (a program's root: its executables, libraries and data).
    pub dir: PathBuf,
    /// Hot list (docs/formats/bundle.md): the byte ranges start-up reads, in first-touch
    /// order, e.g. from `coldstart run --record`. Repeat it for other workloads: the pages a
    /// later list adds come after those of the lists before it, so the first workload's
    /// start is streamed first and then what any other recorded workload touched. Without it
    /// (and without --profile) the hot set is empty.
    #[arg(long, value_name = "FILE", conflicts_with = "profile")]
    pub hot_list: Vec<PathBuf>,
    /// Page profile from `coldstart profile --pages` (docs/formats/profile.md): the pages of
    /// files under DIR become the hot set, in first-touch order. Repeat to merge workloads.
    #[arg(long, value_name = "P.json")]
    pub profile: Vec<PathBuf>,
    /// The directory the profiled program ran from, when not DIR: the profile's paths start
    /// with PATH instead of DIR.
    #[arg(long, value_name = "PATH", requires = "profile")]
    pub profile_root: Option<PathBuf>,
    /// Learn records from `run --learn` or `mount --learn` (docs/learn.md): a directory of
    /// them, an s3://BUCKET/PREFIX/ (the credentials `publish` uses) or an http(s):// URL of
    /// a record or of a listing of records. Repeat it to merge several. The pieces that at
    /// least --learn-share of the completed starts read outside their hot set, and that pay
    /// on --learn-link (Eq. 3), join the hot set after the pieces of --profile or
    /// --hot-list (cut apart from them, which stay as they were), by the median time the
    /// starts first read them. A record names pieces by
    /// file content: it adds only bytes of DIR's files to the hot set, never any other.
    #[arg(long, value_name = "SRC", value_parser = super::common::network::parse_learn_dest)]
    pub learn_from: Vec<coldstart_bundle::learn::store::Place>,
    /// The least share of the starts (0 to 1) that read a piece for it to join the hot set.
    #[arg(long, value_name = "P", default_value = "0.5", requires = "learn_from", value_parser = super::common::network::parse_share)]
    pub learn_share: f64,
    /// The link the learned hot set is chosen for: a piece read by a share p of the starts
    /// joins it only where p (latency + its time on the link) exceeds its time on the link.
    #[arg(long, value_name = "BW/LAT", default_value = "20mbit/40ms", requires = "learn_from")]
    pub learn_link: coldstart_serve::Link,
    /// For an s3:// --learn-from: the store's URL [default: as `publish`].
    #[arg(long, value_name = "URL", requires = "learn_from")]
    pub endpoint: Option<String>,
    /// For an s3:// --learn-from: the bucket's region [default: as `publish`].
    #[arg(long, requires = "learn_from")]
    pub region: Option<String>,
    /// For an https:// --learn-from (or an s3:// one's https endpoint): CA certificates (PEM)
    /// to trust besides the system's, e.g. a private CA, or the server's own self-signed
    /// certificate, as curl --cacert.
    #[arg(long, value_name = "FILE", requires = "learn_from")]
    pub ca_file: Option<PathBuf>,
    /// Bytes per chunk: a number with an optional k or m suffix (KiB, MiB).
    #[arg(long, default_value = "64k", value_parser = coldstart_units::size_in(1, coldstart_bundle::manifest::MAX_CHUNK_SIZE))]
    pub chunk_size: u64,
    /// Compress each chunk: `zstd` (one zstd frame per chunk; mount and run decode it) or
    /// `none`.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    pub compress: Compression,
    /// The zstd level with --compress zstd: 1 (fast) to 22 (smallest); the default was
    /// chosen by measurement (BENCHMARKS.md, "Pack: zstd levels").
    #[arg(long, default_value_t = DEFAULT_ZSTD_LEVEL, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub compress_level: i32,
    /// Sign the bundle with this ed25519 private key (PEM, from `coldstart key new`): readers
    /// that give `--trust KEY.pub` accept only a bundle it signed (docs/network.md, "Signed
    /// bundles").
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    /// Threads that hash and compress at once [default: one per available core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub workers: Option<u32>,
    /// The bundle directory to write (must not exist yet).
    #[arg(short, long, value_name = "BUNDLE")]
    pub output: PathBuf,
}

/// Parses `none` or `zstd`.
fn parse_compression(s: &str) -> Result<Compression, String> {
    match s {
        "none" => Ok(Compression::None),
        "zstd" => Ok(Compression::Zstd),
        _ => Err(format!("`{s}`: use zstd or none")),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        return Err(crate::exit::usage(format!(
            "{} is not a directory: give the directory holding the program's files",
            args.dir.display()
        )));
    }
    let hot = if !args.hot_list.is_empty() {
        let mut hot = HotList::default();
        for p in &args.hot_list {
            let list =
                HotList::read(p).map_err(|e| crate::exit::usage(format!("--hot-list: {e}")))?;
            hot.touches.extend(list.touches);
        }
        hot
    } else if !args.profile.is_empty() {
        hot_list_from(&args)?
    } else {
        HotList::default()
    };
    let learned = match args.learn_from.is_empty() {
        true => HotList::default(),
        false => HotList { touches: learned(&args)?, ..HotList::default() },
    };
    let sign = match &args.sign {
        Some(p) => Some(SigningKey::read(p).context("--sign")?),
        None => None,
    };
    let cancel = Cancel::new();
    // A bar on a terminal; where stderr is a file or a pipe, a line at each tenth of the
    // bytes once the pack has taken a second (a small one says nothing).
    let bar = super::common::byte_bar("packing", 0);
    let progress = match bar.clone() {
        Some(b) => Some(coldstart_bundle::Progress(std::sync::Arc::new(move |done, total| {
            super::common::show_bytes(&b, done, total)
        }))),
        None => {
            let steps = super::common::Steps::new("pack");
            let (start, said) = (std::time::Instant::now(), std::sync::atomic::AtomicU64::new(0));
            Some(coldstart_bundle::Progress(std::sync::Arc::new(move |done, total| {
                let tenth = (done * 10).checked_div(total).unwrap_or(0);
                let ordering = std::sync::atomic::Ordering::Relaxed;
                if start.elapsed().as_secs() >= 1 && said.fetch_max(tenth, ordering) < tenth {
                    steps.say(format_args!(
                        "{}% ({} of {})",
                        tenth * 10,
                        units::bytes(done),
                        units::bytes(total)
                    ));
                }
            })))
        }
    };
    let options = PackOptions {
        chunk_size: args.chunk_size,
        compression: args.compress,
        level: args.compress_level,
        cancel: cancel.clone(),
        sign,
        workers: args.workers.map_or(0, |n| n as usize),
        progress,
        learned,
    };
    let started = std::time::Instant::now();
    // A signal stops the pack between two chunks; its temporary directory is removed.
    let signals = Signals::start(cancel)?;
    let packed = pack(&args.dir, &hot, &options, &args.output);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let manifest = match packed {
        Ok(m) => m,
        Err(PackError::Cancelled) if signals.first().is_some() => {
            let s = signals.first().expect("checked");
            eprintln!("coldstart: {}: pack stopped, nothing written", signals::name(s));
            return Ok(signals::exit_code(s));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "cannot pack {} into {}",
                args.dir.display(),
                args.output.display()
            )))
        }
    };
    let (bytes, distinct) = manifest.total_bytes();
    let stored = match manifest.compression {
        Compression::None => String::new(),
        Compression::Zstd => {
            format!(", {} stored with zstd", units::bytes(manifest.stored_bytes()))
        }
    };
    let chunks: usize = manifest.files.iter().map(|e| e.chunks.len()).sum();
    println!(
        "packed {} ({}, {} distinct{stored}) into {}: {} of up to {}, hot set {} in {}",
        units::count(manifest.files.len() as u64, "entry"),
        units::bytes(bytes),
        units::bytes(distinct),
        args.output.display(),
        units::count(chunks as u64, "chunk"),
        units::bytes(manifest.chunk_size),
        units::bytes(manifest.hot.size),
        units::count(manifest.hot.chunks.len() as u64, "chunk")
    );
    let size = |name: &str| std::fs::metadata(args.output.join(name)).map_or(0, |m| m.len());
    use coldstart_bundle::start::{MANIFEST_JSON, MANIFEST_ZST, START_OBJECT};
    println!(
        "manifest {}, {} with zstd; start object (manifest and hot pieces, one request) {}",
        units::bytes(size(MANIFEST_JSON)),
        units::bytes(size(MANIFEST_ZST)),
        units::bytes(size(START_OBJECT))
    );
    let origin = coldstart_bundle::origin_size(&args.output)
        .with_context(|| format!("cannot measure {}", args.output.display()))?;
    // The program: the bytes of its regular files, as the tree holds them.
    let ratio = origin.bytes as f64 / bytes.max(1) as f64;
    println!(
        "origin: {} in {} for a program of {}: {ratio:.2}x (start object with the hot pieces {}, cold objects {}, manifests and signature {}); packed in {:.1} s",
        units::bytes(origin.bytes),
        units::count(origin.objects as u64, "object"),
        units::bytes(bytes),
        units::bytes(origin.start),
        units::bytes(origin.cold),
        units::bytes(origin.other),
        started.elapsed().as_secs_f64()
    );
    if let Some(key) = &options.sign {
        println!(
            "signed with {} (public key {})",
            args.sign.as_ref().expect("given").display(),
            key.id()
        );
    }
    Ok(crate::exit::SUCCESS)
}

/// The hot list of `--profile`, with the warnings and the summary on stderr.
fn hot_list_from(args: &Args) -> anyhow::Result<HotList> {
    let profiles =
        read_profiles(&args.profile).map_err(|e| crate::exit::usage(format!("--profile: {e}")))?;
    let mapping = ProfileMapping { profile_root: args.profile_root.clone() };
    let converted = hot_list_from_profiles(&args.dir, profiles, &mapping, &RealFiles)
        .map_err(|e| crate::exit::usage(format!("--profile: {e}")))?;
    for m in &converted.mismatches {
        eprintln!("warning: {m}");
    }
    for path in &converted.missing {
        eprintln!("warning: {path}: in the profile but not in {}; left out", args.dir.display());
    }
    if converted.sampled {
        eprintln!("warning: the profile's pages are a sample (recorded without root): the hot set may miss pages start-up reads");
    }
    let root = args.profile_root.as_deref().unwrap_or(&args.dir);
    eprintln!(
        "profile: {} under {} in the hot set ({}); {} outside it ignored (system libraries and the like){}",
        units::count(converted.files as u64, "file"),
        root.display(),
        units::count(converted.hot.touches.len() as u64, "range"),
        units::count(converted.outside as u64, "file"),
        if converted.mismatches.is_empty() {
            String::new()
        } else {
            format!(
                "; {} left out as a different build",
                units::count(converted.mismatches.len() as u64, "file")
            )
        }
    );
    if converted.files == 0 {
        eprintln!(
            "warning: no profiled file lies under {}: the hot set is empty; was the program profiled elsewhere? give that directory with --profile-root",
            root.display()
        );
    }
    Ok(converted.hot)
}

/// The ranges `--learn-from`'s records add to the hot list, with what was refused and left
/// out on stderr.
fn learned(args: &Args) -> anyhow::Result<Vec<coldstart_bundle::Touch>> {
    use coldstart_bundle::learn::{self, store, MergeOptions};
    let started = std::time::Instant::now();
    let opts = coldstart_bundle::FetchOptions {
        ca_file: args.ca_file.clone(),
        ..coldstart_bundle::FetchOptions::default()
    };
    let s3 = coldstart_bundle::s3::S3Settings {
        endpoint: args.endpoint.clone(),
        region: args.region.clone(),
    };
    let merge_opts = MergeOptions {
        share: args.learn_share,
        bits_per_second: args.learn_link.bits_per_second,
        latency: args.learn_link.latency.as_secs_f64(),
    };
    // Merged as they are read: (the merge, records taken, records refused).
    let state = std::sync::Mutex::new((learn::Merger::new(merge_opts), 0usize, 0usize));
    for place in &args.learn_from {
        let each = |(from, r): store::Read| {
            let mut s = state.lock().unwrap();
            match r {
                Ok(r) => {
                    s.0.add(&r);
                    s.1 += 1;
                }
                Err(e) => {
                    s.2 += 1;
                    if s.2 <= 10 {
                        eprintln!("warning: --learn-from: {from}: refused: {e}");
                    }
                }
            }
        };
        store::for_each(place, &opts, &s3, &coldstart_bundle::s3::ProcessEnv, &each)
            .with_context(|| format!("--learn-from {place}: cannot read its records"))?;
    }
    let (merger, taken, refused) = state.into_inner().unwrap();
    if refused > 10 {
        eprintln!("warning: --learn-from: {} refused records not shown", refused - 10);
    }
    let merged = merger.finish();
    let resolved = learn::resolve(&args.dir, &merged, args.chunk_size)
        .with_context(|| format!("--learn-from: cannot read {}", args.dir.display()))?;
    let bytes: u64 = resolved.touches.iter().map(|t| t.length).sum();
    eprintln!(
        "learn: {} of {} ({} refused, {} not completed): {} read outside the hot set, {} by at least {:.0}% of the starts, {} of them paying on {}; {} added ({}){} in {:.1} s",
        units::count(taken as u64, "record"),
        units::count((merged.starts + merged.incomplete) as u64, "start"),
        refused,
        merged.incomplete,
        units::count(merged.distinct as u64, "piece"),
        merged.distinct - merged.below_share,
        args.learn_share * 100.0,
        merged.pieces.len(),
        format_args!(
            "{} Mbit/s, {} ms",
            args.learn_link.bits_per_second / 1e6,
            args.learn_link.latency.as_millis()
        ),
        units::count(resolved.touches.len() as u64, "range"),
        units::bytes(bytes),
        if resolved.unknown > 0 {
            format!(
                "; {} of files not in {} (another build) left out",
                units::count(resolved.unknown as u64, "piece"),
                args.dir.display()
            )
        } else {
            String::new()
        },
        started.elapsed().as_secs_f64()
    );
    Ok(resolved.touches)
}
