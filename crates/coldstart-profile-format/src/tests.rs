use super::*;

fn touch(address: u64, ordinal: u64, name: &str) -> Touch {
    Touch {
        address,
        size: 16,
        names: vec![name.into()],
        first_touch_ns: ordinal * 1000,
        pid: 1,
        tid: 1,
        ordinal,
        workloads: vec![],
    }
}

fn module(path: &str, functions: Vec<Touch>) -> Module {
    Module {
        path: path.into(),
        build_id: Some("abcd".into()),
        size: 100,
        mtime: 0,
        load_bias: 0,
        symbols: "symtab".into(),
        functions_total: 10,
        functions,
    }
}

fn profile(label: &str, modules: Vec<Module>) -> Profile {
    Profile { command: vec!["prog".into()], duration_ns: 5, ..testing::profile(label, modules) }
}

#[test]
fn round_trip_and_version_check() {
    let p = profile("a", vec![module("/bin/x", vec![touch(0x10, 0, "main")])]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    p.write(&path).unwrap();
    assert_eq!(Profile::read(&path).unwrap(), p);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");

    let text = std::fs::read_to_string(&path).unwrap().replace("\"version\": 1", "\"version\": 2");
    let err = Profile::from_json(&path, &text).unwrap_err();
    assert!(matches!(err, FormatError::UnknownVersion { found: 2, .. }), "{err}");
    assert!(err.to_string().contains("version 2"));

    let err =
        Profile::from_json(&path, r#"{"format":"coldstart-bundle","version":1}"#).unwrap_err();
    assert!(matches!(err, FormatError::WrongFormat { .. }));
}

#[test]
fn merge_orders_by_earliest_normalised_rank_and_keeps_workloads() {
    // Workload a: f, g, h ; workload b: h, k (h is first in b: rank 0).
    let a = profile(
        "a",
        vec![module("/bin/x", vec![touch(1, 0, "f"), touch(2, 1, "g"), touch(3, 2, "h")])],
    );
    let b = profile("b", vec![module("/bin/x", vec![touch(3, 0, "h"), touch(4, 1, "k")])]);
    let m = merge(vec![a.clone(), b.clone()]).unwrap();
    let names: Vec<&str> = m.first_touch_order().iter().map(|(_, t)| t.names[0].as_str()).collect();
    // ranks: f 0 (a), h 0 (b) but touched by 2 workloads -> before f; g 1/3; k 1/2.
    assert_eq!(names, ["h", "f", "g", "k"]);
    assert_eq!(m.workloads, vec![a, b]);
    let h = &m.modules[0].functions[0];
    assert_eq!(h.workloads, ["a", "b"]);
    assert_eq!(m.stop, Stop::Merged);
}

fn pages(files: &[&str], accesses: &[(usize, u64, u64)]) -> PageProfile {
    PageProfile {
        source: "tracefs".into(),
        sampled: false,
        files: files
            .iter()
            .map(|p| PageFile {
                path: p.into(),
                size: 8192,
                mtime: 0,
                build_id: None,
                dev: "8:1".into(),
                ino: 1,
            })
            .collect(),
        accesses: testing::faults(accesses),
        lost_events: 0,
    }
}

#[test]
fn merged_pages_follow_the_same_rule_page_by_page() {
    let mut a = profile("a", vec![]);
    a.pages = Some(pages(&["/x", "/data"], &[(0, 0, 2), (1, 5, 1)]));
    let mut b = profile("b", vec![]);
    // Different file order in b: files are matched by path.
    b.pages = Some(pages(&["/data", "/x"], &[(0, 7, 1), (1, 9, 1)]));
    let m = merge(vec![a, b]).unwrap().pages.unwrap();
    let order: Vec<(String, u64)> =
        m.accesses.iter().map(|x| (m.files[x.file].path.display().to_string(), x.page)).collect();
    // ranks: a: x0,x1 = 0 (one access of 2 pages), data5 = 1/2; b: data7 = 0, x9 = 1/2.
    // Equal ranks: by file (in first-seen order), then page.
    assert_eq!(
        order,
        [
            ("/x".into(), 0),
            ("/x".into(), 1),
            ("/data".into(), 7),
            ("/x".into(), 9),
            ("/data".into(), 5)
        ]
    );
    assert_eq!(m.files.len(), 2);
    assert_eq!(m.source, "tracefs", "one way of recording is kept");
}

#[test]
fn a_merge_is_exact_only_when_every_input_is() {
    let with_source = |label: &str, source: &str| {
        let mut p = profile(label, vec![]);
        p.pages = Some(PageProfile { source: source.into(), ..pages(&["/x"], &[(0, 0, 1)]) });
        p
    };
    let exact = merge(vec![with_source("a", "exact"), with_source("b", "exact")]).unwrap();
    assert!(exact.pages.unwrap().is_exact());
    let mixed = merge(vec![with_source("a", "exact"), with_source("b", "tracefs")]).unwrap();
    let mixed = mixed.pages.unwrap();
    assert!(!mixed.is_exact());
    assert_eq!(mixed.source, SOURCE_MERGED);
}

#[test]
fn merge_refuses_different_builds() {
    let a = profile("a", vec![module("/bin/x", vec![touch(1, 0, "f")])]);
    let mut b = profile("b", vec![module("/bin/x", vec![touch(1, 0, "f")])]);
    b.modules[0].build_id = Some("ffff".into());
    let err = merge(vec![a, b]).unwrap_err();
    assert!(err.to_string().contains("different builds"), "{err}");
}

#[test]
fn sizes_and_counts_past_any_file_are_refused_when_read() {
    let example = include_str!("../../../fuzz/seeds/profile/example.json");
    let good: serde_json::Value = serde_json::from_str(example).unwrap();
    let read = |v: &serde_json::Value| Profile::from_json(Path::new("p.json"), &v.to_string());
    assert!(read(&good).is_ok());
    type Edit = fn(&mut serde_json::Value);
    let edits: [(Edit, &str); 5] = [
        (|v| v["pages"]["accesses"][0]["count"] = (1u64 << 40).into(), "pages"),
        (|v| v["pages"]["accesses"][0]["page"] = (u64::MAX - 1).into(), "pages"),
        (|v| v["pages"]["accesses"][0]["file"] = 7.into(), "names file 7"),
        (|v| v["pages"]["files"][0]["size"] = (1u64 << 60).into(), "at most"),
        (|v| v["modules"][0]["functions"][0]["size"] = (1u64 << 62).into(), "function _start"),
    ];
    // A page of a disk's block device lies past any file's 64 GiB: the profile is read.
    let mut far = good.clone();
    far["pages"]["accesses"][0]["page"] = 23_233_069u64.into();
    assert!(read(&far).is_ok(), "{:?}", read(&far).err());
    for (edit, said) in edits {
        let mut v = good.clone();
        edit(&mut v);
        let e = read(&v).unwrap_err();
        assert!(matches!(e, FormatError::Invalid { .. }) && e.to_string().contains(said), "{e}");
        assert_eq!(e.category(), Category::Usage);
    }
}
