//! `coldstart profile` against the sample program, whose generator knows exactly which
//! functions each workload runs at start-up and in which order.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use coldstart_sample::{Config, Module, Sample, Size};
use serde_json::Value;

fn sample(dir: &Path) -> Sample {
    coldstart_sample::build(&Config::for_size(Size::Small, 11), &dir.join("sample")).unwrap()
}

fn profile(dir: &Path, sample: &Sample, workload: &str, extra: &[&str]) -> Value {
    let out = dir.join(format!("{workload}.json"));
    let w = sample.workload(workload).unwrap();
    let o = Command::cargo_bin("coldstart")
        .unwrap()
        .args(["profile", "--workload", workload, "-o"])
        .arg(&out)
        .arg("--")
        .arg(sample.exe())
        .args(&w.args)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

/// Generated functions recorded (outside the truth: crt, libc, loader), with module path,
/// tid and ordinal, in first-touch order.
fn generated(p: &Value, sample: &Sample) -> Vec<(String, PathBuf, i64, u64)> {
    let known = sample.function_modules();
    let mut out = Vec::new();
    for m in p["modules"].as_array().unwrap() {
        let path = PathBuf::from(m["path"].as_str().unwrap());
        for f in m["functions"].as_array().unwrap() {
            for name in f["names"].as_array().unwrap() {
                let name = name.as_str().unwrap();
                if known.contains_key(name) {
                    out.push((
                        name.to_owned(),
                        path.clone(),
                        f["tid"].as_i64().unwrap(),
                        f["ordinal"].as_u64().unwrap(),
                    ));
                }
            }
        }
    }
    out.sort_by_key(|e| e.3);
    out
}

#[test]
fn recorded_functions_equal_the_truth_of_each_workload_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let sample = sample(dir.path());
    let modules = sample.function_modules();
    for w in &sample.workloads {
        let p = profile(dir.path(), &sample, &w.name, &[]);
        let recorded = generated(&p, &sample);
        let names: Vec<&str> = recorded.iter().map(|e| e.0.as_str()).collect();
        // Exactly the functions the workload runs, in the order it runs them (one thread).
        assert_eq!(
            names,
            w.startup.iter().map(String::as_str).collect::<Vec<_>>(),
            "workload {}",
            w.name
        );
        // Each is attributed to the module that defines it, the dlopened plugin included.
        for (name, path, _, _) in &recorded {
            let expected =
                std::fs::canonicalize(sample.module_path(modules[name.as_str()])).unwrap();
            assert_eq!(path, &expected, "{name}");
        }
        let seen: HashSet<Module> = recorded.iter().map(|e| modules[e.0.as_str()]).collect();
        assert!(seen.contains(&Module::Liba) && seen.contains(&Module::Libb), "both libraries");
        assert!(seen.contains(&Module::Plugin), "the dlopened plugin");
    }
}

#[test]
fn threaded_run_records_every_thread_in_its_own_order() {
    let dir = tempfile::tempdir().unwrap();
    let sample = sample(dir.path());
    let n = sample.threads.groups.min(3);
    let w = &sample.workloads[0];
    let p = profile(dir.path(), &sample, &w.name, &["--threads", &n.to_string()]);
    let truth = w.threads(&sample.threads, n).unwrap();
    let recorded = generated(&p, &sample);
    let mut by_tid: HashMap<i64, Vec<String>> = HashMap::new();
    for (name, _, tid, _) in &recorded {
        by_tid.entry(*tid).or_default().push(name.clone());
    }
    assert_eq!(by_tid.len(), n + 1, "the main thread and {n} workers: {by_tid:?}");
    let mut lists: Vec<Vec<String>> = by_tid.into_values().collect();
    lists.sort();
    let mut expected = truth.clone();
    expected.sort();
    assert_eq!(lists, expected);
}

/// Names of the touched functions of every module of the sample (executable, libraries,
/// plugin), by module file name.
fn sample_functions(p: &Value, sample: &Sample) -> HashMap<String, HashSet<String>> {
    let root = std::fs::canonicalize(sample.exe().parent().unwrap()).unwrap();
    let mut out: HashMap<String, HashSet<String>> = HashMap::new();
    for m in p["modules"].as_array().unwrap() {
        let path = PathBuf::from(m["path"].as_str().unwrap());
        if !path.starts_with(&root) {
            continue;
        }
        let names = m["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["names"][0].as_str().unwrap().to_owned());
        out.entry(path.file_name().unwrap().to_string_lossy().into_owned())
            .or_default()
            .extend(names);
    }
    out
}

#[test]
fn audit_and_ptrace_tracers_record_the_same_functions_in_the_same_order() {
    let dir = tempfile::tempdir().unwrap();
    let sample = sample(dir.path());
    let w = &sample.workloads[0];
    let audit = profile(dir.path(), &sample, &w.name, &[]);
    let audit = (sample_functions(&audit, &sample), generated(&audit, &sample));
    let ptrace = {
        let out = dir.path().join("ptrace.json");
        let o = Command::cargo_bin("coldstart")
            .unwrap()
            .args(["profile", "--tracer", "ptrace", "-o"])
            .arg(&out)
            .arg("--")
            .arg(sample.exe())
            .args(&w.args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        (sample_functions(&p, &sample), generated(&p, &sample))
    };
    assert!(audit.0.len() >= 4, "executable, both libraries, plugin: {:?}", audit.0.keys());
    assert_eq!(audit.0, ptrace.0, "the same functions of every module of the program");
    let order =
        |g: &[(String, PathBuf, i64, u64)]| g.iter().map(|e| e.0.clone()).collect::<Vec<_>>();
    assert_eq!(order(&audit.1), order(&ptrace.1), "the same first-touch order (one thread)");
    assert_eq!(order(&audit.1), w.startup, "and it is the truth");

    // Multi-threaded: the same set, each thread in its own order.
    let n = sample.threads.groups.min(3);
    let threads = ["--threads".to_string(), n.to_string()];
    let extra: Vec<&str> = threads.iter().map(String::as_str).collect();
    let a = profile(dir.path(), &sample, &w.name, &extra);
    let truth = w.threads(&sample.threads, n).unwrap();
    let mut by_tid: HashMap<i64, Vec<String>> = HashMap::new();
    for (name, _, tid, _) in generated(&a, &sample) {
        by_tid.entry(tid).or_default().push(name);
    }
    let mut lists: Vec<Vec<String>> = by_tid.into_values().collect();
    lists.sort();
    let mut expected = truth.clone();
    expected.sort();
    assert_eq!(lists, expected);
}
