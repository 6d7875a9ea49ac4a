//! The command line. Only this module (and the `Args` structs of each `cmd` module) knows
//! about clap; each command converts its arguments into a library's options struct before
//! any work starts.

use clap::{Parser, Subcommand};

use crate::cmd;

#[derive(Debug, Parser)]
#[command(name = "coldstart", version, about = "Measure, profile and fix program start-up", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a command many times in a known, verified cache state and report start-up latency and I/O.
    Measure(cmd::measure::Args),
    /// Record the first-touch order of functions and file pages during start-up.
    Profile(cmd::profile::Args),
    /// Generate and build the sample program (a test bed whose start-up behaves like a large program).
    Sample(cmd::sample::Args),
    /// Chunk a program's files into a static, content-addressed bundle with its hot set first.
    Pack(cmd::pack::Args),
    /// Make the ed25519 key pair that signs bundles (`pack --sign`, `mount --trust`).
    Key(cmd::key::Args),
    /// Serve a bundle over HTTP with Range, optionally through an emulated network link.
    Serve(cmd::serve::Args),
    /// Upload a bundle to an S3 bucket: only the objects it lacks, the manifest and start object last.
    Publish(cmd::publish::Args),
    /// Present a bundle as a read-only file system that fetches on demand, until Ctrl-C.
    Mount(cmd::mount::Args),
    /// Mount a bundle in a temporary directory, run a command from it, unmount and report.
    Run(cmd::run::Args),
    /// Predict each network strategy's start-up time for a bundle on the measured or given link.
    Predict(cmd::predict::Args),
    /// How much of each code page start-up uses; the pages and faults an ideal layout needs.
    Analyze(cmd::analyze::Args),
    /// Turn profiles into a function order for lld, gold, GNU ld, ld64 or BOLT.
    Order(cmd::order::Args),
    /// Run a build with function sections and lld with the order file, then verify.
    Link(cmd::link::Args),
    /// Rewrite a binary linked with --emit-relocs in the order through llvm-bolt, then verify.
    Bolt(cmd::bolt::Args),
    /// Check where the ordered functions ended up; exit 1 if the order did not take effect.
    Verify(cmd::verify::Args),
    /// Where one start-up's time goes: phases, I/O wait and the files that cost most, from the kernel's tracepoints.
    Timeline(cmd::timeline::Args),
    /// The paper's grid run for real: links x strategies x cache states, each cell measured beside the model's prediction.
    Experiment(cmd::experiment::Args),
    /// One self-contained HTML report (SVG charts, CSV beside it) of measure, profile, order, timeline and experiment results.
    Report(cmd::report::Args),
    /// Record the file ranges a start-up reads into a prefetch database; show or merge databases.
    Prefetch(cmd::prefetch::Args),
    /// Start a command while the ranges of its prefetch database are read in one sweep.
    Launch(cmd::launch::Args),
    /// Compare a start-up with a stored baseline and fail CI on a real regression.
    Gate(cmd::gate::Args),
    /// Run the pipeline on the bundled sample program and print what it found.
    Demo(cmd::demo::Args),
}
