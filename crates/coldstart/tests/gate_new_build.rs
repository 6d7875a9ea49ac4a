//! `coldstart gate --new-build` on real relinks of the sample program (`coldstart sample`,
//! rebuilt with its own Makefile): one more function called at start-up, placed after every
//! other function of the executable, is caught by the code of the functions start-up runs
//! that the baseline's did not (`new_function_bytes`), which a relink does not move as it moves
//! pages; the same sources relinked into another build are not slower. Needs root (cold runs,
//! the storage emulation, page profiles) and clang-19 with lld (the sample's build); fails
//! instead of skipping in CI.

mod common;
use common::{cache_lock, require_program, require_root};

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

use common::{coldstart_in as coldstart, output_text as text};

/// The small sample (seed 1) in a directory of its own under /var/tmp.
struct Sample {
    dir: tempfile::TempDir,
}

impl Sample {
    fn new() -> Sample {
        let dir = tempfile::Builder::new()
            .prefix("coldstart-gate-new-build-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let out = coldstart(&["sample", "--seed", "1", "-o", "s"], dir.path());
        assert!(out.status.success(), "{}", text(&out));
        Sample { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("s")
    }

    fn src(&self, name: &str) -> PathBuf {
        self.root().join("src").join(name)
    }

    /// Rebuild in place with the sample's Makefile, `args` added.
    fn make(&self, args: &[&str]) {
        let out = Command::new("make")
            .args(["-s", "-C", "src", "-B", "-j2"])
            .args(args)
            .current_dir(self.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }

    /// One more function of `statements` statements (35 bytes of code each), after every
    /// other function of the executable (its last object file links last), called first in
    /// workload a's start-up: bench/gate-programs.sh's `far_function`.
    fn add_far_function(&self, statements: usize) {
        let mut exe: Vec<PathBuf> = fs::read_dir(self.root().join("src"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("exe_") && name.ends_with(".c")
            })
            .collect();
        exe.sort();
        let last = exe.last().expect("the sample has exe_*.c files");
        let mut code = String::from("\nCS_NOINLINE void cs_exe_far(void)\n{\n");
        for i in 0..statements as u64 {
            let (d, s) = ((i * 7 + 3) % 64, (i * 13 + 5) % 64);
            let k = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1);
            code.push_str(&format!("    S[{d}] = S[{s}] * 0x{k:016x}ull + 0x{i:04x}ull;\n"));
        }
        code.push_str("}\n");
        let mut text = fs::read_to_string(last).unwrap();
        text.push_str(&code);
        fs::write(last, text).unwrap();
        let decls = fs::read_to_string(self.src("decls.h")).unwrap();
        let at = decls.rfind("#endif").expect("decls.h ends with #endif");
        fs::write(
            self.src("decls.h"),
            format!("{}void cs_exe_far(void);\n{}", &decls[..at], &decls[at..]),
        )
        .unwrap();
        let startup = fs::read_to_string(self.src("startup_a.c")).unwrap();
        let head = "CS_NOINLINE void cs_startup_a(const char *dir)\n{\n";
        assert!(startup.contains(head), "cs_startup_a not found in startup_a.c");
        fs::write(
            self.src("startup_a.c"),
            startup.replacen(head, &format!("{head}    cs_exe_far();\n"), 1),
        )
        .unwrap();
        self.make(&[]);
    }

    /// `coldstart gate --baseline b.json ARGS -- ./sample --workload a`, from the sample's
    /// directory, with the JSON report.
    fn gate(&self, args: &[&str]) -> (Output, Option<Value>) {
        let report = self.dir.path().join("report.json");
        let _ = fs::remove_file(&report);
        let (b, r) = (self.dir.path().join("b.json"), report.display().to_string());
        let b = b.display().to_string();
        let mut all = vec!["gate", "--baseline", &b, "--export-json", &r];
        all.extend(args);
        all.extend(["--", "./sample", "--workload", "a"]);
        let out = coldstart(&all, &self.root());
        let json = fs::read_to_string(&report).ok().map(|t| serde_json::from_str(&t).unwrap());
        (out, json)
    }
}

fn row<'a>(report: &'a Value, figure: &str) -> &'a Value {
    report["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["figure"] == figure)
        .unwrap_or_else(|| panic!("no {figure} in {report:#}"))
}

/// A gate of the default first steps, with few runs for time (time is not what is tested).
const SMALL: [&str; 6] = ["--batch", "5", "--cold-batch", "3", "--max-runs", "10"];

#[test]
fn a_far_function_in_a_relinked_sample_is_caught_by_the_functions_run_and_a_plain_relink_is_not() {
    if !require_root("cold runs, the storage emulation and page profiles")
        || !require_program("clang-19", "clang-19")
        || !require_program("ld.lld-19", "lld-19")
    {
        return;
    }
    let _lock = cache_lock();
    let sample = Sample::new();
    let (out, _) = sample.gate(&["--update", "--runs", "10", "--cold-runs", "5"]);
    assert!(out.status.success(), "{}", text(&out));
    let base: Value =
        serde_json::from_str(&fs::read_to_string(sample.dir.path().join("b.json")).unwrap())
            .unwrap();
    let functions = &base["functions"];
    assert_eq!(functions["profiles"], 3, "{functions:#}");
    // One line a function, by module: "SIZE RUNS NAME".
    let sample_functions = functions["modules"]["sample"].as_array().unwrap();
    assert!(
        sample_functions.iter().any(|f| f.as_str().unwrap().ends_with(" 3 cs_startup_a")),
        "{functions:#}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("new functions run, hot"), "{stdout}");

    // The same sources relinked into another build (another build-id): the same functions
    // run, so no new code, and not slower.
    sample.make(&["LDFLAGS_EXE=-Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567"]);
    let (out, report) = sample.gate(&[&SMALL[..], &["--new-build"][..]].concat());
    let report = report.unwrap_or_else(|| panic!("{}", text(&out)));
    assert_ne!(report["verdict"], "slower", "{}", text(&out));
    let new = row(&report, "new_function_bytes");
    assert_eq!(new["verdict"], "not_slower", "{}", text(&out));
    assert_eq!(new["now"].as_f64(), Some(0.0), "{}", text(&out));

    // One more function of about 12 KiB (3 pages) called at start-up, after every other
    // function of the executable: slower, by the functions run, and named.
    sample.add_far_function(350);
    let (out, report) = sample.gate(&[&SMALL[..], &["--new-build"][..]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = report.unwrap();
    let new = row(&report, "new_function_bytes");
    assert_eq!(new["verdict"], "slower", "{}", text(&out));
    let bytes = new["now"].as_f64().unwrap();
    assert!((10_000.0..16_000.0).contains(&bytes), "{bytes}: {}", text(&out));
    assert!(new["note"].as_str().unwrap().contains("cs_exe_far"), "{new:#}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("new functions run, hot: 0 B ->"), "{stdout}");

    // Without --new-build the new build is refused, as before.
    let (out, _) = sample.gate(&SMALL);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
