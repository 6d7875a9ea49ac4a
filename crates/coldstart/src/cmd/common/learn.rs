//! `--learn DEST` of `mount` and `run`: at unmount, the record of what the start read outside
//! the hot set, written to a directory, an `s3://` prefix or an `http(s)://` URL
//! (docs/learn.md). Writing it never fails the command: a failure is a warning that names
//! DEST and what to do.

use coldstart_bundle::learn::store::{self, Place};
use coldstart_bundle::Cancel;
use coldstart_lazyfs::{Learner, Mount};

use super::network::MountFlags;

/// Whether this start writes a record: `--learn` given and the start drawn at
/// `--learn-rate` (the mount's [`coldstart_lazyfs::MountOptions::learn`]).
pub fn drawn(flags: &MountFlags) -> bool {
    flags.learn.is_some() && coldstart_bundle::learn::sampled(flags.learn_rate)
}

/// What the record of a mount drawn for one is made from.
pub fn learner(mount: &Mount) -> Option<Learner> {
    mount.learning().then(|| mount.learner())
}

/// Writes the record of `learner` (a start that `completed` or not) to `--learn`'s DEST; a
/// failure is a warning on stderr.
pub fn write(flags: &MountFlags, learner: Option<Learner>, completed: bool) {
    let (Some(dest), Some(learner)) = (&flags.learn, learner) else { return };
    let record = learner.record(completed);
    // A fetcher of its own: the mount's was stopped at unmount.
    let written =
        flags.network.request(Cancel::new()).fetch_options().map_err(anyhow::Error::new).and_then(
            |opts| {
                let s3 = coldstart_bundle::s3::S3Settings {
                    endpoint: flags.network.endpoint.clone(),
                    region: flags.network.region.clone(),
                };
                store::write(dest, &record, &opts, &s3, &coldstart_bundle::s3::ProcessEnv)
                    .map_err(anyhow::Error::new)
            },
        );
    match written {
        Ok(to) => eprintln!(
            "coldstart: learn record of {} outside the hot set written to {to}",
            coldstart_units::count(record.pieces.len() as u64, "piece")
        ),
        Err(e) => eprintln!(
            "coldstart: warning: the learn record was not written to --learn {dest}: {e:#}; the run is not affected. {}",
            match dest {
                Place::Dir(_) => "Check that it is a directory this user may write (or may create).",
                Place::S3(_) => "Check the bucket, --endpoint and --region, and that the credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID...) may s3:PutObject there.",
                Place::Http(_) => "Check that the URL takes PUT (e.g. a WebDAV directory) and is reachable.",
            }
        ),
    }
}
