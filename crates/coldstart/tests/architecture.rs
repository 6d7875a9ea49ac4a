//! The crate graph, as docs/architecture.md draws it: read from `cargo metadata`, checked
//! against the rules of the architecture, and drawn into docs/architecture.svg.
//!
//! The picture is generated, never drawn by hand: this test fails when the committed SVG is not
//! what the workspace's manifests say, and `COLDSTART_UPDATE_DOCS=1 cargo test -p coldstart
//! --test architecture` rewrites it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The ground floor: formats and helpers that every stage may use, and that use no stage.
const GROUND: &[&str] = &[
    "coldstart-elf",
    "coldstart-error",
    "coldstart-formats",
    "coldstart-fs",
    "coldstart-process",
    "coldstart-profile-format",
    "coldstart-ready",
    "coldstart-storage",
    "coldstart-sys",
    "coldstart-units",
];

/// Crates only tests use.
const TEST_ONLY: &[&str] = &["coldstart-testkit"];

/// The binary: glue on top.
const TOP: &str = "coldstart";

/// The only arrows allowed between two stages, each with its reason: the network stage is
/// three crates (the lazy mount over the bundle's fetcher and cache); a stage that drives
/// another calls that stage's public API.
const STAGE_TO_STAGE: &[(&str, &str)] = &[
    ("coldstart-lazyfs", "coldstart-bundle"),
    // timeline records the module touches with the profiler (`coldstart_profile::profile`).
    ("coldstart-timeline", "coldstart-profile"),
    // experiment runs the paper's grid with the network stage's public API: it packs
    // (`coldstart_bundle::pack`), serves over an emulated link (`coldstart_serve::serve`), mounts
    // and predicts (`coldstart_lazyfs::mount`, `predict`), as pack, serve, run and predict do.
    ("coldstart-experiment", "coldstart-bundle"),
    ("coldstart-experiment", "coldstart-lazyfs"),
    ("coldstart-experiment", "coldstart-serve"),
    // The gate drives measurement: it runs the start-up through measure's public API.
    ("coldstart-gate", "coldstart-measure"),
    // The gate counts the pages start-up touches from page profiles the profiler records.
    ("coldstart-gate", "coldstart-profile"),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_owned()
}

/// Each workspace crate and the workspace crates it depends on (normal dependencies).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> =
        packages.iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn the_crates_stand_on_the_floors_the_architecture_gives_them() {
    let g = graph();
    for name in GROUND.iter().chain(TEST_ONLY).chain([&TOP]) {
        assert!(g.contains_key(*name), "{name} is named in this test but is not a crate");
    }
    for (name, deps) in &g {
        let ground = GROUND.contains(&name.as_str());
        for dep in deps {
            let dep_ground = GROUND.contains(&dep.as_str());
            assert!(dep != TOP, "{name} depends on the binary");
            assert!(!TEST_ONLY.contains(&dep.as_str()), "{name} depends on {dep}, a test crate");
            if ground {
                assert!(dep_ground, "{name} is on the ground floor but depends on the stage {dep}");
            } else if name != TOP && !dep_ground {
                assert!(
                    STAGE_TO_STAGE.contains(&(name.as_str(), dep.as_str())),
                    "the stage {name} depends on the stage {dep}: stages meet through the formats \
                     on the ground floor, not each other"
                );
            }
        }
    }
}

#[test]
fn the_lazy_mount_and_the_profile_format_build_without_the_profiler_or_measure() {
    // Issue 10's acceptance: the FUSE crate does not build the ptrace tracer, the agent or the
    // measurement stack; the profiler does not build the measurement stack.
    let g = graph();
    let closure = |root: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![root.to_owned()];
        while let Some(n) = todo.pop() {
            if seen.insert(n.clone()) {
                todo.extend(g[&n].iter().cloned());
            }
        }
        seen
    };
    let lazyfs = closure("coldstart-lazyfs");
    for absent in ["coldstart-profile", "coldstart-measure"] {
        assert!(!lazyfs.contains(absent), "coldstart-lazyfs builds {absent}");
    }
    assert!(!closure("coldstart-profile").contains("coldstart-measure"));
    assert!(!closure("coldstart-bundle").contains("coldstart-profile"));
    assert!(!closure("coldstart-layout").contains("coldstart-profile"));
}

/// The graph in Graphviz's language: the binary on top, the stages in one rank, the ground
/// floor below; an arrow from each crate to each crate it uses.
fn dot(g: &BTreeMap<String, BTreeSet<String>>) -> String {
    let stages: Vec<&str> = g
        .keys()
        .map(String::as_str)
        .filter(|n| *n != TOP && !GROUND.contains(n) && !TEST_ONLY.contains(n))
        .collect();
    let mut out = String::from(
        "// generated by crates/coldstart/tests/architecture.rs from cargo metadata; do not edit\n\
         digraph crates {\n  rankdir=TB; nodesep=0.25; ranksep=0.55;\n  \
         node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\", fontsize=11];\n  \
         edge [color=\"#8890a0\", arrowsize=0.6];\n",
    );
    out.push_str(&format!("  \"{TOP}\" [fillcolor=\"#fde7c8\", color=\"#c27c0e\"];\n"));
    for n in &stages {
        out.push_str(&format!("  \"{n}\" [fillcolor=\"#e6f4e4\", color=\"#4c8a45\"];\n"));
    }
    for n in GROUND {
        out.push_str(&format!("  \"{n}\" [fillcolor=\"#e3edf7\", color=\"#4a6f96\"];\n"));
    }
    // The stages that use no other stage stand side by side in one row.
    let row: Vec<String> = stages
        .iter()
        .filter(|n| !g[**n].iter().any(|d| stages.contains(&d.as_str())))
        .map(|n| format!("\"{n}\""))
        .collect();
    out.push_str(&format!("  {{ rank=same; {} }}\n", row.join("; ")));
    out.push_str("  { rank=sink; \"coldstart-error\" }\n");
    out.push_str(
        "  labelloc=b; labeljust=l; fontname=\"sans-serif\"; fontsize=10;\n  \
         label=\"orange: the binary (glue); green: stages; blue: ground floor (formats and \
         helpers). An arrow points at what a crate uses.\\lNot drawn: every library uses \
         coldstart-error; the binary uses the ground floor too.\\l\";\n",
    );
    for (name, deps) in g {
        if TEST_ONLY.contains(&name.as_str()) {
            continue;
        }
        for dep in deps {
            let hidden =
                dep == "coldstart-error" || (name == TOP && GROUND.contains(&dep.as_str()));
            if !hidden {
                out.push_str(&format!("  \"{name}\" -> \"{dep}\";\n"));
            }
        }
    }
    out.push_str("}\n");
    out
}

#[test]
fn the_committed_picture_is_the_crate_graph() {
    let docs = workspace_root().join("docs");
    let want = dot(&graph());
    if std::env::var_os("COLDSTART_UPDATE_DOCS").is_some() {
        std::fs::write(docs.join("architecture.dot"), &want).unwrap();
        let svg = Command::new("dot")
            .args(["-Tsvg", "-o"])
            .arg(docs.join("architecture.svg"))
            .arg(docs.join("architecture.dot"))
            .status()
            .expect("Graphviz's dot draws the picture (apt-get install graphviz)");
        assert!(svg.success());
        return;
    }
    let have = std::fs::read_to_string(docs.join("architecture.dot")).unwrap_or_default();
    assert!(
        have == want,
        "docs/architecture.dot is not the crate graph of the manifests: redraw it and its picture \
         with COLDSTART_UPDATE_DOCS=1 cargo test -p coldstart --test architecture"
    );
    let svg = std::fs::read_to_string(docs.join("architecture.svg")).unwrap_or_default();
    for name in graph().keys().filter(|n| !TEST_ONLY.contains(&n.as_str())) {
        // Graphviz writes a hyphen as an entity.
        let label = format!(">{}</text>", name.replace('-', "&#45;"));
        assert!(svg.contains(&label), "docs/architecture.svg lacks {name}: redraw it");
    }
}
