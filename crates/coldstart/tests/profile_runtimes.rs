//! `coldstart profile` under the default (audit) tracer on programs that treat their own code
//! as a runtime does: copying it as data (V8's embedded builtins, which Node.js copies into
//! its code range) and making it read-only again (Node.js `--use-largepages`). Node.js and
//! OpenJDK themselves are in `real_programs_profile.rs`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use coldstart_testkit::compile_c;
use serde_json::Value;

/// `coldstart profile FLAGS -o DIR/p.json -- PROGRAM`: exit code, standard output, standard
/// error and the profile.
fn profile(dir: &Path, flags: &[&str], program: &Path) -> (Option<i32>, String, String, Value) {
    let out = dir.join("p.json");
    let run = common::profile_to(flags, &out, [program]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let text =
        std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("no profile ({e}): {stderr}"));
    (
        run.status.code(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
        stderr,
        serde_json::from_str(&text).unwrap(),
    )
}

/// Compile `source` into DIR/NAME as the profile tests do (no debug information, no inlining).
fn program(dir: &Path, name: &str, source: &str) -> PathBuf {
    compile_c(dir, name, source, &["-g0", "-fno-inline", "-fuse-ld=lld"])
}

/// The program ran to the end under the audit tracer, as it runs alone, with no fallback to
/// ptrace; the functions of `program`'s own module, in first-touch order.
fn ran_under_the_agent(program: &Path, expected_stdout: &str) -> Vec<String> {
    let plain = Command::new(program).output().unwrap();
    assert_eq!(plain.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&plain.stdout), expected_stdout);
    let dir = program.parent().unwrap();
    let (code, stdout, stderr, p) = profile(dir, &[], program);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with(expected_stdout), "the program's output: {stdout}");
    assert!(!stderr.contains("ptrace"), "no fallback to the ptrace tracer: {stderr}");
    assert_eq!(p["stop"]["kind"], "exit", "{}", p["stop"]);
    assert_eq!(p["stop"]["code"], 0);
    let modules = p["modules"].as_array().unwrap();
    // The audit tracer does not profile the dynamic loader (the ptrace tracer does).
    assert!(
        !modules.iter().any(|m| m["path"].as_str().unwrap().contains("/ld-linux")),
        "recorded by the audit tracer"
    );
    functions_of(&p, program)
}

/// The functions of `program`'s own module in the profile `p`, in first-touch order.
fn functions_of(p: &Value, program: &Path) -> Vec<String> {
    p["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| Path::new(m["path"].as_str().unwrap()) == program)
        .flat_map(|m| m["functions"].as_array().unwrap().iter())
        .map(|f| f["names"][0].as_str().unwrap().to_owned())
        .collect()
}

/// Where `name` is in `functions` (first-touch order).
fn position(functions: &[String], name: &str) -> usize {
    functions
        .iter()
        .position(|f| f == name)
        .unwrap_or_else(|| panic!("{name} not in {functions:?}"))
}

/// Functions laid out as V8 lays out its embedded builtins (the `embedded.S` it generates):
/// one blob of code from `v8_Test_embedded_blob_code_`, of the size stored at
/// `v8_Test_embedded_blob_code_size_`, which the program copies and runs from the copy, as V8
/// does when it moves its builtins near the code it generates.
const COPIED_BUILTINS: &str = r#"
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
__asm__(".text\n.p2align 6\nv8_Test_embedded_blob_code_:\n"
        ".type Builtins_Add,@function\nBuiltins_Add:\nlea (%rdi,%rsi),%eax\nret\n"
        ".size Builtins_Add,.-Builtins_Add\n.p2align 5\n"
        ".type Builtins_Twice,@function\nBuiltins_Twice:\nlea (%rdi,%rdi),%eax\nret\n"
        ".size Builtins_Twice,.-Builtins_Twice\n.p2align 5\nblob_end:\n"
        ".section .rodata\n.p2align 2\nv8_Test_embedded_blob_code_size_:\n"
        ".long blob_end - v8_Test_embedded_blob_code_\n.text\n");
extern const unsigned char v8_Test_embedded_blob_code_[], Builtins_Add[], Builtins_Twice[];
extern const unsigned int v8_Test_embedded_blob_code_size_;
int before_the_copy(int x) { return x - 1; }
int after_the_copy(int x) { return x + 1; }
int main(void) {
    unsigned n = v8_Test_embedded_blob_code_size_;
    const unsigned char *blob = v8_Test_embedded_blob_code_;
    unsigned char *copy = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(copy, blob, n);
    mprotect(copy, n, PROT_READ | PROT_EXEC);
    int (*add)(int, int) = (int (*)(int, int))(copy + (Builtins_Add - blob));
    int (*twice)(int) = (int (*)(int))(copy + (Builtins_Twice - blob));
    printf("%d\n", after_the_copy(twice(add(before_the_copy(2), 3))));
    return 0;
}
"#;

#[test]
fn code_a_runtime_copies_as_data_gets_no_breakpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program(dir.path(), "copied_builtins", COPIED_BUILTINS);
    let functions = ran_under_the_agent(&prog, "9\n");
    let at = |name: &str| position(&functions, name);
    assert!(at("main") < at("before_the_copy") && at("before_the_copy") < at("after_the_copy"));
    // The blob's functions had no breakpoint: they ran, but only from the copy.
    assert!(!functions.iter().any(|f| f.starts_with("Builtins_")), "{functions:?}");
    // Nor under ptrace, whose breakpoints the copy carried too (the program died of SIGTRAP
    // there, and the fallback blamed the program).
    let (code, _, stderr, p) = profile(dir.path(), &["--tracer", "ptrace"], &prog);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(p["stop"]["code"], 0, "{}", p["stop"]);
    let functions = functions_of(&p, &prog);
    assert!(position(&functions, "before_the_copy") < position(&functions, "after_the_copy"));
    assert!(!functions.iter().any(|f| f.starts_with("Builtins_")), "{functions:?}");
}

/// A program that makes the page of a function it has not called yet read-only and
/// executable again, as Node.js `--use-largepages=on` does with its whole text after moving
/// it into huge pages, then calls it; and asks for a protection the kernel refuses, which
/// must fail as it fails alone (-1, `EINVAL`).
const TEXT_MADE_READ_ONLY: &str = r#"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int called_after(int x) { return x * 3; }
int main(void) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)called_after & ~(page - 1);
    if (mprotect((void *)lo, page, PROT_READ | PROT_EXEC) != 0) return 2;
    int refused = mprotect((void *)(lo + 1), page, PROT_READ | PROT_EXEC);
    printf("%d %d %d\n", called_after(2), refused, errno == EINVAL);
    return 0;
}
"#;

#[test]
fn text_a_program_makes_read_only_again_keeps_its_breakpoints_working() {
    let dir = tempfile::tempdir().unwrap();
    let prog = program(dir.path(), "text_read_only", TEXT_MADE_READ_ONLY);
    let functions = ran_under_the_agent(&prog, "6 -1 1\n");
    assert!(position(&functions, "main") < position(&functions, "called_after"));
}
