//! coldstart installed with the README's command into a fresh prefix, and run from another
//! directory with nothing of the checkout, of cargo or of this test's environment around:
//! everything it needs at run time comes with the binary (the audit agent, the sample
//! program's generator, `launch` for `measure --prefetch`, the demo's own subcommands).

mod common;
use common::{cache_lock, require, require_root};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The install command of the README: the line of a code block that installs
/// `crates/coldstart` with `cargo install`.
fn readme_install_command() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
        } else if in_block
            && line.starts_with("cargo install ")
            && line.contains("--path crates/coldstart")
        {
            return line.split_whitespace().map(str::to_owned).collect();
        }
    }
    panic!("{} shows no `cargo install` command", readme.display());
}

fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_readmes_install_command_gives_a_coldstart_that_runs_from_any_directory() {
    if !require_root("the demo's cgroups and cold cache")
        || !require(
            coldstart_sample::check_tools().is_ok(),
            "the sample's tools (clang-19, lld-19)",
        )
    {
        return;
    }
    let command = readme_install_command();
    assert_eq!(command[..2], ["cargo", "install"], "{command:?}");
    assert!(command.iter().any(|a| a == "--locked"), "the locked dependencies: {command:?}");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // This test run's own build products: the workspace's target directory and its debug
    // profile make the install a copy of the binary the tests use. A release build is the
    // same code and would take minutes on every run of the suite.
    let built = Path::new(env!("CARGO_BIN_EXE_coldstart"));
    let target: PathBuf = built.ancestors().nth(2).unwrap().to_owned();
    let prefix = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut install = Command::new(cargo);
    // Not the variables cargo sets for this test (build scripts that read CARGO_MANIFEST_DIR
    // would be rebuilt for the change: minutes).
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_", "CARGO_CRATE_", "CARGO_TARGET_TMPDIR"]
            .iter()
            .any(|p| name.starts_with(p))
            || name == "CARGO_PRIMARY_PACKAGE"
        {
            install.env_remove(&*name);
        }
    }
    let out = install
        .args(&command[1..])
        .arg("--root")
        .arg(prefix.path())
        .arg("--target-dir")
        .arg(&target)
        .arg("--debug")
        .current_dir(&workspace)
        .output()
        .unwrap();
    ok(&out, "the README's install command");
    let bin = prefix.path().join("bin");
    assert!(bin.join("coldstart").is_file(), "installed into {}", bin.display());

    // Elsewhere, as a user: a directory of its own, an empty HOME, PATH with the prefix and
    // the system's directories only (no cargo, no checkout).
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::Builder::new().prefix("coldstart-install").tempdir_in("/var/tmp").unwrap();
    let run = |args: &[&str]| {
        Command::new("coldstart")
            .args(args)
            .current_dir(work.path())
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    bin.display()
                ),
            )
            .env("HOME", home.path())
            .env("TMPDIR", home.path())
            .output()
            .unwrap()
    };
    let version = ok(&run(&["--version"]), "--version");
    assert_eq!(version.trim(), format!("coldstart {}", env!("CARGO_PKG_VERSION")));
    ok(&run(&["sample", "-o", "sample"]), "sample");
    assert!(work.path().join("sample/sample").is_file());
    // The function profile with the audit agent the binary carries.
    let out = run(&["profile", "--tracer", "audit", "-o", "p.json", "--", "./sample/sample"]);
    ok(&out, "profile --tracer audit");
    let profile = coldstart_profile_format::Profile::read(&work.path().join("p.json")).unwrap();
    let exe = work.path().join("sample/sample").canonicalize().unwrap();
    let module = profile.modules.iter().find(|m| m.path == exe).expect("the sample profiled");
    assert!(
        module.functions.iter().any(|t| t.names.iter().any(|n| n == "main")),
        "main touched: {:?}",
        module.functions
    );
    // The whole pipeline (its steps run the installed binary itself).
    let _cache = cache_lock();
    let out = run(&["demo", "--size", "small", "--runs", "1", "--dir", "demo"]);
    ok(&out, "demo");
    assert!(work.path().join("demo/report.html").is_file());
}
