//! `coldstart publish BUNDLE s3://BUCKET/PREFIX`: upload a bundle to an S3 bucket, only what
//! the bucket lacks, the objects readers start from last (`coldstart_bundle::publish`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use coldstart_bundle::publish::{publish, PublishOptions};
use coldstart_bundle::s3::{ProcessEnv, S3Settings};
use coldstart_bundle::Cancel;
use coldstart_lazyfs::NetworkRequest;

use super::common::signals::{self, Signals};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Credentials, region and endpoint come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, \
    AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL[_S3], AWS_PROFILE and ~/.aws/{credentials,config}, \
    as the AWS tools read them (docs/network.md).\n\n\
    Examples:\n  coldstart publish app.bundle s3://my-bundles/app/1.4\n  \
    coldstart publish app.bundle s3://bundles/app --endpoint http://127.0.0.1:5000   (an S3-compatible store)\n  \
    AWS_PROFILE=ci coldstart publish app.bundle s3://my-bundles/app --region eu-west-3\n  \
    coldstart run s3://my-bundles/app/1.4 -- '{root}/bin/app'   (run it from the bucket)"
)]
pub struct Args {
    /// The bundle directory `coldstart pack` wrote.
    pub bundle: PathBuf,
    /// Where to: `s3://BUCKET[/PREFIX]`.
    pub url: String,
    /// The store's URL, e.g. http://127.0.0.1:5000 [default: AWS_ENDPOINT_URL_S3,
    /// AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's for the region].
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The bucket's region [default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
    /// else us-east-1].
    #[arg(long)]
    pub region: Option<String>,
    /// Uploads in flight at most.
    #[arg(long, default_value_t = 16, value_parser = coldstart_units::count_in::<usize>(1, super::common::network::MAX_CONNECTIONS))]
    pub connections: usize,
    /// Retries of a failed request (at most 10).
    #[arg(long, default_value_t = 3, value_parser = coldstart_units::count_in::<u32>(0, coldstart_bundle::remote::MAX_RETRIES as u64))]
    pub retries: u32,
    /// Bound in seconds on connecting, on waiting for an answer, and on each wait for more
    /// bytes.
    #[arg(long, default_value = "10", value_parser = coldstart_units::duration_in(coldstart_units::MILLISECOND, coldstart_units::DAY))]
    pub timeout: std::time::Duration,
    /// The slowest answer accepted, in bytes per second (k or m suffix).
    #[arg(long, default_value = "1k", value_parser = coldstart_units::size_in(1, 1 << 30))]
    pub min_rate: u64,
    /// CA certificates (PEM) to trust for an https:// endpoint besides the system's, or the
    /// endpoint's own self-signed certificate, as curl --cacert.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Print the report as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cancel = Cancel::new();
    let mut fetch = NetworkRequest {
        retries: args.retries,
        timeout: args.timeout.as_secs_f64(),
        min_rate: args.min_rate,
        connections: args.connections,
        cancel: cancel.clone(),
        trust: Vec::new(),
    }
    .fetch_options()?;
    fetch.ca_file = args.ca_file.clone();
    let signals = Signals::start(cancel)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "publish [{bar:30}] {bytes}/{total_bytes} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    });
    let progress = bar.clone().map(|b| {
        Arc::new(move |p: &coldstart_bundle::publish::Progress| {
            b.set_length(p.bytes);
            b.set_position(p.bytes_done);
            b.set_message(format!("{}/{} objects", p.objects_done, p.objects));
        }) as Arc<coldstart_bundle::publish::ProgressFn>
    });
    let opts = PublishOptions {
        fetch,
        s3: S3Settings { endpoint: args.endpoint.clone(), region: args.region.clone() },
        progress,
    };
    let result = publish(&args.bundle, &args.url, &opts, &ProcessEnv);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            if let Some(s) = signals.first() {
                eprintln!("coldstart: {}: {e}", signals::name(s));
                return Ok(signals::exit_code(s));
            }
            return Err(e).with_context(|| {
                format!(
                    "cannot publish {} to {}",
                    args.bundle.display(),
                    coldstart_bundle::remote::redact_url(&args.url)
                )
            });
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        eprintln!(
            "coldstart: published {} to {} as {}: uploaded {} of {} objects ({} bytes), {} already there; {} requests ({} failed attempts)",
            args.bundle.display(),
            report.url,
            report.credentials,
            report.uploaded,
            report.objects,
            report.uploaded_bytes,
            report.present,
            report.requests,
            report.failed_attempts
        );
        if report.listing_refused {
            eprintln!(
                "coldstart: the bucket refused to list its keys to {} (no s3:ListBucket): each \
                 object was asked for with HEAD, one request each; allow s3:ListBucket on the \
                 prefix for a publish in one listing",
                report.credentials
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
