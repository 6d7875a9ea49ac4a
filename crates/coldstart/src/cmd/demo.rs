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
use coldstart_sample::{Config, Size};

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
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create --dir {}", args.dir.display()))?;
    if let Ok(Some(memory)) = coldstart_process::memory_file_system(&args.dir) {
        return Err(exit::usage(format!(
            "--dir {} is on {memory}, whose pages cannot be evicted: give a directory on a disk, \
             e.g. --dir /var/tmp/coldstart-demo",
            args.dir.display()
        )));
    }
    let sample_dir = args.dir.join(format!("sample-{}", args.size));

    println!("== 1. sample program ({} size) in {}", args.size, sample_dir.display());
    let config = Config::for_size(size, 1);
    let sample = coldstart_sample::build_cached(&config, &sample_dir)
        .with_context(|| format!("cannot build the sample program in {}", sample_dir.display()))?;
    let workload = sample.workload("a").context("the sample program has no workload `a`")?;
    let mut command = vec![sample.exe().to_string_lossy().into_owned()];
    command.extend(workload.args.iter().cloned());
    println!(
        "   {} functions, {:.1} MiB of code; workload a enters {} of them at start-up",
        sample.functions.len(),
        sample.text_bytes() as f64 / (1 << 20) as f64,
        workload.startup.len(),
    );

    let root = coldstart_sys::is_root();
    let caches = if root { "cold,selective,warm,hot" } else { "selective,warm,hot" };
    let json = args.dir.join("measure.json");
    println!("\n== 2. start-up in each cache state");
    if !root {
        println!("   (not root: `cold` needs root to drop the page cache; skipped)");
    }
    let mut argv: Vec<String> = vec![
        "measure".into(),
        "--cache".into(),
        caches.into(),
        "--runs".into(),
        args.runs.to_string(),
        "--export-json".into(),
        json.to_string_lossy().into_owned(),
        "--".into(),
    ];
    argv.extend(command);
    step(&argv)?;

    // The layout pipeline: profile on a, order, relink a copy, measure on held-out b.
    let workload_b = sample.workload("b").context("the sample program has no workload `b`")?;
    let ordered_dir = args.dir.join(format!("sample-{}-ordered", args.size));
    let ordered = coldstart_sample::build_cached(&config, &ordered_dir)
        .with_context(|| format!("cannot build the copy to relink in {}", ordered_dir.display()))?;
    let exe = sample.exe();
    let (a_json, b_json) = (args.dir.join("profile-a.json"), args.dir.join("profile-b.json"));
    let order = args.dir.join("order.txt");
    let exe_s = exe.to_string_lossy().into_owned();
    let os = |p: &Path| p.to_string_lossy().into_owned();

    println!("\n== 3. first-touch profile of workload a (training) and b (held out)");
    for (name, w, out) in [("a", workload, &a_json), ("b", workload_b, &b_json)] {
        let mut argv = vec!["profile".into(), "--workload".into(), name.into(), "-o".into()];
        argv.push(os(out));
        argv.push("--".into());
        argv.push(exe_s.clone());
        argv.extend(w.args.iter().cloned());
        step(&argv)?;
    }
    println!("\n== 4. how start-up uses the code pages (default layout)");
    step(&["analyze".into(), exe_s.clone(), "--profile".into(), os(&a_json)])?;
    println!("\n== 5. an order from workload a, judged on workload b before linking");
    step(&[
        "order".into(),
        os(&a_json),
        "--binary".into(),
        exe_s.clone(),
        "--evaluate".into(),
        os(&b_json),
        "-o".into(),
        os(&order),
    ])?;
    println!("\n== 6. relink a copy with lld in that order, and verify it took effect");
    step(&[
        "link".into(),
        "--order".into(),
        os(&order),
        "--binary".into(),
        os(&ordered.exe()),
        "--profile".into(),
        os(&a_json),
        "--".into(),
        "make".into(),
        "-s".into(),
        "-B".into(),
        "-j2".into(),
        "-C".into(),
        os(&ordered.dir.join("src")),
    ])?;
    if root {
        println!(
            "\n== 7. held-out workload b, cold, from an emulated hard disk (128 KiB read-ahead): \
             default layout (A) against ordered (B)"
        );
        let mut argv: Vec<String> = vec![
            "measure".into(),
            "--compare".into(),
            "--storage".into(),
            "hdd".into(),
            "--cache".into(),
            "cold".into(),
            "--runs".into(),
            args.runs.to_string(),
            "--export-json".into(),
            os(&args.dir.join("compare-b.json")),
            "--".into(),
            exe_s.clone(),
        ];
        argv.extend(workload_b.args.iter().cloned());
        argv.push(":::".into());
        argv.push(os(&ordered.exe()));
        argv.extend(workload_b.args.iter().cloned());
        step(&argv)?;
    }
    let mut results = vec![os(&json), os(&a_json), os(&b_json)];
    let evaluate = args.dir.join("evaluate.json");
    step_output(
        &[
            "order".into(),
            os(&a_json),
            "--binary".into(),
            exe_s.clone(),
            "--evaluate".into(),
            os(&b_json),
            "--json".into(),
            "-o".into(),
            os(&order),
        ],
        &evaluate,
    )?;
    results.push(os(&evaluate));
    if root {
        results.push(os(&args.dir.join("compare-b.json")));
        println!("\n== 8. where a cold start of workload b spends its time");
        let timeline = args.dir.join("timeline.json");
        let mut argv: Vec<String> =
            vec!["timeline".into(), "-o".into(), os(&timeline), "--".into(), exe_s.clone()];
        argv.extend(workload_b.args.iter().cloned());
        step(&argv)?;
        results.push(os(&timeline));
    }
    println!(
        "\n== 9. the program's files over two emulated links, every network strategy: \
         profiled on workload a, measured on b"
    );
    let installed = args.dir.join(format!("sample-{}-files", args.size));
    sample
        .install(&installed)
        .with_context(|| format!("cannot copy the sample's files to {}", installed.display()))?;
    let experiment = args.dir.join("experiment.json");
    let _ = std::fs::remove_file(&experiment);
    let mut argv: Vec<String> = vec![
        "experiment".into(),
        os(&installed),
        "-o".into(),
        os(&experiment),
        "--link".into(),
        NETWORK_LINKS.into(),
        "--cache".into(),
        "cold".into(),
        "--runs".into(),
        "1".into(),
        "--profiled".into(),
        format!("sample {}", workload.args.join(" ")),
        "--".into(),
        "sample".into(),
    ];
    argv.extend(workload_b.args.iter().cloned());
    step(&argv)?;
    results.push(os(&experiment));
    println!("\n== 10. the report");
    let report = args.dir.join("report.html");
    let mut argv: Vec<String> = vec!["report".into()];
    argv.extend(results);
    argv.extend([
        "-o".into(),
        os(&report),
        "--title".into(),
        "coldstart demo: the sample program".into(),
    ]);
    step(&argv)?;
    println!("\nResults in {}; open {} in a browser", args.dir.display(), report.display());
    Ok(exit::SUCCESS)
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
