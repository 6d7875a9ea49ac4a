//! Layout for workloads nobody profiled: the untouched functions the touched ones call are
//! placed right after them, the default order covers the program's own shared libraries,
//! and `link` verifies every module ordered. Small C programs compiled here with clang-19
//! and linked with lld.

use std::path::{Path, PathBuf};

use assert_cmd::Command as Cli;

mod common;

const CLANG: &str = "clang-19";

fn coldstart() -> Cli {
    Cli::cargo_bin("coldstart").unwrap()
}

/// `n` cold functions named `PREFIX{i}` of about 450 bytes of instructions each.
fn filler(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "__attribute__((noinline)) int {prefix}{i}(int x) {{ __asm__ volatile(\".rept 150\\n\\taddl $1, %%eax\\n\\t.endr\" ::: \"eax\"); return x + {i}; }}\n"
            )
        })
        .collect()
}

/// A library (`libown.so`) and an executable (`prog`) using it. Start-up (workload a) runs
/// `main`, `f3` and the library's `lib_hot`; another workload would also run `feature_b`
/// (on a branch a never takes), which calls `deep_b` and the library's `lib_feature`.
/// Every function is separated from the next by cold filler.
fn sources(dir: &Path) {
    let mut lib = filler("lib_cold_a", 12);
    lib.push_str("__attribute__((noinline)) int lib_feature(int x) { return x * 7; }\n");
    lib.push_str(&filler("lib_cold_b", 12));
    lib.push_str("__attribute__((noinline)) int lib_hot(int x) { return x + 5; }\n");
    std::fs::write(dir.join("lib.c"), lib).unwrap();
    let mut exe = String::from("#include <stdio.h>\nint lib_hot(int);\nint lib_feature(int);\n");
    exe.push_str(&filler("cold_a", 12));
    exe.push_str("__attribute__((noinline)) int deep_b(int x) { return x * 3; }\n");
    exe.push_str(&filler("cold_b", 12));
    exe.push_str(
        "__attribute__((noinline)) int feature_b(int x) { return deep_b(x) + lib_feature(x); }\n",
    );
    exe.push_str(&filler("f", 8));
    exe.push_str(
        "int main(int argc, char **argv) { int s = f3(argc); (void)argv;\n\
         s += lib_hot(s);\n  if (argc > 100) s += feature_b(s);\n  printf(\"%d\\n\", s); return 0; }\n",
    );
    std::fs::write(dir.join("main.c"), exe).unwrap();
}

/// The shell line building both with the C compiler (`coldstart link` adds its flags).
fn build_line(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "{CLANG} -O1 -g0 -ffunction-sections -fuse-ld=lld -fPIC -shared -o {d}/libown.so {d}/lib.c && \
         {CLANG} -O1 -g0 -ffunction-sections -fuse-ld=lld -o {d}/prog {d}/main.c -L{d} -lown -Wl,-rpath,{d}"
    )
}

/// Workload a's profile: `main`, `f3` in the executable, `lib_hot` in the library.
fn profile_a(dir: &Path) -> PathBuf {
    let exe = dir.join("prog");
    let lib = dir.join("libown.so");
    let mut p = common::touch_profile("a", &exe, &["main".into(), "f3".into()], 1000);
    let l = common::touch_profile("a", &lib, &["lib_hot".into()], 1000);
    p.modules.extend(l.modules);
    let path = dir.join("a.json");
    p.write(&path).unwrap();
    path
}

/// The function names of `binary` in address order.
fn address_order(binary: &Path) -> Vec<String> {
    let info = coldstart_elf::ElfInfo::open(binary, &Default::default()).unwrap();
    info.functions.iter().map(|f| f.names[0].clone()).collect()
}

fn listed(order: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(order).unwrap();
    text.lines().filter(|l| !l.starts_with('#')).map(str::to_owned).collect()
}

fn build(dir: &Path) {
    let out = std::process::Command::new("sh").arg("-c").arg(build_line(dir)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A temporary directory with the library and the executable of [`sources`] built in it.
fn built() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sources(dir.path());
    build(dir.path());
    dir
}

#[test]
fn an_unprofiled_function_a_profiled_one_calls_directly_is_placed_right_after_the_hot_set() {
    let dir = built();
    let d = dir.path();
    let a = profile_a(d);
    let order = d.join("order.txt");
    common::order_for(&a, &d.join("prog")).arg("-o").arg(&order).assert().success();
    // Module by module, the touched functions, then what they call that no one touched,
    // nearest first: feature_b (main calls it), then deep_b; lib_feature (feature_b calls
    // it through the PLT) after the library's lib_hot.
    assert_eq!(listed(&order), ["main", "f3", "feature_b", "deep_b", "lib_hot", "lib_feature"]);

    // Relinked with it, feature_b sits right after the hot set, deep_b right after it.
    common::link_with(&order, &d.join("prog"))
        .args(["--", "sh", "-c", &build_line(d)])
        .assert()
        .success();
    let exe = address_order(&d.join("prog"));
    let at = |n: &str| exe.iter().position(|x| x == n).unwrap_or_else(|| panic!("{n}: {exe:?}"));
    assert_eq!(
        (at("f3"), at("feature_b"), at("deep_b")),
        (at("main") + 1, at("main") + 2, at("main") + 3),
        "{exe:?}"
    );

    // `--unprofiled input` leaves them where the linker puts them.
    let out = coldstart()
        .arg("order")
        .arg(&a)
        .args(["--unprofiled", "input"])
        .arg("-o")
        .arg(&order)
        .assert()
        .success();
    drop(out);
    assert_eq!(listed(&order), ["main", "f3", "lib_hot"]);
}

#[test]
fn the_default_order_covers_the_programs_own_libraries_and_link_verifies_every_module() {
    let dir = built();
    let d = dir.path();
    let a = profile_a(d);
    let order = d.join("order.txt");
    // No --binary, no --module: every module of the program outside the system
    // directories; libc (a system library) is never listed.
    coldstart().arg("order").arg(&a).arg("-o").arg(&order).assert().success();
    let names = listed(&order);
    assert!(
        names.contains(&"lib_hot".to_owned()) && names.contains(&"main".to_owned()),
        "{names:?}"
    );
    // --module narrows it to one.
    let narrow = d.join("narrow.txt");
    coldstart()
        .arg("order")
        .arg(&a)
        .args(["--module", "libown.so", "-o"])
        .arg(&narrow)
        .assert()
        .success();
    assert_eq!(listed(&narrow), ["lib_hot", "lib_feature"]);

    // Before relinking, the library's hot function lies after its cold ones: verify fails.
    coldstart().arg("verify").arg(d.join("libown.so")).arg("--order").arg(&order).assert().code(1);
    // One link of both modules; `link` verifies each binary given, and both pass.
    let out = common::link_with(&order, &d.join("prog"))
        .arg("--binary")
        .arg(d.join("libown.so"))
        .args(["--", "sh", "-c", &build_line(d)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("took effect").count(), 2, "{stdout}");
    let lib = address_order(&d.join("libown.so"));
    let at = |n: &str| lib.iter().position(|x| x == n).unwrap();
    assert_eq!(at("lib_feature"), at("lib_hot") + 1, "{lib:?}");
    coldstart()
        .arg("verify")
        .arg(d.join("libown.so"))
        .arg("--order")
        .arg(&order)
        .assert()
        .success();
}

#[test]
fn references_place_the_functions_of_a_table_the_touched_code_uses_and_callees_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut src = String::from("#include <stdio.h>\n");
    src.push_str(&filler("cold", 12));
    src.push_str("__attribute__((noinline)) int on_b(int x) { return x * 5; }\n");
    src.push_str(&filler("colder", 12));
    src.push_str("__attribute__((noinline)) int on_a(int x) { return x + 1; }\n");
    src.push_str(
        "int (*const handlers[])(int) = { on_a, on_b };\n\
         int main(int argc, char **argv) { (void)argv; printf(\"%d\\n\", handlers[argc > 100](argc)); return 0; }\n",
    );
    std::fs::write(d.join("t.c"), src).unwrap();
    let out = std::process::Command::new(CLANG)
        .args(["-O1", "-g0", "-ffunction-sections", "-fuse-ld=lld", "-o"])
        .arg(d.join("table"))
        .arg(d.join("t.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exe = d.join("table");
    let mut p = common::touch_profile("a", &exe, &["main".into(), "on_a".into()], 1000);
    p.modules.truncate(1);
    let a = d.join("a.json");
    p.write(&a).unwrap();
    let order = d.join("order.txt");
    let listed_with = |placement: &str| {
        coldstart()
            .arg("order")
            .arg(&a)
            .args(["--unprofiled", placement, "-o"])
            .arg(&order)
            .assert()
            .success();
        listed(&order)
    };
    // main calls through the table: no direct call reaches on_b, the table does.
    assert_eq!(listed_with("callees"), ["main", "on_a"]);
    assert_eq!(listed_with("references"), ["main", "on_a", "on_b"]);
}

#[test]
fn with_two_training_workloads_each_held_out_in_turn_decides_where_untouched_code_goes() {
    let dir = built();
    let d = dir.path();
    let exe = d.join("prog");
    // a runs main and f3; a2 also runs feature_b and deep_b, which main calls on a branch a
    // never takes: trained on a, a2's extra functions are main's callees.
    let profile = |name: &str, funcs: &[&str]| {
        let names: Vec<String> = funcs.iter().map(|f| (*f).to_owned()).collect();
        let path = d.join(format!("{name}.json"));
        common::touch_profile(name, &exe, &names, 1000).write(&path).unwrap();
        path
    };
    let a = profile("a", &["main", "f3"]);
    let a2 = profile("a2", &["main", "f3", "feature_b", "deep_b"]);
    let out = coldstart()
        .arg("order")
        .arg(&a)
        .arg(&a2)
        .arg("--binary")
        .arg(&exe)
        .args(["--readahead", "0", "-o"])
        .arg(d.join("order.txt"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Held out, a2 touches feature_b and deep_b on one page beside main with the callees
    // placed, on pages of their own without: the callees win.
    assert!(
        stderr
            .contains("untouched functions after their callers: each of the 2 workloads held out"),
        "{stderr}"
    );
}
