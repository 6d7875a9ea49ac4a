//! Helpers for coldstart's own tests.
//!
//! **Tests that cannot run here.** Many tests need root (cgroups, `drop_caches`, FUSE,
//! tracefs, loop devices) or a tool that `scripts/setup.sh` installs (Xvfb, llvm-bolt). On a
//! developer's machine without them such a test says why and passes without running. Where
//! the suite must run whole, that would hide lost coverage, so `.ci/run` sets
//! [`NO_SKIP_ENV`]: a test that would skip then fails, naming what was missing.
//!
//! ```no_run
//! #[test]
//! fn cold_runs_read_from_disk() {
//!     if !coldstart_testkit::require_root("drop_caches and cgroups") {
//!         return;
//!     }
//!     // ...
//! }
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that turns every skip into a failure (set by `.ci/run`).
pub const NO_SKIP_ENV: &str = "COLDSTART_TESTS_NO_SKIP";

use coldstart_sys::is_root;

/// Whether a skip must fail instead: [`NO_SKIP_ENV`] is set to anything but `0` or empty.
pub fn no_skip() -> bool {
    std::env::var_os(NO_SKIP_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// `true` when the test may run; otherwise says why it does not and returns `false`, or
/// panics under [`NO_SKIP_ENV`].
pub fn require(available: bool, what: &str) -> bool {
    decide(available, what, no_skip())
}

fn decide(available: bool, what: &str, no_skip: bool) -> bool {
    if available {
        return true;
    }
    if no_skip {
        panic!("this test needs {what}, and {NO_SKIP_ENV} says the suite runs whole here");
    }
    eprintln!("skipped: needs {what}");
    false
}

/// [`require`] root, saying what for (`"cgroups and drop_caches"`).
pub fn require_root(what_for: &str) -> bool {
    require(is_root(), &format!("root ({what_for}); run the tests as root"))
}

/// [`require`] a program on `PATH` (installed by `scripts/setup.sh`).
pub fn require_program(program: &str, package: &str) -> bool {
    require(
        which(program).is_some(),
        &format!("`{program}` (apt-get install {package}, or run scripts/setup.sh)"),
    )
}

/// The path of `program` in `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    coldstart_process::find_program(program).ok()
}

/// Sends signal `sig` to process `pid`: a child of the test that it has not waited for yet
/// (its pid is still its own), or a process of the test's own programs. Panics, naming both,
/// if the signal cannot be sent.
pub fn signal(pid: u32, sig: i32) {
    try_signal(pid, sig).unwrap_or_else(|e| panic!("cannot send signal {sig} to pid {pid}: {e}"));
}

/// [`signal`], saying why it could not be sent: for a process that may have ended (and been
/// reaped) in between, where that is no failure.
pub fn try_signal(pid: u32, sig: i32) -> std::io::Result<()> {
    coldstart_process::forward::send(pid, sig)
}

/// Held while a test drops or depends on the page cache: such tests run one at a time, across
/// test binaries and concurrent `cargo test` processes too (an exclusive `flock` on one file).
pub struct CacheLock(fs::File);

/// Take the page-cache lock; released when the guard drops.
pub fn cache_lock() -> CacheLock {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("coldstart-measure-tests.lock"))
        .expect("the page-cache lock file in the temporary directory");
    // Released when the file is closed.
    coldstart_sys::file::lock(&f, coldstart_sys::file::Wait::Block)
        .expect("the page-cache lock (flock)");
    CacheLock(f)
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        let _ = coldstart_sys::file::unlock(&self.0);
    }
}

/// The C compiler the fixtures use (installed by `scripts/setup.sh`).
pub const CC: &str = "clang-19";

/// Compile the C `source` into `dir/name` with `clang-19 -O1 -g` and `args` (`-shared`,
/// `-fPIC`, `-lfoo`, `-Wl,...`), panicking with the compiler's output if it fails.
pub fn compile_c(dir: &Path, name: &str, source: &str, args: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, source).expect("writing a C fixture");
    let out = dir.join(name);
    let result = Command::new(CC)
        .args(["-O1", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {CC}: {e} (run scripts/setup.sh)"));
    assert!(
        result.status.success(),
        "{CC} failed on {name}.c: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_compiles_and_runs() {
        if !require_program(CC, "clang-19") {
            return;
        }
        let dir = std::env::temp_dir().join(format!("coldstart-testkit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let prog = compile_c(&dir, "seven", "int main(void) { return 7; }", &[]);
        assert_eq!(Command::new(&prog).status().unwrap().code(), Some(7));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_signal_reaches_a_child_and_one_to_no_process_says_so() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        signal(child.id(), 15);
        assert_eq!(child.wait().unwrap().signal(), Some(15), "ended by SIGTERM");
        // No process has a pid above i32::MAX.
        assert!(try_signal(u32::MAX, 0).is_err());
        let refused = std::panic::catch_unwind(|| signal(u32::MAX, 15)).unwrap_err();
        let message = refused.downcast_ref::<String>().unwrap();
        assert!(message.contains("signal 15") && message.contains("4294967295"), "{message}");
    }

    #[test]
    fn an_available_requirement_runs_the_test() {
        assert!(require(true, "nothing"));
        assert!(decide(true, "nothing", true));
    }

    #[test]
    fn a_missing_requirement_skips_or_fails_where_the_suite_runs_whole() {
        assert!(!decide(false, "root", false), "skips on a developer's machine");
        let failed = std::panic::catch_unwind(|| decide(false, "root", true)).unwrap_err();
        let message = failed.downcast_ref::<String>().unwrap();
        assert!(message.contains("needs root") && message.contains(NO_SKIP_ENV), "{message}");
    }
}

/// Where in a 64-bit section header [`patch_elf_section`] writes: the address, the file
/// offset or the size.
#[derive(Debug, Clone, Copy)]
pub enum SectionField {
    /// `sh_addr`: where the section is in memory.
    Address = 0x10,
    /// `sh_offset`: where the section is in the file.
    Offset = 0x18,
    /// `sh_size`: the section's size in bytes.
    Size = 0x20,
}

/// `bytes` (a 64-bit little-endian ELF file) with `field` of section `name` set to `value`:
/// the malformed files of the ELF reader's regression tests.
pub fn patch_elf_section(bytes: &mut [u8], name: &str, field: SectionField, value: u64) {
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, size, strndx) = (u64_at(bytes, 0x28), u16_at(bytes, 0x3a), u16_at(bytes, 0x3e));
    let strings = u64_at(bytes, shoff + strndx * size + 0x18);
    for i in 0..u16_at(bytes, 0x3c) {
        let at = shoff + i * size;
        let n = strings + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let end = n + bytes[n..].iter().position(|&b| b == 0).unwrap();
        if &bytes[n..end] == name.as_bytes() {
            let f = at + field as usize;
            bytes[f..f + 8].copy_from_slice(&value.to_le_bytes());
            return;
        }
    }
    panic!("no section {name}");
}

/// Byte-level mutations for the parsers' property tests: a valid input edited a few times, so
/// that most cases are near-valid and reach deep into a parser.
pub mod mutation {
    use proptest::prelude::*;

    /// Edits of a byte string: (position as a fraction of its length, what to do, a byte).
    pub fn edits() -> impl Strategy<Value = Vec<(f64, u8, u8)>> {
        prop::collection::vec((0.0..1.0f64, 0..3u8, any::<u8>()), 1..8)
    }

    /// `base` with `edits` applied: 0 replaces a byte, 1 inserts one, 2 removes one.
    pub fn mutate(base: &[u8], edits: &[(f64, u8, u8)]) -> Vec<u8> {
        let mut b = base.to_vec();
        for &(at, what, byte) in edits {
            let i = ((b.len() as f64) * at) as usize;
            match what {
                0 if i < b.len() => b[i] = byte,
                1 => b.insert(i.min(b.len()), byte),
                _ if i < b.len() => {
                    b.remove(i);
                }
                _ => {}
            }
        }
        b
    }
}
