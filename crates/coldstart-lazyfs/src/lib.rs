//! A read-only FUSE file system over a coldstart bundle, fetching chunks as the program needs
//! them, so an unmodified program starts before all of its bytes have arrived.
//!
//! The layers, outermost first:
//!
//! - [`MountRequest`] is what a user gives (a strategy or `auto`, the cache directory, the
//!   timeout and retries, the read-ahead); [`MountRequest::options`] checks it, fills in the
//!   defaults ([`default_cache_dir`], [`default_readahead`]) and derives the rest (how long a
//!   read may wait) into [`MountOptions`].
//! - [`mount()`] checks the mount point, fetches and validates the manifest (for a hot-set
//!   strategy from the start object, which brings the hot set in the same request), runs the
//!   strategy's start-up work and mounts; [`Mount`] unmounts on drop and reports [`Report`].
//!   Under `auto` it chooses the strategy first (module `auto`, with [`model`]); [`predict()`]
//!   makes the same prediction without mounting. Both fail with a [`MountError`].
//! - `fs` answers the kernel (lookups, attributes, directory listings, symbolic links, reads)
//!   from the inode table in `tree`, handing every read to a worker thread so that one slow
//!   miss does not stall other requests; a file whose chunks are all cached it hands to the
//!   kernel as a verified local copy (FUSE passthrough), whose reads then bypass the mount.
//! - [`Engine`] turns "chunk N of file F" into verified bytes: from the local
//!   [`ChunkCache`](coldstart_bundle::ChunkCache), from the hot set being streamed in, or by a
//!   demand fetch (deduplicated, so two readers of one chunk cause one request). It owns the
//!   strategies' background work and the statistics. It needs no FUSE, and its unit tests use
//!   a bundle on local disk as the remote. Its parts: `engine::read` (the read path FUSE
//!   calls), `engine::prefetch` (what each strategy does before the program starts),
//!   `engine::stream` (the hot stream and `stream`'s background work) and
//!   `engine::start_object` ([`StartFetch`]: the manifest and the hot set in one request).
//! - [`Strategy`] names when to fetch what; the engine carries it out and [`model`] predicts
//!   it, and neither depends on the other for it.
//! - `watchdog` cleans up after a mounting process that dies without unmounting, and `group`
//!   is a command running from the mount in a process group of its own ([`Group`]).
//!
//! Every wait is bounded ([`EngineOptions::read_timeout`] and the fetcher's bounds: see
//! [`coldstart_bundle::remote`]) and every fetch stops at once when cancelled
//! ([`NetworkRequest::cancel`], [`Mount::cancel`]); a chunk that cannot be had is `EIO` to the
//! program, never zeros or stale bytes.
//!
//! [`Mount::spawn`] starts a command on the mount in a process group of its own; if the
//! mounting process dies (`kill -9`), a watchdog it started at mount time kills that group,
//! aborts the FUSE connection (so that no process stays blocked on a read nobody will answer),
//! detaches the mount and removes the directories it was told of.

mod auto;
mod engine;
mod error;
mod fs;
mod group;
pub mod history;
pub mod model;
mod mount;
mod options;
mod readahead;
mod strategy;
#[cfg(test)]
mod testing;
mod tree;
mod watchdog;

pub use auto::{predict, PredictOptions};
pub use engine::{Engine, EngineError, EngineOptions, Report, StartFailure, StartFetch, StartHead};
pub use error::MountError;
pub use group::Group;
pub use mount::{is_mount_point, mount, Learner, Mount};
pub use options::{
    default_cache_dir, default_readahead, read_timeout, readahead, AutoOptions, MountOptions,
    MountRequest, NetworkRequest, DEFAULT_READAHEAD, PAGE_READAHEAD,
};
pub use strategy::{Strategy, StrategyOrAuto, StrategyParseError};

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::MountError, crate::EngineError)
}
