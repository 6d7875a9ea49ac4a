//! `coldstart key new`: the key pair that signs bundles.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart key new -o ~/.config/coldstart/release.key\n  \
    coldstart pack /opt/app --profile p.json --sign ~/.config/coldstart/release.key -o /srv/bundles/app\n  \
    coldstart run --trust ~/.config/coldstart/release.key.pub http://cdn.example/app -- '{root}/bin/app' --version")]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Make a new ed25519 key pair: KEY (private, PKCS#8 PEM, mode 0600) and KEY.pub (public,
    /// PEM). Neither may exist: a key is never replaced.
    New {
        /// Where to write the private key; the public key goes to the same path with `.pub`.
        #[arg(short, long, value_name = "KEY")]
        output: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::New { output } => {
            let public = coldstart_bundle::sign::new_key_pair(&output)?;
            println!(
                "wrote the private key {} (keep it secret: it signs bundles) and the public key {} (give it to readers: --trust)",
                output.display(),
                public.display()
            );
            Ok(crate::exit::SUCCESS)
        }
    }
}
