//! `order --unprofiled siblings` end to end on a C++ program compiled here with clang++-19 and
//! linked with lld: the overrides of a virtual method start-up ran are placed after the hot
//! code, and `--evaluate` scores the placement on a start-up that runs another override.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// A function body of about 450 bytes of real instructions.
const BODY: &str = r#"__asm__ volatile(".rept 150\n\taddl $1, %%eax\n\t.endr" ::: "eax");"#;

/// Three readers overriding `Reader::read`, each defined between twenty fillers, so that in
/// input order they lie pages apart; `main` picks one by its argument count.
fn program() -> String {
    let mut s = String::from(
        "#include <cstdio>\n\
         struct Reader { virtual int read(int) const = 0; virtual ~Reader() {} };\n\
         struct Elf : Reader { int read(int) const override; };\n\
         struct Coff : Reader { int read(int) const override; };\n\
         struct Macho : Reader { int read(int) const override; };\n",
    );
    let filler = |s: &mut String, from: usize| {
        for i in from..from + 20 {
            s.push_str(&format!(
                "__attribute__((noinline)) int filler{i}(int x) {{ {BODY} return x + {i}; }}\n"
            ));
        }
    };
    for (k, class) in ["Elf", "Coff", "Macho"].iter().enumerate() {
        filler(&mut s, k * 20);
        s.push_str(&format!("int {class}::read(int x) const {{ {BODY} return x * {}; }}\n", k + 2));
    }
    filler(&mut s, 60);
    s.push_str(&format!(
        "__attribute__((noinline)) int helper(int x) {{ {BODY} return x - 1; }}\n\
         int main(int argc, char **argv) {{ (void)argv;\n\
         Reader *r = argc == 2 ? (Reader *)new Coff : argc == 3 ? (Reader *)new Macho : (Reader *)new Elf;\n\
         int s = helper(r->read(argc)); printf(\"%d\\n\", s); delete r; return 0; }}\n"
    ));
    s
}

fn build(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("readers.cc"), program()).unwrap();
    let out = Command::new("clang++-19")
        .current_dir(dir)
        .args(["-O1", "-g0", "-ffunction-sections", "-fuse-ld=lld", "readers.cc", "-o", "readers"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("readers")
}

/// The names an order file lists, in its order.
fn listed(order: &Path) -> Vec<String> {
    std::fs::read_to_string(order)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_owned)
        .collect()
}

const ELF_READ: &str = "_ZNK3Elf4readEi";
const COFF_READ: &str = "_ZNK4Coff4readEi";
const MACHO_READ: &str = "_ZNK5Macho4readEi";

#[test]
fn siblings_places_the_other_overrides_of_a_virtual_method_start_up_ran() {
    if !common::require_program("clang++-19", "clang-19") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    // Start-up a (no argument) reads with Elf; b (one argument) with Coff.
    let names = |read: &str| -> Vec<String> {
        ["main", read, "helper"].iter().map(|s| s.to_string()).collect()
    };
    let a = dir.path().join("a.json");
    common::touch_profile("a", &exe, &names(ELF_READ), 1000).write(&a).unwrap();
    let b = dir.path().join("b.json");
    common::touch_profile("b", &exe, &names(COFF_READ), 1000).write(&b).unwrap();

    let order = |unprofiled: &str| {
        let out = dir.path().join(format!("{unprofiled}.order"));
        common::order_for(&a, &exe)
            .args(["--unprofiled", unprofiled, "-o"])
            .arg(&out)
            .assert()
            .success()
            .stderr(predicates::str::contains(match unprofiled {
                "siblings" => "untouched that they call, then their siblings",
                _ => "untouched that they call;",
            }));
        listed(&out)
    };
    let callees = order("callees");
    let siblings = order("siblings");
    // The call graph does not reach the other overrides: only the names do.
    assert!(!callees.iter().any(|n| n == COFF_READ || n == MACHO_READ), "{callees:?}");
    let at = |n: &str| siblings.iter().position(|x| x == n);
    let (elf, coff, macho) = (at(ELF_READ), at(COFF_READ), at(MACHO_READ));
    assert!(elf.is_some() && coff.is_some() && macho.is_some(), "{siblings:?}");
    // After the touched functions and their callees, which keep their places.
    assert_eq!(siblings[..callees.len()], callees[..]);
    assert!(coff.unwrap() >= callees.len() && macho.unwrap() >= callees.len());

    // Scored on b, which reads with Coff: the siblings placement touches fewer code pages.
    let out = common::order_for(&a, &exe)
        .arg("--evaluate")
        .arg(&b)
        .args(["--readahead", "0", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pages = |layout: &str| {
        let rows = e["rows"].as_array().unwrap();
        let row = rows.iter().find(|r| r["layout"] == layout);
        row.unwrap_or_else(|| panic!("no {layout} row in {e}"))["cost"]["pages_touched"]
            .as_u64()
            .unwrap()
    };
    assert!(
        pages("first-touch + siblings") < pages("first-touch + callees"),
        "{}",
        serde_json::to_string_pretty(&e["rows"]).unwrap()
    );
}
