//! `coldstart link` with a chosen lld: the sample program relinked through its own Makefile
//! (which compiles with clang-19) by lld 22, the order verified, the linker checked in the
//! binary's `.comment`; lld's compression sort for what the order leaves; and the refusals.

use std::path::{Path, PathBuf};

use assert_cmd::Command as Cli;
use coldstart_layout::lld::{linked_by, Linker};
use coldstart_sample::{Config, Sample};
use predicates::prelude::*;

mod common;

fn coldstart() -> Cli {
    Cli::cargo_bin("coldstart").unwrap()
}

/// lld 22 is there (scripts/setup.sh installs it), or the test says how to get it.
fn require_lld22() -> bool {
    coldstart_testkit::require_program("ld.lld-22", "lld-22")
}

/// The functions of `binary` in address order.
fn layout(binary: &Path) -> Vec<String> {
    let info = coldstart_elf::ElfInfo::open(binary, &Default::default()).unwrap();
    let mut f: Vec<_> = info.functions.iter().map(|f| (f.address, f.names[0].clone())).collect();
    f.sort();
    f.into_iter().map(|(_, n)| n).collect()
}

fn link(sample: &Sample, order: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    let _ = std::fs::remove_file(sample.exe());
    coldstart()
        .arg("link")
        .args(extra)
        .arg("--order")
        .arg(order)
        .arg("--binary")
        .arg(sample.exe())
        .args(["--", "make", "-s", "-j2", "-C"])
        .arg(sample.dir.join("src"))
        .assert()
}

fn sample(dir: &Path) -> (Sample, PathBuf) {
    let sample = coldstart_sample::build(&Config::default(), &dir.join("sample")).unwrap();
    let a = dir.join("a.json");
    common::sample_profile(&sample, "a", &a);
    let order = dir.join("order.txt");
    coldstart()
        .arg("order")
        .arg(&a)
        .args(["--module", "sample", "-o"])
        .arg(&order)
        .assert()
        .success();
    (sample, order)
}

#[test]
fn link_with_lld_22_relinks_the_sample_in_the_order_and_the_binary_says_lld_22() {
    if !require_lld22() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sample, order) = sample(dir.path());
    // The Makefile compiles and links with clang-19, whose own lld is 19: `--lld 22` wins.
    link(&sample, &order, &["--lld", "22"])
        .success()
        .stdout(predicate::str::contains("the order took effect"))
        .stderr(predicate::str::contains("lld 22."));
    assert!(
        matches!(linked_by(&sample.exe()).unwrap(), Linker::Lld((22, _, _))),
        "{:?}",
        linked_by(&sample.exe())
    );
    coldstart().arg("verify").arg(sample.exe()).arg("--order").arg(&order).assert().success();
    let run = std::process::Command::new(sample.exe()).args(["--workload", "b"]).output().unwrap();
    assert!(run.status.success(), "the relinked sample runs");

    // The same with lld 19, where the sample was linked first: the check tells them apart.
    if coldstart_testkit::require_program("ld.lld-19", "lld-19") {
        link(&sample, &order, &["--lld", "19"]).success();
        assert!(matches!(linked_by(&sample.exe()).unwrap(), Linker::Lld((19, _, _))));
    }
}

#[test]
fn compression_sort_keeps_the_order_first_and_moves_only_what_it_leaves() {
    if !require_lld22() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sample, order) = sample(dir.path());
    link(&sample, &order, &["--lld", "22"]).success();
    let plain = layout(&sample.exe());
    link(&sample, &order, &["--lld", "22", "--compression-sort"])
        .success()
        .stdout(predicate::str::contains("the order took effect"))
        .stderr(predicate::str::contains("--bp-compression-sort=both"));
    let sorted = layout(&sample.exe());
    // The listed functions lead, in the order's order, in both builds.
    let listed: Vec<String> = std::fs::read_to_string(&order)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect();
    let first = |v: &[String]| -> Vec<String> {
        v.iter().filter(|n| listed.contains(n)).cloned().collect::<Vec<_>>()
    };
    assert_eq!(first(&plain), first(&sorted));
    // What the order leaves lies in input order without the sort and elsewhere with it.
    let rest = |v: &[String]| -> Vec<String> {
        v.iter().filter(|n| !listed.contains(n)).cloned().collect::<Vec<_>>()
    };
    assert_ne!(
        rest(&plain),
        rest(&sorted),
        "compression sort moved none of the unlisted functions"
    );
    let run = std::process::Command::new(sample.exe()).args(["--workload", "a"]).output().unwrap();
    assert!(run.status.success(), "the sorted sample runs");
}

#[test]
fn compression_sort_with_an_lld_older_than_20_is_refused_with_what_to_do() {
    if !coldstart_testkit::require_program("ld.lld-19", "lld-19") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let order = dir.path().join("order.txt");
    std::fs::write(&order, "main\n").unwrap();
    coldstart()
        .arg("link")
        .args(["--lld", "19", "--compression-sort", "--order"])
        .arg(&order)
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("lld 20 or later").and(predicate::str::contains("--lld 22")),
        );
    coldstart()
        .arg("link")
        .args(["--lld", "7", "--order"])
        .arg(&order)
        .args(["--", "true"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("apt-get install lld-7"));
}

#[test]
fn a_build_that_links_with_another_linker_is_caught_in_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.c"), "int main(void) { return 0; }\n").unwrap();
    let order = dir.path().join("order.txt");
    std::fs::write(&order, "main\n").unwrap();
    // A compiler by absolute path escapes the wrappers on PATH, and asks for GNU ld itself.
    common::link_with(&order, &dir.path().join("p"))
        .current_dir(dir.path())
        .args(["--", "/usr/bin/gcc", "-fuse-ld=bfd", "p.c", "-o", "p"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("was linked by another linker than lld"));
}
