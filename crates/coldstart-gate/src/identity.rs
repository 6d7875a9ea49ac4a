//! What a gate compares with what: the command, the program it runs and the directory it runs
//! in must be the baseline's, or the gate refuses before measuring anything.
//!
//! A gate of `node -e 0` against a baseline of `node app.js` measures another start-up; so does
//! one run from another directory (`app.js` is another file there), and one of `/usr/bin/node`
//! after the package was upgraded under it: comparing those is no verdict on a change, and a
//! "not slower" after minutes of runs hides that. So a baseline records:
//!
//! - the **command** (argv; the first word as typed, resolved through `PATH` when run);
//! - the **program** it runs: that first word resolved through `PATH` and symbolic links, and
//!   its GNU **build-id** (for a script, its `#!` interpreter's);
//! - the **working directory**.
//!
//! A gate with another command, program path or working directory exits 2 unless
//! `--other-command` says that is meant; one whose program is another build exits 2 unless
//! `--new-build` says so. The two are apart because a CI job gating its own program compares a
//! new build with a baseline of the old one by design (same path, same directory, another
//! build-id: one flag, `--new-build`), while a system program that changed under an unchanged
//! command (a silent upgrade) must not pass for the same program.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::GateError;

/// The program a command runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// The first word resolved through `PATH` and symbolic links.
    pub path: String,
    /// The GNU build-id of the executable that runs (the script's interpreter for a `#!`
    /// script), in hex; `null` when it has none.
    pub build_id: Option<String>,
    /// The `#!` interpreter when the program is a script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
}

/// What the user said may differ from the baseline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allow {
    /// `--new-build`: the program may be another build (a CI job gating its own program).
    pub new_build: bool,
    /// `--other-command`: the command, the program's path and the working directory may
    /// differ.
    pub other_command: bool,
}

/// The program `command` runs, as [`Program`] records it.
pub fn program_of(command: &[String]) -> Result<Program, GateError> {
    let found = coldstart_measure::launch::resolve_program(command)
        .map_err(|e| GateError::Measure(coldstart_measure::measure::MeasureError::Launch(e)))?;
    let path = std::fs::canonicalize(&found).unwrap_or(found);
    let interpreter = shebang(&path);
    let runs = interpreter
        .as_deref()
        .map_or(path.clone(), |i| std::fs::canonicalize(i).unwrap_or_else(|_| PathBuf::from(i)));
    Ok(Program {
        path: path.display().to_string(),
        build_id: build_id(&runs),
        interpreter: interpreter.map(|_| runs.display().to_string()),
    })
}

/// The interpreter a `#!` script names.
fn shebang(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    text.split_whitespace().next().map(str::to_string)
}

fn build_id(path: &Path) -> Option<String> {
    if !coldstart_elf::is_elf(path) {
        return None;
    }
    let options = coldstart_elf::SymbolOptions { debug_roots: Vec::new(), use_debug_files: false };
    coldstart_elf::ElfInfo::open(path, &options).ok()?.build_id_hex()
}

/// The working directory, as recorded.
pub fn cwd() -> Option<String> {
    std::env::current_dir().ok().map(|d| d.display().to_string())
}

/// What one side of the comparison is: a baseline's command, program and directory, or a
/// gate's.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub command: &'a [String],
    pub program: Option<&'a Program>,
    pub cwd: Option<&'a str>,
}

/// Refuse a gate whose command, program or directory is not the baseline's (`path`), unless
/// `allow` says so. Returns what could not be checked (a baseline recorded before these were),
/// as warnings.
pub fn check(
    base: Side<'_>,
    now: Side<'_>,
    path: &Path,
    allow: Allow,
) -> Result<Vec<String>, GateError> {
    let mut warnings = Vec::new();
    let words = |c: &[String]| c.join(" ");
    let refuse = |what: &str, baseline: String, now: String, flag: &'static str| {
        Err(GateError::Identity {
            path: path.to_owned(),
            what: what.to_string(),
            baseline,
            now,
            flag,
        })
    };
    if !allow.other_command {
        // The first word as typed may differ (`node`, `/usr/bin/node`) when it resolves to the
        // same program; the arguments may not.
        let same_program = match (base.program, now.program) {
            (Some(b), Some(n)) => b.path == n.path,
            _ => base.command.first() == now.command.first(),
        };
        if base.command.get(1..) != now.command.get(1..) || !same_program {
            let with = |c: &[String], p: Option<&Program>| match p {
                Some(p) if c.first().map(String::as_str) != Some(p.path.as_str()) => {
                    format!("`{}` ({})", words(c), p.path)
                }
                _ => format!("`{}`", words(c)),
            };
            return refuse(
                "command",
                with(base.command, base.program),
                with(now.command, now.program),
                "--other-command",
            );
        }
        match (base.cwd, now.cwd) {
            (Some(b), Some(n)) if b != n => {
                return refuse("working directory", b.to_string(), n.to_string(), "--other-command")
            }
            (None, _) => warnings.push(
                "the baseline does not record its working directory (recorded by an older coldstart): not checked"
                    .into(),
            ),
            _ => {}
        }
    }
    if !allow.new_build {
        match (base.program, now.program) {
            (Some(b), Some(n)) if b.build_id != n.build_id => {
                let id = |p: &Program| {
                    let who = p.interpreter.as_deref().unwrap_or(&p.path);
                    match &p.build_id {
                        Some(id) => format!("{who} build-id {id}"),
                        None => format!("{who} without a build-id"),
                    }
                };
                return refuse("program build", id(b), id(n), "--new-build");
            }
            (None, _) => warnings.push(
                "the baseline does not record its program's build-id (recorded by an older coldstart): not checked"
                    .into(),
            ),
            _ => {}
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    fn program(path: &str, id: &str) -> Program {
        Program { path: path.into(), build_id: Some(id.into()), interpreter: None }
    }

    #[test]
    fn another_command_is_refused_naming_both_and_the_flag() {
        let (b, n) = (s(&["node", "app.js"]), s(&["node", "-e", "0"]));
        let p = program("/usr/bin/node", "ab");
        let side = |c| Side { command: c, program: Some(&p), cwd: Some("/app") };
        let e = check(side(&b), side(&n), Path::new("b.json"), Allow::default()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("node app.js") && text.contains("node -e 0"), "{text}");
        assert!(text.contains("--other-command"), "{text}");
        assert_eq!(e.category(), coldstart_error::Category::Usage);
        let allow = Allow { other_command: true, ..Allow::default() };
        assert!(check(side(&b), side(&n), Path::new("b.json"), allow).is_ok());
        // The same program typed another way is the same command.
        let full = s(&["/usr/bin/node", "app.js"]);
        assert!(check(side(&b), side(&full), Path::new("b.json"), Allow::default()).is_ok());
    }

    #[test]
    fn another_directory_or_program_path_is_another_command() {
        let c = s(&["python3", "-c", "pass"]);
        let (p, q) = (program("/usr/bin/python3.11", "ab"), program("/opt/py/bin/python3", "ab"));
        let base = Side { command: &c, program: Some(&p), cwd: Some("/a") };
        let moved = Side { cwd: Some("/b"), ..base };
        let e = check(base, moved, Path::new("b.json"), Allow::default()).unwrap_err();
        assert!(e.to_string().contains("/a") && e.to_string().contains("/b"), "{e}");
        let other = Side { program: Some(&q), ..base };
        let e = check(base, other, Path::new("b.json"), Allow::default()).unwrap_err();
        assert!(e.to_string().contains("/opt/py/bin/python3"), "{e}");
    }

    #[test]
    fn another_build_needs_new_build_and_only_that() {
        let c = s(&["./build/app"]);
        let (old, new) = (program("/ci/build/app", "aaaa"), program("/ci/build/app", "bbbb"));
        let base = Side { command: &c, program: Some(&old), cwd: Some("/ci") };
        let now = Side { program: Some(&new), ..base };
        let e = check(base, now, Path::new("b.json"), Allow::default()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("aaaa") && text.contains("bbbb") && text.contains("--new-build"),
            "{text}"
        );
        let ci = Allow { new_build: true, ..Allow::default() };
        assert!(check(base, now, Path::new("b.json"), ci).is_ok());
        // --new-build does not let another command through.
        let other = s(&["./build/app", "--version"]);
        let e = check(base, Side { command: &other, ..now }, Path::new("b.json"), ci).unwrap_err();
        assert!(e.to_string().contains("--other-command"), "{e}");
    }

    #[test]
    fn an_older_baseline_is_checked_as_far_as_it_can_be() {
        let c = s(&["/bin/true"]);
        let p = program("/usr/bin/true", "ab");
        let base = Side { command: &c, program: None, cwd: None };
        let now = Side { command: &c, program: Some(&p), cwd: Some("/") };
        let w = check(base, now, Path::new("b.json"), Allow::default()).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
    }

    #[test]
    fn this_machines_programs_have_build_ids_and_scripts_their_interpreters() {
        let p = program_of(&s(&["/bin/true"])).unwrap();
        assert!(p.path.ends_with("true"), "{p:?}");
        assert!(p.build_id.is_some(), "{p:?}");
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = program_of(&[script.display().to_string()]).unwrap();
        assert!(p.interpreter.is_some(), "{p:?}");
    }
}
