//! `coldstart serve`: a bundle over HTTP, optionally through an emulated link; or, with
//! `--proxy`, the link emulator in front of another server. It runs until `SIGINT`, `SIGTERM`
//! or `SIGHUP`, and then exits with 128 + the signal.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use coldstart_serve::Link;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart serve /srv/bundles/app\n  \
    coldstart serve /srv/bundles/app --link 20mbit/40ms   (emulate a link)\n  \
    coldstart serve --proxy origin.example:8080 --link 3mbit/200ms")]
pub struct Args {
    /// The bundle directory written by `coldstart pack`.
    #[arg(required_unless_present = "proxy")]
    pub bundle: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: String,
    /// Emulate a link: BANDWIDTH/LATENCY, e.g. 56kbit/100ms, 1mbit/10ms, 20mbit/40ms.
    #[arg(long)]
    pub link: Option<Link>,
    /// Instead of serving a bundle, forward to this server (HOST:PORT) through the link.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "bundle")]
    pub proxy: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Ctrl-C or SIGTERM stops the server: it closes its connections, and coldstart exits with
    // 128 + the signal.
    let _caught =
        coldstart_process::cancel::catch().context("cannot install the signal handler")?;
    let mut running = match (&args.bundle, &args.proxy) {
        (_, Some(upstream)) => coldstart_serve::proxy(&args.addr, upstream, args.link)
            .with_context(|| format!("cannot start the proxy to {upstream}"))?,
        (Some(bundle), None) => {
            coldstart_bundle::start::check_bundle(bundle)?;
            coldstart_serve::serve(bundle, &args.addr, args.link)
                .with_context(|| format!("cannot serve {}", bundle.display()))?
        }
        (None, None) => unreachable!("clap requires a bundle or --proxy"),
    };
    // The URL on stdout, alone on its line, so scripts can read it.
    let mut out = std::io::stdout();
    writeln!(out, "{}", running.url())?;
    out.flush()?;
    if let Some(link) = args.link {
        eprintln!(
            "coldstart: emulating a {} link with {:.1} ms per request; Ctrl-C to stop",
            coldstart_units::bit_rate(link.bits_per_second.round() as u64),
            link.latency.as_secs_f64() * 1e3
        );
    }
    let signal = loop {
        if let Some(s) = coldstart_process::cancel::wait(std::time::Duration::from_secs(3600)) {
            break s;
        }
    };
    running.stop();
    Ok(ExitCode::from(coldstart_process::cancel::exit_code(signal)))
}
