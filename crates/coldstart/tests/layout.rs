//! Layout end to end on small C programs compiled here with clang-19 and linked with lld
//! (and gold, and llvm-bolt when it works): order files, verify, analyze and evaluate.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::Command as Cli;
use coldstart_profile_format::PageAccess;
use coldstart_profile_format::Profile;
use coldstart_testkit::require;
use predicates::prelude::*;

mod common;

const CLANG: &str = "clang-19";

fn coldstart() -> Cli {
    Cli::cargo_bin("coldstart").unwrap()
}

/// A C program of `n` functions of about 450 bytes of real instructions each (BOLT keeps
/// them, unlike nop padding); `main` calls the hot ones, in `hot` order, then a static one.
fn program(n: usize, hot: &[usize]) -> String {
    let mut s = String::from("#include <stdio.h>\n");
    for i in 0..n {
        s.push_str(&format!(
            "__attribute__((noinline)) int f{i}(int x) {{ __asm__ volatile(\".rept 150\\n\\taddl $1, %%eax\\n\\t.endr\" ::: \"eax\"); return x + {i}; }}\n"
        ));
    }
    s.push_str("static __attribute__((noinline)) int local_helper(int x) { __asm__ volatile(\"nop\"); return x * 3; }\n");
    s.push_str("int main(int argc, char **argv) { int s = 0; (void)argv;\n");
    for i in hot {
        s.push_str(&format!("  s += f{i}(argc);\n"));
    }
    s.push_str("  s += local_helper(s); printf(\"%d\\n\", s); return 0; }\n");
    s
}

fn hot_names(hot: &[usize]) -> Vec<String> {
    let mut v = vec!["main".to_owned()];
    v.extend(hot.iter().map(|i| format!("f{i}")));
    v.push("local_helper".into());
    v
}

/// Compile `src` into DIR/OUT with function sections, linked with lld, and `extra`.
fn compile(dir: &Path, src: &str, out: &str, extra: &[&str]) -> PathBuf {
    let flags = [&["-g0", "-ffunction-sections", "-fuse-ld=lld"][..], extra].concat();
    coldstart_testkit::compile_c(dir, out, src, &flags)
}

/// A profile of `module` whose start-up touched `names` in this order, written to `path`.
fn profile(path: &Path, workload: &str, module: &Path, names: &[String]) -> PathBuf {
    common::touch_profile(workload, module, names, 1000).write(path).unwrap();
    path.to_owned()
}

/// Add page data to the profile at `path`: `accesses` to the one file `file`.
fn add_pages(path: &Path, file: &Path, accesses: Vec<PageAccess>) {
    let mut p = Profile::read(path).unwrap();
    p.pages = Some(coldstart_profile_format::PageProfile {
        source: "tracefs".into(),
        sampled: false,
        files: vec![coldstart_profile_format::PageFile {
            path: file.to_owned(),
            size: 0,
            mtime: 0,
            build_id: None,
            dev: "0:0".into(),
            ino: 0,
        }],
        accesses,
        lost_events: 0,
    });
    p.write(path).unwrap();
}

/// Addresses of `names` in `binary`, through coldstart-elf.
fn addresses(binary: &Path, names: &[String]) -> Vec<u64> {
    let info = coldstart_elf::ElfInfo::open(binary, &Default::default()).unwrap();
    names
        .iter()
        .map(|n| {
            info.functions
                .iter()
                .find(|f| f.names.contains(n))
                .unwrap_or_else(|| panic!("{n} missing"))
                .address
        })
        .collect()
}

fn is_rising(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

const HOT: [usize; 8] = [45, 39, 33, 27, 21, 15, 9, 3];

#[test]
fn lld_with_the_order_file_puts_functions_in_that_order_and_verify_passes() {
    let dir = tempfile::tempdir().unwrap();
    let src = program(48, &HOT);
    let plain = compile(dir.path(), &src, "prog", &[]);
    let names = hot_names(&HOT);
    let p = profile(&dir.path().join("a.json"), "a", &plain, &names);
    let order = dir.path().join("order.txt");
    coldstart()
        .args(["order"])
        .arg(&p)
        .arg("-o")
        .arg(&order)
        .arg("--binary")
        .arg(&plain)
        .assert()
        .success();
    let text = std::fs::read_to_string(&order).unwrap();
    let listed: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());

    // Without the order: scattered, verify fails with exit 1.
    assert!(!is_rising(&addresses(&plain, &names)));
    coldstart()
        .arg("verify")
        .arg(&plain)
        .arg("--profile")
        .arg(&p)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("did NOT take effect"));

    // With it: in that order, packed, verify passes.
    let flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let ordered = compile(dir.path(), &src, "prog", &[&flag]);
    assert!(is_rising(&addresses(&ordered, &names)), "static local_helper and globals in order");
    coldstart().arg("verify").arg(&ordered).arg("--profile").arg(&p).assert().success();
    coldstart().arg("verify").arg(&ordered).arg("--order").arg(&order).assert().success();
}

#[test]
fn gold_takes_the_gold_order_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = program(32, &HOT[4..]);
    let plain = compile(dir.path(), &src, "prog", &[]);
    let names = hot_names(&HOT[4..]);
    let p = profile(&dir.path().join("a.json"), "a", &plain, &names);
    let order = dir.path().join("order.gold");
    coldstart()
        .arg("order")
        .arg(&p)
        .args(["--format", "gold", "-o"])
        .arg(&order)
        .assert()
        .success();
    let text = std::fs::read_to_string(&order).unwrap();
    assert!(text.starts_with(".text.main\n.text.*.main\n.text.f21\n.text.*.f21\n"), "{text}");
    let flag = format!("-Wl,--section-ordering-file={}", order.display());
    let c = dir.path().join("g.c");
    std::fs::write(&c, &src).unwrap();
    let exe = dir.path().join("gold-prog");
    let status = Command::new(CLANG)
        .args(["-O1", "-ffunction-sections", "-fuse-ld=gold", &flag])
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(is_rising(&addresses(&exe, &names)));
    coldstart().arg("verify").arg(&exe).arg("--order").arg(&order).assert().success();
}

#[test]
fn gnu_ld_order_is_a_script_fragment_and_ld64_names_carry_an_underscore() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> =
        ["main", "_ZN3foo3barEv", "_RNvCs1234_7mycrate4main"].map(String::from).to_vec();
    let p = profile(&dir.path().join("a.json"), "a", Path::new("/usr/bin/prog"), &names);
    coldstart().arg("order").arg(&p).args(["--format", "gnu-ld"]).assert().success().stdout(
        predicate::eq(
            "/* coldstart first-touch order of /usr/bin/prog (3 functions, 0 bytes) */\n\
             .text : {\n\
             \x20 *(.text.main .text.*.main)\n\
             \x20 *(.text._ZN3foo3barEv .text.*._ZN3foo3barEv)\n\
             \x20 *(.text._RNvCs1234_7mycrate4main .text.*._RNvCs1234_7mycrate4main)\n\
             }\n",
        ),
    );
    coldstart()
        .arg("order")
        .arg(&p)
        .args(["--format", "ld64"])
        .assert()
        .success()
        .stdout(predicate::eq("_main\n__ZN3foo3barEv\n__RNvCs1234_7mycrate4main\n"));
}

#[test]
fn mold_is_refused_with_the_reason_and_an_alternative() {
    let dir = tempfile::tempdir().unwrap();
    let p = profile(&dir.path().join("a.json"), "a", Path::new("/usr/bin/prog"), &["main".into()]);
    coldstart().arg("order").arg(&p).args(["--format", "mold"]).assert().code(2).stderr(
        predicate::str::contains("no symbol or input-section ordering")
            .and(predicate::str::contains("lld")),
    );
}

#[test]
fn ambiguous_static_names_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.c");
    let b = dir.path().join("b.c");
    std::fs::write(&a, "static __attribute__((noinline)) int dup(int x){return x+1;}\nint use_a(int x){return dup(x);}\nint use_b(int);\nint main(int c, char**v){(void)v; return use_a(c)+use_b(c);}\n").unwrap();
    std::fs::write(&b, "static __attribute__((noinline)) int dup(int x){return x+2;}\nint use_b(int x){return dup(x);}\n").unwrap();
    let exe = dir.path().join("dup");
    assert!(Command::new(CLANG)
        .args(["-O1", "-ffunction-sections", "-fuse-ld=lld"])
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap()
        .success());
    let p = profile(
        &dir.path().join("p.json"),
        "a",
        &exe,
        &["main".into(), "dup".into(), "use_a".into()],
    );
    coldstart().arg("order").arg(&p).arg("--binary").arg(&exe).assert().success().stderr(
        predicate::str::contains("defined more than once").and(predicate::str::contains("dup")),
    );
}

fn bolt_works() -> bool {
    ["/usr/bin/llvm-bolt-19", "/usr/lib/llvm-19/bin/llvm-bolt"]
        .iter()
        .any(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
}

#[test]
fn bolt_rewrites_an_emit_relocs_binary_in_the_order_and_refuses_one_without() {
    if !require(bolt_works(), "llvm-bolt-19 (apt-get install bolt-19)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = program(48, &HOT);
    let names = hot_names(&HOT);
    let relocs = compile(dir.path(), &src, "relocs", &["-Wl,--emit-relocs"]);
    let p = profile(&dir.path().join("a.json"), "a", &relocs, &names);
    let order = dir.path().join("order.bolt");
    coldstart()
        .arg("order")
        .arg(&p)
        .args(["--format", "bolt", "-o"])
        .arg(&order)
        .assert()
        .success();
    let out = dir.path().join("relocs.bolt");
    coldstart()
        .arg("bolt")
        .arg(&relocs)
        .arg("--order")
        .arg(&order)
        .arg("-o")
        .arg(&out)
        .assert()
        .success();
    assert!(is_rising(&addresses(&out, &names)));
    let run = Command::new(&out).output().unwrap();
    assert!(run.status.success(), "the rewritten program runs");

    let plain = compile(dir.path(), &src, "plain", &[]);
    coldstart()
        .arg("bolt")
        .arg(&plain)
        .arg("--order")
        .arg(&order)
        .arg("-o")
        .arg(dir.path().join("never"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--emit-relocs"));
    assert!(!dir.path().join("never").exists());
}

/// Functions each alone on a page (aligned to 4096): the hot ones are every fourth, so
/// start-up touches exactly one page per hot function and one for main.
fn paged_program(n: usize, hot: &[usize]) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "__attribute__((noinline, aligned(4096))) int f{i}(int x) {{ __asm__ volatile(\".rept 100\\n\\taddl $1, %%eax\\n\\t.endr\" ::: \"eax\"); return x + {i}; }}\n"
        ));
    }
    s.push_str(
        "__attribute__((aligned(4096))) int main(int argc, char **argv) { int s = 0; (void)argv;\n",
    );
    for i in hot {
        s.push_str(&format!("  s += f{i}(argc);\n"));
    }
    s.push_str("  return s & 1; }\n");
    s
}

#[test]
fn analyze_counts_touched_pages_utilization_and_ideal_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let hot: Vec<usize> = (0..32).filter(|i| i % 4 == 3).collect();
    let exe = compile(dir.path(), &paged_program(32, &hot), "paged", &[]);
    let mut names = vec!["main".to_owned()];
    names.extend(hot.iter().map(|i| format!("f{i}")));
    let p = profile(&dir.path().join("a.json"), "a", &exe, &names);
    let info = coldstart_elf::ElfInfo::open(&exe, &Default::default()).unwrap();
    let used: u64 = names
        .iter()
        .map(|n| info.functions.iter().find(|f| f.names.contains(n)).unwrap().size)
        .sum();
    let out = coldstart()
        .arg("analyze")
        .arg(&exe)
        .arg("--profile")
        .arg(&p)
        .args(["--readahead", "0", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let u = &json["utilization"];
    assert_eq!(u["code_pages_touched"], 9);
    assert_eq!(u["used_code_bytes"], used);
    let total = u["code_pages_total"].as_u64().unwrap();
    assert!(total >= 33, "33 aligned functions need 33 pages at least, got {total}");
    let util = u["utilization"].as_f64().unwrap();
    assert!((util - used as f64 / (9.0 * 4096.0)).abs() < 1e-9);
    // No read-ahead: every touched page is a fault; packed, the hot bytes need few pages.
    assert_eq!(u["current"]["faults"], 9);
    assert_eq!(u["ideal"]["pages_touched"], used.div_ceil(4096));
    assert_eq!(u["ideal"]["faults"], used.div_ceil(4096));

    // A 64 KiB window (16 pages around each fault) covers the next hot page, 4 pages on:
    // fewer faults than touched pages; the table shows the same figures.
    let out = coldstart()
        .arg("analyze")
        .arg(&exe)
        .arg("--profile")
        .arg(&p)
        .args(["--readahead", "64k", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let faults = json["utilization"]["current"]["faults"].as_u64().unwrap();
    assert!((1..9).contains(&faults), "{faults}");
    let out = coldstart().arg("analyze").arg(&exe).arg("--profile").arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{total} ")) && text.contains("9 ("), "{text}");
}

#[test]
fn analyze_without_a_profile_shows_the_static_picture_and_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path(), &program(4, &[1]), "small", &[]);
    coldstart().arg("analyze").arg(&exe).assert().success().stdout(
        predicate::str::contains("static relocations kept     no")
            .and(predicate::str::contains("functions in own sections"))
            .and(predicate::str::contains("a profile: run `coldstart profile")),
    );
}

#[test]
fn evaluate_scores_every_layout_on_a_held_out_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let hot_a: Vec<usize> = (0..32).filter(|i| i % 4 == 3).collect();
    let exe = compile(dir.path(), &paged_program(32, &hot_a), "paged", &[]);
    let mut a = vec!["main".to_owned()];
    a.extend(hot_a.iter().map(|i| format!("f{i}")));
    // Workload b shares most of a's functions, adds one and drops one.
    let mut b = a.clone();
    b.retain(|n| n != "f31");
    b.push("f8".into());
    let pa = profile(&dir.path().join("a.json"), "a", &exe, &a);
    let pb = profile(&dir.path().join("b.json"), "b", &exe, &b);
    let out = common::order_for(&pa, &exe)
        .arg("--evaluate")
        .arg(&pb)
        .args(["--readahead", "0", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = e["rows"].as_array().unwrap();
    let pages = |name: &str| {
        rows.iter().find(|r| r["layout"] == name).unwrap()["cost"]["pages_touched"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(pages("default"), 9);
    assert!(pages("first-touch") < pages("default"));
    assert!(pages("ideal") <= pages("first-touch"));
    assert!(["first-touch", "merged", "cluster"].contains(&e["best"].as_str().unwrap()));
}

#[test]
fn forward_read_around_charges_a_downward_walk_a_fault_per_page() {
    // Sixteen functions on pages of their own, touched from the highest address down: a
    // window centred on each fault covers the next pages down, a forward one never does.
    let dir = tempfile::tempdir().unwrap();
    let hot: Vec<usize> = (0..16).rev().collect();
    let exe = compile(dir.path(), &paged_program(16, &hot), "down", &[]);
    let names: Vec<String> = hot.iter().map(|i| format!("f{i}")).collect();
    let p = profile(&dir.path().join("down.json"), "down", &exe, &names);
    let faults = |shape: &str| {
        let out = coldstart()
            .arg("analyze")
            .arg(&exe)
            .arg("--profile")
            .arg(&p)
            .args(["--readahead", "16k", "--read-around", shape, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        a["utilization"]["current"]["faults"].as_u64().unwrap()
    };
    let (centred, forward) = (faults("centred"), faults("forward"));
    assert_eq!(forward, 16, "a forward window never covers the next page down");
    assert!(centred <= 8, "a centred 4-page window covers two pages below each fault: {centred}");
}

#[test]
fn link_injects_the_flags_into_a_make_build_that_sets_its_own_cflags() {
    let dir = tempfile::tempdir().unwrap();
    let src = program(48, &HOT);
    std::fs::write(dir.path().join("prog.c"), &src).unwrap();
    // A Makefile that overrides CFLAGS and LDFLAGS from the environment.
    std::fs::write(
        dir.path().join("Makefile"),
        "CFLAGS = -O1\nLDFLAGS =\nprog: prog.c\n\t$(CC) $(CFLAGS) -o $@ prog.c $(LDFLAGS)\n",
    )
    .unwrap();
    let names = hot_names(&HOT);
    let p = profile(&dir.path().join("a.json"), "a", &dir.path().join("prog"), &names);
    let order = dir.path().join("order.txt");
    coldstart().arg("order").arg(&p).arg("-o").arg(&order).assert().success();
    common::link_with(&order, &dir.path().join("prog"))
        .current_dir(dir.path())
        .args(["--", "make", "-s"])
        .assert()
        .success()
        .stdout(predicate::str::contains("the order took effect"));
    assert!(is_rising(&addresses(&dir.path().join("prog"), &names)));
}

#[test]
fn link_of_a_failing_build_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let order = dir.path().join("order.txt");
    std::fs::write(&order, "main\n").unwrap();
    coldstart()
        .arg("link")
        .arg("--order")
        .arg(&order)
        .args(["--", "false"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("the build `false` failed"));
}

#[test]
fn data_objects_are_ordered_by_the_first_touch_of_their_pages() {
    let dir = tempfile::tempdir().unwrap();
    let hot_tables = [13usize, 2, 9, 5];
    let mut src = String::new();
    for i in 0..16 {
        src.push_str(&format!("const int t{i}[1100] = {{ {} }};\n", i + 1));
    }
    src.push_str("int main(int argc, char **argv) { (void)argv; volatile int s = 0;\n");
    for i in hot_tables {
        src.push_str(&format!("  s += t{i}[argc * 7];\n"));
    }
    src.push_str("  return s & 1; }\n");
    let exe = compile(dir.path(), &src, "tables", &["-fdata-sections"]);
    // A profile whose page data says start-up touched the hot tables' pages, in order.
    let symbols = coldstart_layout::data::data_symbols(&exe).unwrap();
    let table_names: Vec<String> = hot_tables.iter().map(|i| format!("t{i}")).collect();
    let mut accesses = Vec::new();
    for (k, name) in table_names.iter().enumerate() {
        let d = symbols.iter().find(|d| &d.name == name).unwrap();
        accesses.push(PageAccess {
            file: 0,
            page: (d.offset + 8) / 4096,
            count: 1,
            t_ns: k as u64,
            event: "fault".into(),
            pid: 1,
        });
    }
    let p = dir.path().join("a.json");
    profile(&p, "a", &exe, &["main".into()]);
    add_pages(&p, &exe, accesses);
    let order = dir.path().join("order.txt");
    coldstart()
        .arg("order")
        .arg(&p)
        .arg("--data")
        .arg("--binary")
        .arg(&exe)
        .arg("-o")
        .arg(&order)
        .assert()
        .success();
    let text = std::fs::read_to_string(&order).unwrap();
    let data: Vec<&str> = text.split("# data objects\n").nth(1).unwrap().lines().collect();
    // Each hot table comes first in its page's turn (a page may also hold a neighbour).
    let pos = |n: &str| {
        data.iter().position(|d| *d == n).unwrap_or_else(|| panic!("{n} not in {data:?}"))
    };
    assert!(table_names.windows(2).all(|w| pos(&w[0]) < pos(&w[1])), "{data:?}");

    // By default (no --data, no --binary) the profiled executable's data is ordered the same.
    let by_default = dir.path().join("default.txt");
    coldstart()
        .arg("order")
        .arg(&p)
        .arg("-o")
        .arg(&by_default)
        .assert()
        .success()
        .stderr(predicate::str::contains("hot data objects written after the functions"));
    let default_text = std::fs::read_to_string(&by_default).unwrap();
    assert_eq!(
        default_text.split("# data objects\n").nth(1),
        Some(data.join("\n") + "\n").as_deref()
    );

    let flag = format!("-Wl,--symbol-ordering-file={}", order.display());
    let relinked = compile(dir.path(), &src, "tables", &["-fdata-sections", &flag]);
    let after = coldstart_layout::data::data_symbols(&relinked).unwrap();
    let addr = |n: &str| after.iter().find(|d| d.name == n).unwrap().offset;
    let offsets: Vec<u64> = table_names.iter().map(|n| addr(n)).collect();
    assert!(is_rising(&offsets), "{offsets:?}");
    // Packed: the first hot tables sit at the start of .rodata, one after the other.
    assert!(offsets[3] - offsets[0] < 4 * 4400 * 2, "{offsets:?}");
}

#[test]
fn link_packs_relative_relocations_where_the_c_library_loads_them_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from("#include <stdio.h>\nstatic int v[600];\nint *ptrs[600] = {\n");
    for i in 0..600 {
        src.push_str(&format!("  &v[{i}],\n"));
    }
    src.push_str(
        "};\nint main(int c, char **a) { (void)a; printf(\"%d\\n\", *ptrs[c]); return 0; }\n",
    );
    std::fs::write(dir.path().join("p.c"), &src).unwrap();
    let order = dir.path().join("order.txt");
    std::fs::write(&order, "main\n").unwrap();
    let static_of = |exe: &Path| -> serde_json::Value {
        let out = coldstart().arg("analyze").arg(exe).arg("--json").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["static"].clone()
    };
    for (name, flag) in
        [("plain", Some("--no-pack-relocs")), ("packed", Some("--pack-relocs")), ("default", None)]
    {
        let mut cmd = coldstart();
        cmd.current_dir(dir.path()).arg("link").arg("--order").arg(&order);
        cmd.args(flag);
        cmd.args(["--", CLANG, "-O1", "-fPIE", "-pie", "p.c", "-o", name]).assert().success();
    }
    let plain = static_of(&dir.path().join("plain"));
    let packed = static_of(&dir.path().join("packed"));
    // By default, packed where this machine's C library loads DT_RELR.
    let supported = coldstart_layout::drivers::relr_supported() == Some(true);
    assert_eq!(static_of(&dir.path().join("default"))["relr"], supported);
    assert!(plain["rela_dyn_relative"].as_u64().unwrap() >= 600, "{plain}");
    assert_eq!(plain["relr"], false);
    assert_eq!(packed["relr"], true);
    assert_eq!(packed["rela_dyn_relative"], 0);
    assert!(
        packed["rela_dyn_bytes"].as_u64().unwrap() < plain["rela_dyn_bytes"].as_u64().unwrap() / 10
    );
}

#[test]
fn analyze_breaks_the_pages_start_up_read_down_by_section() {
    let dir = tempfile::tempdir().unwrap();
    let hot: Vec<usize> = vec![3, 7];
    let mut src = paged_program(8, &hot);
    src.push_str("static int v[1000];\nint *ptrs[1000] = {\n");
    for i in 0..1000 {
        src.push_str(&format!("  &v[{i}],\n"));
    }
    src.push_str("};\nint use_ptrs(int i) { return *ptrs[i]; }\n");
    let exe = compile(dir.path(), &src, "sections", &["-fPIE", "-pie"]);
    let info = coldstart_elf::ElfInfo::open(&exe, &Default::default()).unwrap();
    let page_of = |name: &str| {
        let f = info.functions.iter().find(|f| f.names.iter().any(|n| n == name)).unwrap();
        info.vaddr_to_offset(f.address).unwrap() / 4096
    };
    let rela = info.section(".rela.dyn").unwrap();
    assert!(rela.size > 3 * 4096, "1000 relative relocations: {}", rela.size);
    let rela_page = (rela.offset.unwrap() + rela.size / 2) / 4096;
    // Pages wholly of code (main's page is shared with the start of .data: lld packs the
    // segments into shared file pages, and a page counts for the class with most bytes).
    let code_pages = [page_of("f1"), page_of("f3"), page_of("f5")];
    let p = dir.path().join("a.json");
    profile(&p, "a", &exe, &["main".into(), "f3".into(), "f7".into()]);
    let access = |page: u64, event: &str| PageAccess {
        file: 0,
        page,
        count: 1,
        t_ns: 0,
        event: event.into(),
        pid: 1,
    };
    let ptrs = coldstart_layout::data::data_symbols(&exe).unwrap();
    let ptrs = ptrs.iter().find(|d| d.name == "ptrs").expect("ptrs is a named object");
    let ptrs_page = (ptrs.offset + ptrs.size / 2) / 4096;
    let mut accesses = vec![access(rela_page, "fault"), access(ptrs_page, "fault")];
    accesses.extend(code_pages.iter().map(|&pg| access(pg, "fault")));
    accesses.push(access(code_pages[0] + 1, "map"));
    add_pages(&p, &exe, accesses);
    let out = coldstart()
        .arg("analyze")
        .arg(&exe)
        .arg("--profile")
        .arg(&p)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |class: &str| {
        json["sections"].as_array().unwrap().iter().find(|r| r["class"] == class).unwrap().clone()
    };
    assert_eq!(row("code")["pages_faulted"], 3);
    assert_eq!(row("code")["pages_read"], 4);
    assert_eq!(row("relocations")["pages_faulted"], 1);
    assert!(row("relocations")["remedy"].as_str().unwrap().contains("pack-relative-relocs"));
    assert_eq!(row("rodata")["pages_read"], 0);
    // What an order can move: the four code pages and the named table; not the relocations.
    let movable = &json["movable"];
    assert_eq!((movable["code"].as_u64(), movable["named_data"].as_u64()), (Some(4), Some(1)));
    assert_eq!(movable["fixed"], 1, "{movable}");
    let text = String::from_utf8(
        coldstart().arg("analyze").arg(&exe).arg("--profile").arg(&p).output().unwrap().stdout,
    )
    .unwrap();
    assert!(text.contains("by section") && text.contains("relocations"), "{text}");
    assert!(text.contains("what a linker order can move: 5 pages"), "{text}");
    // Without .symtab no data object has a name to count: the split says it is a lower bound.
    assert!(Command::new("llvm-strip-19").arg(&exe).status().unwrap().success());
    let out = coldstart().arg("analyze").arg(&exe).arg("--profile").arg(&p).arg("--json").output();
    let json: serde_json::Value = serde_json::from_slice(&out.unwrap().stdout).unwrap();
    assert_eq!(json["movable"]["named_data"], 0, "{}", json["movable"]);
    let warnings = json["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("lower bound")), "{warnings:?}");
}

#[test]
fn verify_names_functions_folded_into_one_and_functions_missing() {
    let dir = tempfile::tempdir().unwrap();
    let src = "__attribute__((noinline)) int g1(int x) { return x * 7 + 1; }\n\
               __attribute__((noinline)) int g2(int x) { return x * 7 + 1; }\n\
               int main(int c, char **v) { (void)v; return g1(c) + g2(c); }\n";
    let exe = compile(dir.path(), src, "icf", &["-Wl,--icf=all"]);
    let order = dir.path().join("order.txt");
    std::fs::write(&order, "main\ng1\ng2\ngone_inlined\n").unwrap();
    let out = coldstart()
        .arg("verify")
        .arg(&exe)
        .arg("--order")
        .arg(&order)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["folded"], serde_json::json!([["g1", "g2"]]), "{v}");
    assert_eq!(v["missing"], serde_json::json!(["gone_inlined"]));
    assert_eq!(v["placed"], 2);
}

#[test]
fn link_orders_a_cargo_build_through_rustflags() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"ordered\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    let mut main = String::new();
    for i in 0..24 {
        main.push_str(&format!(
            "#[inline(never)] fn work{i}(x: u64) -> u64 {{ let mut s = x; for k in 0..{i} + 3 {{ s = s.wrapping_mul(31).wrapping_add(k); }} std::hint::black_box(s) }}\n"
        ));
    }
    main.push_str("fn main() { let n = std::env::args().count() as u64; let mut t = 0;\n");
    for i in [20, 5, 13, 1] {
        main.push_str(&format!("  t += work{i}(n);\n"));
    }
    main.push_str("  println!(\"{t}\"); }\n");
    std::fs::write(root.join("src/main.rs"), main).unwrap();
    let build = |extra_env: Option<&Path>| {
        let mut cmd = coldstart();
        match extra_env {
            Some(order) => {
                cmd.arg("link")
                    .arg("--order")
                    .arg(order)
                    .arg("--binary")
                    .arg(root.join("target/debug/ordered"));
            }
            None => {
                cmd.arg("link").arg("--order").arg(root.join("empty.txt"));
            }
        }
        cmd.current_dir(root)
            .env("CARGO_TARGET_DIR", root.join("target"))
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .args(["--", "cargo", "build", "--offline", "--quiet"])
            .assert()
            .success();
    };
    // A first build with an empty order: the mangled names to order.
    std::fs::write(root.join("empty.txt"), "").unwrap();
    build(None);
    let info = coldstart_elf::ElfInfo::open(root.join("target/debug/ordered"), &Default::default())
        .unwrap();
    let mangled = |i: usize| -> String {
        let short = format!("ordered::work{i}");
        info.functions
            .iter()
            .flat_map(|f| f.names.iter())
            .find(|n| coldstart_elf::demangle(n) == short)
            .unwrap_or_else(|| panic!("{short} not in the binary"))
            .clone()
    };
    let names: Vec<String> = [20, 5, 13, 1].into_iter().map(mangled).collect();
    assert!(!is_rising(&addresses(&root.join("target/debug/ordered"), &names)));
    let order = root.join("order.txt");
    std::fs::write(&order, names.join("\n") + "\n").unwrap();
    build(Some(&order));
    assert!(is_rising(&addresses(&root.join("target/debug/ordered"), &names)));
}

#[test]
fn analyze_tells_function_sections_from_emitted_relocations() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from(
        "static __attribute__((noinline)) int a(int x) { return x + 1; }\n\
         static __attribute__((noinline)) int b(int x) { return a(x) * 2; }\n",
    );
    for i in 1..=12 {
        src.push_str(&format!(
            "static __attribute__((noinline)) int s{i}(int x) {{ return b(x) + {i}; }}\n"
        ));
    }
    src.push_str("int main(int c, char **v) { (void)v; return 0");
    for i in 1..=12 {
        src.push_str(&format!(" + s{i}(c)"));
    }
    src.push_str("; }\n");
    let c = dir.path().join("fs.c");
    std::fs::write(&c, &src).unwrap();
    let own_sections = |extra: &[&str], out: &str| -> String {
        let exe = dir.path().join(out);
        let ok = Command::new(CLANG)
            .args(["-O1", "-fuse-ld=lld", "-Wl,--emit-relocs"])
            .args(extra)
            .arg(&c)
            .arg("-o")
            .arg(&exe)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let out = coldstart().arg("analyze").arg(&exe).arg("--json").output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["static"]["function_sections"].as_str().unwrap().to_owned()
    };
    assert!(own_sections(&["-ffunction-sections"], "with").starts_with("likely"));
    assert!(own_sections(&[], "without").starts_with("unknown"));
}

#[test]
fn order_if_decayed_keeps_an_order_that_holds_and_orders_again_when_start_up_drifted() {
    let dir = tempfile::tempdir().unwrap();
    // 400 functions of about 450 bytes over some 45 pages; start-up calls every 40th.
    let hot: Vec<usize> = (0..400).step_by(40).collect();
    std::fs::write(dir.path().join("prog.c"), program(400, &hot)).unwrap();
    let exe = dir.path().join("prog");
    let build = |order: Option<&Path>| {
        let args = [CLANG, "-O1", "-g0", "-ffunction-sections", "prog.c", "-o", "prog"];
        match order {
            None => {
                let mut cmd = Command::new(args[0]);
                assert!(cmd.current_dir(dir.path()).args(&args[1..]).status().unwrap().success());
            }
            Some(o) => {
                coldstart()
                    .current_dir(dir.path())
                    .arg("link")
                    .arg("--order")
                    .arg(o)
                    .arg("--")
                    .args(args)
                    .assert()
                    .success();
            }
        }
    };
    build(None);
    let a = profile(&dir.path().join("a.json"), "a", &exe, &hot_names(&hot));
    let order = dir.path().join("order.txt");
    let if_decayed = |p: &Path| {
        let mut cmd = coldstart();
        cmd.arg("order").arg(p).arg("--binary").arg(&exe);
        cmd.args(["--if-decayed", "--readahead", "0", "-o"]).arg(&order);
        cmd.assert()
    };
    // No order yet: the first one is written.
    if_decayed(&a).success().stderr(predicate::str::contains("writing the first order"));
    build(Some(&order));
    // Linked with it, start-up reads about what its own order would: the file is kept as is.
    let kept = format!("{}# committed\n", std::fs::read_to_string(&order).unwrap());
    std::fs::write(&order, &kept).unwrap();
    if_decayed(&a).success().stderr(predicate::str::contains("the order holds"));
    assert_eq!(std::fs::read_to_string(&order).unwrap(), kept);
    // The program changed: start-up now runs other functions, scattered in the cold code.
    let moved: Vec<usize> = (20..400).step_by(40).collect();
    let b = profile(&dir.path().join("b.json"), "b", &exe, &hot_names(&moved));
    if_decayed(&b).success().stderr(predicate::str::contains("the order has decayed"));
    let new = std::fs::read_to_string(&order).unwrap();
    assert!(!new.contains("# committed") && new.contains("f20\n"), "{new}");
    // A bar below 1 would always order again.
    coldstart()
        .arg("order")
        .arg(&b)
        .arg("--binary")
        .arg(&exe)
        .args(["--if-decayed", "--decay-bar", "0.5", "-o"])
        .arg(&order)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--decay-bar 0.5"));
}

/// `analyze` of an ELF file whose `.text` says it is 0xc7000000000020 bytes allocated that much
/// and aborted (SIGABRT, exit 134): a file that does not hold its own sections is bad input.
#[test]
fn analyze_of_an_elf_whose_text_lies_past_its_end_is_bad_input_not_an_abort() {
    let d = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read("/usr/bin/true").unwrap();
    coldstart_testkit::patch_elf_section(
        &mut bytes,
        ".text",
        coldstart_testkit::SectionField::Size,
        0xc7000000000020,
    );
    let bad = d.path().join("true");
    std::fs::write(&bad, &bytes).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_coldstart")).arg("analyze").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("malformed") && stderr.contains(".text"), "{stderr}");
}

/// A profile whose page access says 2^40 pages made `analyze` push page after page until the
/// machine's memory ran out; sizes past any file are refused when the profile is read.
#[test]
fn analyze_with_a_profile_of_2_40_pages_is_bad_input_not_an_endless_allocation() {
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    let profile = d.path().join("p.json");
    std::fs::write(
        &profile,
        r#"{"format": "coldstart-profile", "version": 1, "workload": "w", "command": ["true"],
            "created_unix": 0, "duration_ns": 1, "stop": {"kind": "exit", "code": 0},
            "modules": [], "pages": {"source": "tracefs", "sampled": false,
            "files": [{"path": "/usr/bin/true", "size": 4096, "mtime": 0, "build_id": null,
                       "dev": "0:1", "ino": 1}],
            "accesses": [{"file": 0, "page": 0, "count": 1099511627776, "t_ns": 1,
                          "event": "read", "pid": 1}]}}"#,
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_coldstart"));
    cmd.arg("analyze").arg("/usr/bin/true").arg("--profile").arg(&profile);
    // SAFETY: setrlimit is async-signal-safe. 2 GiB: a run that grows without bound fails.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 2 << 30, rlim_max: 2 << 30 };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let (out, took) = common::faults::bounded(&mut cmd, std::time::Duration::from_secs(60));
    let out = out.unwrap_or_else(|| panic!("still running after {took:?}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not a valid coldstart profile") && stderr.contains("pages"),
        "{stderr}"
    );
}
