//! The same config generates the same sources byte for byte; another seed does not.

use coldstart_sample::{generate_sources, workloads, Config, Size};

#[test]
fn same_seed_same_sources_byte_for_byte() {
    for size in [Size::Small, Size::Medium] {
        let c = Config::for_size(size, 42);
        let a = generate_sources(&c).unwrap();
        let b = generate_sources(&c).unwrap();
        assert_eq!(a.len(), b.len());
        for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert!(ta == tb, "{na} differs between two generations");
        }
        assert_eq!(workloads(&c).unwrap(), workloads(&c).unwrap());
    }
}

#[test]
fn another_seed_changes_constants_and_hot_sets() {
    let a = generate_sources(&Config::for_size(Size::Small, 1)).unwrap();
    let b = generate_sources(&Config::for_size(Size::Small, 2)).unwrap();
    let file = |set: &[(String, String)], name: &str| {
        set.iter().find(|(n, _)| n == name).unwrap().1.clone()
    };
    assert_ne!(file(&a, "exe_000.c"), file(&b, "exe_000.c"));
    assert_ne!(file(&a, "startup_a.c"), file(&b, "startup_a.c"));
    let wa = workloads(&Config::for_size(Size::Small, 1)).unwrap();
    let wb = workloads(&Config::for_size(Size::Small, 2)).unwrap();
    assert_ne!(wa[0].startup, wb[0].startup);
}

#[test]
fn bench_preset_has_20000_functions_split_over_many_files() {
    // One statement per body keeps this quick; the count and split of functions is the preset's.
    let c = Config { body_statements: 1, ..Config::for_size(Size::Bench, 1) };
    let sources = generate_sources(&c).unwrap();
    let units = sources.iter().filter(|(n, _)| n.ends_with(".c")).count();
    assert!(units >= 40, "{units} units: too few to build in parallel");
    let defined: usize =
        sources.iter().map(|(_, text)| text.matches("CS_NOINLINE void cs_").count()).sum();
    assert!(defined >= 20_000, "{defined}");
    let ws = workloads(&c).unwrap();
    assert!(ws.iter().all(|w| w.startup.len() > 2000));
}
