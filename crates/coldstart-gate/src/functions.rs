//! The functions start-up runs, by name: what a new build runs that the old one did not.
//!
//! Pages touched are exact for one build, not across a relink: one more function of 18 KB
//! called at start-up moved the code the linker put after it, and the functions start-up
//! touches there packed into 3 fewer pages (5,038 -> 5,040 pages against a limit of 5,040:
//! BENCHMARKS.md, "The far function: caught in 0 of 10"). Which functions run does not
//! depend on where the linker put them. So when the build changed (`--new-build`), a gate
//! takes function profiles (one-shot breakpoints on every function, `coldstart-profile`:
//! about a second for the 47 MB sample and for Node.js) and compares them with those of the
//! baseline by symbol name:
//!
//! - **new code run** ([`Figure::NewFunctionBytes`](crate::figure::Figure::NewFunctionBytes))
//!   is the code bytes (symbol sizes) of the functions a profile now ran that no baseline
//!   profile ran;
//! - its **noise** is learned from the baseline's own profiles: each one's new code against the
//!   others' (leave one out), the functions that threads, timers and JIT compilers make come
//!   and go; the steady rule sets the limit from them, with a floor of two pages
//!   ([`crate::noise`]);
//! - a **renamed** function (one every baseline profile ran and that no longer runs, of the
//!   same size in the same module) is the same code under another name, not new; a function
//!   that **changed** (the same name, another size) is not new either: what it does more is
//!   for CPU time, instructions and time to see, and a rebuild resizes many functions a little;
//! - names are compared with GCC's clone numbers taken off (`f.constprop.0` and
//!   `f.constprop.1` are the same function: the numbers follow the order of compilation).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The functions one profile ran: (module file name, function name) -> code bytes.
pub type FunctionSet = BTreeMap<(String, String), u64>;

/// The functions a profile of `coldstart-profile` records as run, keyed by module file name and
/// normalised name ([`normalize`]); a name's several symbols add up.
pub fn set_of(profile: &coldstart_profile_format::Profile) -> FunctionSet {
    let mut set = FunctionSet::new();
    for m in &profile.modules {
        let module = m
            .path
            .file_name()
            .map_or_else(|| m.path.display().to_string(), |n| n.to_string_lossy().into_owned());
        for f in &m.functions {
            let Some(name) = f.names.first() else { continue };
            *set.entry((module.clone(), normalize(name))).or_insert(0) += f.size;
        }
    }
    set
}

/// A symbol name without GCC's clone numbers: `f.constprop.0` -> `f.constprop`,
/// `g.part.3.lto_priv.0` -> `g.part.lto_priv`.
pub fn normalize(name: &str) -> String {
    let mut parts = name.split('.');
    let mut out = String::from(parts.next().unwrap_or(""));
    for p in parts {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            out.push('.');
            out.push_str(p);
        }
    }
    out
}

/// One function the baseline's profiles ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSeen {
    /// The module's file name (`libc.so.6`, `app`).
    pub module: String,
    /// The symbol name, GCC's clone numbers taken off.
    pub name: String,
    /// Code bytes (its symbols' sizes).
    pub size: u64,
    /// How many of the baseline's profiles ran it.
    pub runs: usize,
}

/// The functions a baseline's profiles ran, each with how many of them ran it. In the file,
/// by module, one line a function: `"SIZE RUNS NAME"` (Node.js's 8,000 functions in a
/// third of the room fields would take).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "FunctionRunsFile", try_from = "FunctionRunsFile")]
pub struct FunctionRuns {
    /// Function profiles recorded.
    pub profiles: usize,
    pub functions: Vec<FunctionSeen>,
}

impl FunctionRuns {
    /// The union of `sets`, each function with the number of sets that have it.
    pub fn of(sets: &[FunctionSet]) -> FunctionRuns {
        let mut all: BTreeMap<&(String, String), FunctionSeen> = BTreeMap::new();
        for set in sets {
            for (key, &size) in set {
                let seen = all.entry(key).or_insert_with(|| FunctionSeen {
                    module: key.0.clone(),
                    name: key.1.clone(),
                    size,
                    runs: 0,
                });
                seen.size = seen.size.max(size);
                seen.runs += 1;
            }
        }
        FunctionRuns { profiles: sets.len(), functions: all.into_values().collect() }
    }

    /// Code bytes of every function the profiles ran.
    pub fn bytes(&self) -> u64 {
        self.functions.iter().map(|f| f.size).sum()
    }
}

/// [`FunctionRuns`] as the baseline file keeps it.
#[derive(Serialize, Deserialize)]
struct FunctionRunsFile {
    profiles: usize,
    /// Module file name -> `"SIZE RUNS NAME"` per function.
    modules: BTreeMap<String, Vec<String>>,
}

impl From<FunctionRuns> for FunctionRunsFile {
    fn from(runs: FunctionRuns) -> FunctionRunsFile {
        let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for f in runs.functions {
            modules.entry(f.module).or_default().push(format!("{} {} {}", f.size, f.runs, f.name));
        }
        FunctionRunsFile { profiles: runs.profiles, modules }
    }
}

impl TryFrom<FunctionRunsFile> for FunctionRuns {
    type Error = String;
    fn try_from(file: FunctionRunsFile) -> Result<FunctionRuns, String> {
        let mut functions = Vec::new();
        for (module, lines) in file.modules {
            for line in lines {
                let mut words = line.splitn(3, ' ');
                let (size, runs, name) = (words.next(), words.next(), words.next());
                let parsed =
                    size.and_then(|s| s.parse().ok()).zip(runs.and_then(|r| r.parse().ok()));
                let (Some((size, runs)), Some(name)) = (parsed, name) else {
                    return Err(format!(
                        "functions.modules.{module}: `{line}` is not `SIZE RUNS NAME`"
                    ));
                };
                functions.push(FunctionSeen {
                    module: module.clone(),
                    name: name.to_string(),
                    size,
                    runs,
                });
            }
        }
        Ok(FunctionRuns { profiles: file.profiles, functions })
    }
}

/// What a profile now ran that the baseline's did not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewCode {
    /// Code bytes of the new functions.
    pub bytes: u64,
    /// The new functions, largest first: (module, name, bytes).
    pub functions: Vec<(String, String, u64)>,
    /// Functions taken for renamed ones (the same size in the same module as one the baseline
    /// always ran and that no longer runs): (new name, old name).
    pub renamed: Vec<(String, String)>,
}

/// The functions `now` ran that no profile of `base` ran, renamed ones apart.
pub fn new_code(base: &FunctionRuns, now: &FunctionSet) -> NewCode {
    let known: BTreeSet<(&str, &str)> =
        base.functions.iter().map(|f| (f.module.as_str(), f.name.as_str())).collect();
    // Functions every baseline profile ran that no longer run, by module and size: what a
    // new function may be a rename of (each once).
    let mut gone: BTreeMap<(&str, u64), Vec<&str>> = BTreeMap::new();
    for f in &base.functions {
        if f.runs == base.profiles && !now.contains_key(&(f.module.clone(), f.name.clone())) {
            gone.entry((f.module.as_str(), f.size)).or_default().push(f.name.as_str());
        }
    }
    let mut out = NewCode::default();
    for ((module, name), &size) in now {
        if known.contains(&(module.as_str(), name.as_str())) {
            continue;
        }
        if let Some(old) = gone.get_mut(&(module.as_str(), size)).and_then(|v| v.pop()) {
            out.renamed.push((name.clone(), old.to_string()));
            continue;
        }
        out.bytes += size;
        out.functions.push((module.clone(), name.clone(), size));
    }
    out.functions.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    out
}

/// The noise of new code between runs of the same build: each profile's new code against the
/// others' (none with fewer than two profiles).
pub fn leave_one_out(sets: &[FunctionSet]) -> Vec<f64> {
    if sets.len() < 2 {
        return Vec::new();
    }
    (0..sets.len())
        .map(|i| {
            let others: Vec<FunctionSet> =
                sets.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, s)| s.clone()).collect();
            new_code(&FunctionRuns::of(&others), &sets[i]).bytes as f64
        })
        .collect()
}

/// One line naming the largest new functions (`cs_exe_far (17.6 KiB, sample)`), and the
/// renamed ones.
pub fn describe(new: &NewCode) -> String {
    let mut parts = Vec::new();
    if !new.functions.is_empty() {
        let named: Vec<String> = new
            .functions
            .iter()
            .take(5)
            .map(|(module, name, size)| {
                format!("{name} ({}, {module})", coldstart_units::bytes(*size))
            })
            .collect();
        let more = new.functions.len().saturating_sub(named.len());
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        parts.push(format!("new at start-up: {}{tail}", named.join(", ")));
    }
    if !new.renamed.is_empty() {
        let named: Vec<String> =
            new.renamed.iter().take(3).map(|(n, o)| format!("{o} -> {n}")).collect();
        parts.push(format!(
            "taken for renamed (the same size, the old name no longer run): {}",
            named.join(", ")
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[(&str, &str, u64)]) -> FunctionSet {
        items.iter().map(|(m, n, s)| ((m.to_string(), n.to_string()), *s)).collect()
    }

    #[test]
    fn the_baseline_keeps_one_line_a_function_by_module() {
        let runs = FunctionRuns::of(&[
            set(&[("app", "main", 100), ("libc.so.6", "malloc", 300)]),
            set(&[("app", "main", 100), ("app", "operator new[] (x)", 7)]),
        ]);
        let json = serde_json::to_value(&runs).unwrap();
        assert_eq!(json["modules"]["app"][0], "100 2 main");
        assert_eq!(json["modules"]["app"][1], "7 1 operator new[] (x)");
        let back: FunctionRuns = serde_json::from_value(json).unwrap();
        assert_eq!(back, runs);
        let bad = serde_json::json!({"profiles": 1, "modules": {"app": ["main"]}});
        let e = serde_json::from_value::<FunctionRuns>(bad).unwrap_err().to_string();
        assert!(e.contains("SIZE RUNS NAME"), "{e}");
    }

    #[test]
    fn gcc_clone_numbers_are_not_part_of_a_name() {
        assert_eq!(normalize("f.constprop.0"), "f.constprop");
        assert_eq!(normalize("g.part.3.lto_priv.0"), "g.part.lto_priv");
        assert_eq!(normalize("_ZN4node5StartEv"), "_ZN4node5StartEv");
        assert_eq!(normalize("main"), "main");
    }

    #[test]
    fn a_far_function_is_new_code_wherever_the_linker_put_it() {
        let base = [
            set(&[("app", "main", 100), ("app", "init", 400), ("libc.so.6", "malloc", 300)]),
            set(&[("app", "main", 100), ("app", "init", 400), ("libc.so.6", "malloc", 300)]),
        ];
        let runs = FunctionRuns::of(&base);
        assert_eq!(leave_one_out(&base), [0.0, 0.0]);
        // A relink moved every address and resized init: nothing new.
        let relinked =
            set(&[("app", "main", 100), ("app", "init", 420), ("libc.so.6", "malloc", 300)]);
        assert_eq!(new_code(&runs, &relinked), NewCode::default());
        // One more function of 18 KB called at start-up.
        let mut far = relinked.clone();
        far.insert(("app".into(), "cs_exe_far".into()), 18_028);
        let new = new_code(&runs, &far);
        assert_eq!(new.bytes, 18_028);
        assert!(describe(&new).contains("cs_exe_far (17.6 KiB, app)"), "{}", describe(&new));
    }

    #[test]
    fn functions_that_come_and_go_are_the_noise_and_not_new() {
        // A thread's function runs in some profiles and not others.
        let base = [
            set(&[("app", "main", 100), ("app", "worker", 2000)]),
            set(&[("app", "main", 100)]),
            set(&[("app", "main", 100), ("app", "worker", 2000)]),
        ];
        assert_eq!(leave_one_out(&base), [0.0, 0.0, 0.0]);
        let runs = FunctionRuns::of(&base);
        assert_eq!(runs.functions.iter().find(|f| f.name == "worker").unwrap().runs, 2);
        assert_eq!(
            new_code(&runs, &set(&[("app", "main", 100), ("app", "worker", 2000)])).bytes,
            0
        );
        // Seen in one profile of three: the others' union lacks it once.
        let rare = [
            set(&[("app", "main", 100), ("app", "timer", 3000)]),
            set(&[("app", "main", 100)]),
            set(&[("app", "main", 100)]),
        ];
        assert_eq!(leave_one_out(&rare), [3000.0, 0.0, 0.0]);
    }

    #[test]
    fn a_renamed_function_is_not_new_and_a_new_one_of_another_size_is() {
        let base = [set(&[("app", "main", 100), ("app", "load_config", 640)])];
        let runs = FunctionRuns::of(&base);
        let renamed = set(&[("app", "main", 100), ("app", "read_config", 640)]);
        let new = new_code(&runs, &renamed);
        assert_eq!(new.bytes, 0);
        assert_eq!(new.renamed, [("read_config".to_string(), "load_config".to_string())]);
        // Renamed and grown: new code (it cannot be told from a new function).
        let grown = set(&[("app", "main", 100), ("app", "read_config", 5000)]);
        assert_eq!(new_code(&runs, &grown).bytes, 5000);
        // The same size in another module is not a rename.
        let elsewhere = set(&[("app", "main", 100), ("libx.so", "read_config", 640)]);
        assert_eq!(new_code(&runs, &elsewhere).bytes, 640);
    }
}
