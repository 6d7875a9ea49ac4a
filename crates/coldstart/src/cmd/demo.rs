//! `coldstart demo`: the embedded default job.
//!
//! Builds the bundled sample program (a generated C program with two shared libraries of its
//! own, a dlopen'ed plugin and data files, whose start-up behaves like a large program's) and
//! runs the pipeline on it, one step after another, each step the same code path as its own
//! subcommand:
//!
//! 1. `coldstart sample`: generate and build (reused when an identical build is there).
//! 2. `coldstart measure --cache cold,selective,warm,hot`: start-up in every verified cache
//!    state, and the I/O share (cold minus hot).
//! 3. `coldstart profile`: the first-touch order of functions for workload `a` (training)
//!    and `b` (held out).
//! 4. `coldstart analyze`: how much of each code page start-up uses (the paper's Tables 2, 3).
//! 5. `coldstart order --evaluate`: an order from `a`, judged on `b` before any linking.
//! 6. `coldstart link`: a copy of the program relinked with lld in that order, verified.
//! 7. `coldstart measure --compare --cache cold --storage hdd`: held-out workload `b`,
//!    default layout against the ordered one, interleaved, from an emulated hard disk with
//!    the common 128 KiB read-ahead (a fast disk with a large read-ahead hides the layout).
//!
//! 8. `coldstart timeline`: where a cold start of workload b spends its time (root).
//! 9. `coldstart experiment`: the program's files (no sources) fetched over two emulated
//!    links with every network strategy, beside the model's prediction.
//! 10. `coldstart report`: all of the above as one HTML page, `report.html`.
//!
//! Steps 3 to 10 run the `coldstart` binary itself with the arguments printed before each
//! step, so what the demo shows is exactly what a user would get by typing them. Everything
//! lands in one directory (`--dir`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use coldstart_sample::{Config, Size, Workload};

use crate::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  coldstart demo\n  \
    coldstart demo --size small --runs 5 --dir /var/tmp/coldstart-demo")]
pub struct Args {
    /// Size of the sample program: small, medium or bench (20,000+ functions, 40+ MiB of code;
    /// minutes to build).
    #[arg(long, default_value = "medium", value_parser = ["small", "medium", "bench"])]
    pub size: String,
    /// Where the sample program and the results go. Must be on a disk-backed file system:
    /// pages of tmpfs cannot be evicted, so cold start-up could not be measured there.
    #[arg(long, value_name = "DIR", default_value = "/var/tmp/coldstart-demo")]
    pub dir: PathBuf,
    /// Measured runs per cache state.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = super::common::runs(1))]
    pub runs: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let size = Size::parse(&args.size).map_err(|e| exit::usage(e.to_string()))?;
    check_dir(&args.dir)?;
    let sample_dir = args.dir.join(format!("sample-{}", args.size));

    println!("== 1. sample program ({} size) in {}", args.size, sample_dir.display());
    let config = Config::for_size(size, 1);
    let sample = coldstart_sample::build_cached(&config, &sample_dir)
        .with_context(|| format!("cannot build the sample program in {}", sample_dir.display()))?;
    let a = sample.workload("a").context("the sample program has no workload `a`")?;
    println!(
        "   {} functions, {:.1} MiB of code; workload a enters {} of them at start-up",
        sample.functions.len(),
        sample.text_bytes() as f64 / (1 << 20) as f64,
        a.startup.len(),
    );
    let root = coldstart_sys::is_root();
    let files = Files::in_dir(&args.dir);
    let exe = os(&sample.exe());

    println!("\n== 2. start-up in each cache state");
    measure_cache_states(&args, &files, root, &command(&exe, a))?;

    // The layout pipeline: profile on a, order, relink a copy, measure on held-out b.
    let b = sample.workload("b").context("the sample program has no workload `b`")?;
    let ordered_dir = args.dir.join(format!("sample-{}-ordered", args.size));
    let ordered = coldstart_sample::build_cached(&config, &ordered_dir)
        .with_context(|| format!("cannot build the copy to relink in {}", ordered_dir.display()))?;
    let ordered_exe = os(&ordered.exe());
    order_and_relink(&files, &exe, a, b, &ordered)?;
    if root {
        println!(
            "\n== 7. held-out workload b, cold, from an emulated hard disk (128 KiB read-ahead): \
             default layout (A) against ordered (B)"
        );
        let mut argv = words(&["measure", "--compare", "--storage", "hdd", "--cache", "cold"]);
        argv.extend(["--runs".into(), args.runs.to_string(), "--export-json".into()]);
        argv.push(os(&files.compare));
        argv.push("--".into());
        argv.extend(command(&exe, b));
        argv.push(":::".into());
        argv.extend(command(&ordered_exe, b));
        step(&argv)?;
    }
    let mut results = vec![os(&files.measure), os(&files.a), os(&files.b)];
    step_output(&order_argv(&files, &exe, true), &files.evaluate)?;
    results.push(os(&files.evaluate));
    if root {
        results.push(os(&files.compare));
        println!("\n== 8. where a cold start of workload b spends its time");
        let mut argv = words(&["timeline", "-o"]);
        argv.extend([os(&files.timeline), "--".into()]);
        argv.extend(command(&exe, b));
        step(&argv)?;
        results.push(os(&files.timeline));
    }
    println!(
        "\n== 9. the program's files over two emulated links, every network strategy: \
         profiled on workload a, measured on b"
    );
    network_experiment(&args, &files, &sample, a, b)?;
    results.push(os(&files.experiment));
    println!("\n== 10. the report");
    let mut argv = words(&["report"]);
    argv.extend(results);
    argv.extend(["-o".into(), os(&files.report)]);
    argv.extend(words(&["--title", "coldstart demo: the sample program"]));
    step(&argv)?;
    println!("\nResults in {}; open {} in a browser", args.dir.display(), files.report.display());
    Ok(exit::SUCCESS)
}

/// Create `--dir`, refusing one on a memory file system (its pages cannot be evicted, so a
/// cold start could not be measured there).
fn check_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create --dir {}", dir.display()))?;
    if let Ok(Some(memory)) = coldstart_process::memory_file_system(dir) {
        return Err(exit::usage(format!(
            "--dir {} is on {memory}, whose pages cannot be evicted: give a directory on a disk, \
             e.g. --dir /var/tmp/coldstart-demo",
            dir.display()
        )));
    }
    Ok(())
}

/// The files the demo's steps write, all in `--dir`.
struct Files {
    /// Step 2: start-up in each cache state.
    measure: PathBuf,
    /// Step 3: the profiles of workloads a (training) and b (held out).
    a: PathBuf,
    b: PathBuf,
    /// Step 5: the order from workload a.
    order: PathBuf,
    /// Its evaluation on workload b, as JSON.
    evaluate: PathBuf,
    /// Step 7: default layout against ordered.
    compare: PathBuf,
    /// Step 8: where a cold start spends its time.
    timeline: PathBuf,
    /// Step 9: the network experiment.
    experiment: PathBuf,
    /// Step 10: the report.
    report: PathBuf,
}

impl Files {
    fn in_dir(dir: &Path) -> Files {
        Files {
            measure: dir.join("measure.json"),
            a: dir.join("profile-a.json"),
            b: dir.join("profile-b.json"),
            order: dir.join("order.txt"),
            evaluate: dir.join("evaluate.json"),
            compare: dir.join("compare-b.json"),
            timeline: dir.join("timeline.json"),
            experiment: dir.join("experiment.json"),
            report: dir.join("report.html"),
        }
    }
}

/// Step 2: `coldstart measure` of workload `command` in every cache state this user can
/// reach (`cold` needs root).
fn measure_cache_states(
    args: &Args,
    files: &Files,
    root: bool,
    command: &[String],
) -> anyhow::Result<()> {
    let caches = if root { "cold,selective,warm,hot" } else { "selective,warm,hot" };
    if !root {
        println!("   (not root: `cold` needs root to drop the page cache; skipped)");
    }
    let mut argv = words(&["measure", "--cache", caches, "--runs"]);
    argv.extend([args.runs.to_string(), "--export-json".into(), os(&files.measure), "--".into()]);
    argv.extend(command.iter().cloned());
    step(&argv)
}

/// Steps 3 to 6: profile workloads a and b, analyze the default layout, order from a judged
/// on b, and relink the copy `ordered` in that order.
fn order_and_relink(
    files: &Files,
    exe: &str,
    a: &Workload,
    b: &Workload,
    ordered: &coldstart_sample::Sample,
) -> anyhow::Result<()> {
    println!("\n== 3. first-touch profile of workload a (training) and b (held out)");
    for (name, w, out) in [("a", a, &files.a), ("b", b, &files.b)] {
        let mut argv = words(&["profile", "--workload", name, "-o"]);
        argv.extend([os(out), "--".into()]);
        argv.extend(command(exe, w));
        step(&argv)?;
    }
    println!("\n== 4. how start-up uses the code pages (default layout)");
    step(&["analyze".into(), exe.into(), "--profile".into(), os(&files.a)])?;
    println!("\n== 5. an order from workload a, judged on workload b before linking");
    step(&order_argv(files, exe, false))?;
    println!("\n== 6. relink a copy with lld in that order, and verify it took effect");
    let mut argv = words(&["link", "--order"]);
    argv.extend([os(&files.order), "--binary".into(), os(&ordered.exe()), "--profile".into()]);
    argv.extend([os(&files.a), "--".into()]);
    argv.extend(words(&["make", "-s", "-B", "-j2", "-C"]));
    argv.push(os(&ordered.dir.join("src")));
    step(&argv)
}

/// `coldstart order` from workload a's profile, evaluated on workload b's, written to the
/// order file; with `json`, the evaluation as JSON on standard output.
fn order_argv(files: &Files, exe: &str, json: bool) -> Vec<String> {
    let mut argv = vec!["order".into(), os(&files.a), "--binary".into(), exe.into()];
    argv.extend(["--evaluate".into(), os(&files.b)]);
    if json {
        argv.push("--json".into());
    }
    argv.extend(["-o".into(), os(&files.order)]);
    argv
}

/// Step 9: `coldstart experiment` on the sample's installed files, profiled on workload `a`
/// and measured on `b`, over the demo's two links.
fn network_experiment(
    args: &Args,
    files: &Files,
    sample: &coldstart_sample::Sample,
    a: &Workload,
    b: &Workload,
) -> anyhow::Result<()> {
    let installed = args.dir.join(format!("sample-{}-files", args.size));
    sample
        .install(&installed)
        .with_context(|| format!("cannot copy the sample's files to {}", installed.display()))?;
    let _ = std::fs::remove_file(&files.experiment);
    let mut argv = vec!["experiment".into(), os(&installed), "-o".into(), os(&files.experiment)];
    argv.extend(words(&["--link", NETWORK_LINKS, "--cache", "cold", "--runs", "1"]));
    argv.extend(["--profiled".into(), format!("sample {}", a.args.join(" "))]);
    argv.extend(words(&["--", "sample"]));
    argv.extend(b.args.iter().cloned());
    step(&argv)
}

/// The command line that runs workload `w` of the program `exe`.
fn command(exe: &str, w: &Workload) -> Vec<String> {
    let mut argv = vec![exe.to_owned()];
    argv.extend(w.args.iter().cloned());
    argv
}

/// Owned arguments from string literals.
fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_owned()).collect()
}

/// A path as an argument.
fn os(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The demo's network experiment: a home link and an office link, a few seconds each.
const NETWORK_LINKS: &str = "8mbit/50ms,32mbit/10ms";

/// Run `coldstart ARGS` for its standard output, written to `out` (printed first as a step).
fn step_output(argv: &[String], out: &Path) -> anyhow::Result<()> {
    println!("   $ coldstart {} > {}", shell_words(argv), out.display());
    let me = std::env::current_exe().context("cannot find the coldstart executable")?;
    let r = std::process::Command::new(&me)
        .args(argv)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", me.display()))?;
    if !r.status.success() {
        anyhow::bail!("step `coldstart {}` failed ({})", argv.join(" "), r.status);
    }
    coldstart_fs::write_atomic(out, &r.stdout)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}

/// Run one step of the pipeline as `coldstart ARGS`, printed first so it can be rerun by hand.
fn step(argv: &[String]) -> anyhow::Result<()> {
    println!("   $ coldstart {}", shell_words(argv));
    let me = std::env::current_exe().context("cannot find the coldstart executable")?;
    let status = std::process::Command::new(&me)
        .args(argv)
        .status()
        .with_context(|| format!("cannot run {}", me.display()))?;
    if !status.success() {
        anyhow::bail!("step `coldstart {}` failed ({status})", argv.join(" "));
    }
    Ok(())
}

/// The arguments as a shell would need them typed: quoted where they hold a space or quote.
fn shell_words(argv: &[String]) -> String {
    let quote = |a: &String| {
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$\\*?;&|<>()".contains(c))
        {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a.clone()
        }
    };
    argv.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::shell_words;

    #[test]
    fn a_printed_step_can_be_pasted_into_a_shell() {
        let argv: Vec<String> = ["experiment", "--profiled", "sample --workload a", "it's", "--"]
            .map(String::from)
            .into();
        assert_eq!(
            shell_words(&argv),
            r#"experiment --profiled 'sample --workload a' 'it'\''s' --"#
        );
    }
}
