//! The series of the measurements: each command of each `measure` file, kept apart from
//! every other file's and named by its file, its command (with `--compare`, its role, A or
//! B) and the storage it was measured on; and the headline figures they give.
//!
//! Two files are two sessions: the same command measured on an emulated hard disk in one and
//! through a prefetch in another are different series, never one series with a bar from
//! each.

use crate::input::Inputs;
use crate::svg::{gain, seconds};
use coldstart_formats::measure::{CommandResult, IoShare, MeasureReport};

/// One command of one measure file, in every cache state that file measured it in.
pub struct Series<'a> {
    /// The file's name as the report shows it.
    pub file: String,
    pub measure: &'a MeasureReport,
    /// `A` or `B` in a comparison (`measure --compare`).
    pub role: Option<&'static str>,
    /// What the series ran, for people: the command, shortened but told apart from the
    /// others, with its role in a comparison (`A: python3 -c pass with prefetch (p.db)`).
    pub what: String,
    /// Its entries of the file, one per cache state.
    pub entries: Vec<&'a CommandResult>,
}

impl Series<'_> {
    /// The series' name in a legend or a table: what ran, and in which file.
    pub fn name(&self) -> String {
        format!("{} ({})", self.what, self.file)
    }

    /// The storage its runs read the program's files from, for a CSV column: `local` or the
    /// emulated device's profile.
    pub fn storage_key(&self) -> String {
        self.measure.storage.as_ref().map_or_else(|| "local".into(), |s| s.profile.clone())
    }
}

/// The storage of a measurement, as a phrase: `this machine's disk`, `an emulated hdd`.
pub fn storage_phrase(m: &MeasureReport) -> String {
    match &m.storage {
        None => "this machine's disk".into(),
        Some(s) => format!("an emulated {}", s.profile),
    }
}

/// A command as a shell would take it back: a word with a space or a quote in it is quoted.
pub fn shell_words(argv: &[String]) -> String {
    let word = |w: &String| {
        let plain = !w.is_empty()
            && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
        if plain {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    argv.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// A command run through `coldstart launch --prefetch DB -- CMD`: the database and CMD.
pub fn prefetch_launch(argv: &[String]) -> Option<(&str, &[String])> {
    let exe = argv.first()?;
    if exe.rsplit('/').next() != Some("coldstart")
        || argv.get(1).map(String::as_str) != Some("launch")
    {
        return None;
    }
    let db = argv.iter().position(|a| a == "--prefetch").and_then(|i| argv.get(i + 1))?;
    let sep = argv.iter().position(|a| a == "--")?;
    Some((db.as_str(), &argv[sep + 1..]))
}

/// Short, distinct labels for commands: the program's file name and arguments, with as many
/// parent directories as it takes to tell two apart.
pub fn short_labels(commands: &[Vec<String>]) -> Vec<String> {
    let label = |c: &Vec<String>, depth: usize| {
        let Some(exe) = c.first() else { return String::new() };
        let parts: Vec<&str> = exe.split('/').filter(|p| !p.is_empty()).collect();
        let from = parts.len().saturating_sub(depth + 1);
        let mut s = parts[from..].join("/");
        if s.is_empty() {
            s = exe.clone();
        }
        let mut argv = vec![s];
        argv.extend(c[1..].iter().cloned());
        shell_words(&argv)
    };
    let mut distinct: Vec<&Vec<String>> = Vec::new();
    for c in commands {
        if !distinct.contains(&c) {
            distinct.push(c);
        }
    }
    let mut depth = 0;
    loop {
        let labels: Vec<String> = distinct.iter().map(|c| label(c, depth)).collect();
        let n = labels.iter().collect::<std::collections::HashSet<_>>().len();
        if n == labels.len() || depth > 8 {
            return commands
                .iter()
                .map(|c| labels[distinct.iter().position(|d| *d == c).unwrap_or(0)].clone())
                .collect();
        }
        depth += 1;
    }
}

/// The cache state a command entry was measured in: its label, or for `A`/`B` entries of a
/// comparison the state given for the whole file.
pub fn cache_of<'a>(m: &'a MeasureReport, c: &'a CommandResult) -> &'a str {
    match c.label.as_str() {
        "A" | "B" => &m.cache,
        l => l,
    }
}

/// Every series of every measure file, in the order given.
pub fn series(inputs: &Inputs) -> Vec<Series<'_>> {
    // The program each entry runs (the one a prefetch launch starts), for short labels.
    let inner = |c: &CommandResult| -> Vec<String> {
        prefetch_launch(&c.command).map_or_else(|| c.command.clone(), |(_, cmd)| cmd.to_vec())
    };
    let all: Vec<Vec<String>> =
        inputs.measures().flat_map(|(_, m)| m.commands.iter().map(inner)).collect();
    let labels = short_labels(&all);
    let label_of =
        |c: &CommandResult| labels[all.iter().position(|a| *a == inner(c)).unwrap_or(0)].clone();
    let mut out: Vec<Series> = Vec::new();
    for (src, m) in inputs.measures() {
        let prefetch_a =
            m.commands.iter().find(|c| c.label == "A").and_then(|c| prefetch_launch(&c.command));
        let first = out.len();
        for c in &m.commands {
            let role = match c.label.as_str() {
                "A" => Some("A"),
                "B" => Some("B"),
                _ => None,
            };
            let existing = out[first..].iter_mut().find(|s| {
                s.role == role && s.entries.first().is_some_and(|e| e.command == c.command)
            });
            if let Some(s) = existing {
                s.entries.push(c);
                continue;
            }
            let mut what = label_of(c);
            if let Some((db, _)) = prefetch_launch(&c.command) {
                what = format!("{what} with prefetch ({})", db.rsplit('/').next().unwrap_or(db));
            } else if role == Some("B") && prefetch_a.is_some_and(|(_, cmd)| cmd == c.command) {
                what = format!("{what} without prefetch");
            }
            if let Some(r) = role {
                what = format!("{r}: {what}");
            }
            out.push(Series { file: src.name(), measure: m, role, what, entries: vec![c] });
        }
    }
    out
}

/// The series of each file, files in the order given.
pub fn by_file<'s, 'a>(series: &'s [Series<'a>]) -> Vec<Vec<&'s Series<'a>>> {
    let mut out: Vec<Vec<&Series>> = Vec::new();
    for s in series {
        match out.iter_mut().find(|f| f[0].file == s.file) {
            Some(f) => f.push(s),
            None => out.push(vec![s]),
        }
    }
    out
}

/// The headline figures of the measurements: each comparison as a gain, and the share of
/// each cold start-up spent waiting for storage; every caption names the file, the cache
/// state and the storage.
pub fn highlights(series: &[Series]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for of_file in by_file(series) {
        let s = of_file[0];
        let role = |r: &str| of_file.iter().copied().find(|x| x.role == Some(r));
        if let (Some(a), Some(b)) = (role("A"), role("B")) {
            out.extend(comparison(a, b));
        }
        for share in s.measure.io_share.iter().filter(|x| x.cache == "cold").take(1) {
            let what = share_what(&of_file, share);
            out.push((
                format!("{:.0}%", share.fraction * 100.0),
                format!(
                    "of the cold start-up of {what} on {} waits for storage: {} of {}, cold \
                     minus hot ({})",
                    storage_phrase(s.measure),
                    seconds(share.io_s),
                    seconds(share.cold_median_s),
                    s.file
                ),
            ));
        }
    }
    out
}

/// What an I/O share (named by the command line joined) is of: its series' name in the file.
pub fn share_what(of_file: &[&Series], share: &IoShare) -> String {
    let runs = |c: &[String]| c.join(" ") == share.label;
    of_file
        .iter()
        .find(|x| {
            x.entries.first().is_some_and(|e| {
                runs(&e.command) || prefetch_launch(&e.command).is_some_and(|(_, c)| runs(c))
            })
        })
        .map_or_else(|| share.label.clone(), |x| x.what.clone())
}

/// A comparison's card: how much faster (or slower) the change made start-up. The change is
/// the prefetch when A is a prefetch launch, else B (`--compare -- ./old ::: ./new`).
fn comparison(a: &Series, b: &Series) -> Option<(String, String)> {
    let (ea, eb) = (a.entries.first()?, b.entries.first()?);
    let (ta, tb) = (ea.summary("wall_s")?.median, eb.summary("wall_s")?.median);
    let m = a.measure;
    let (cache, storage) = (cache_of(m, ea), storage_phrase(m));
    if let Some((db, cmd)) = prefetch_launch(&ea.command) {
        let what = a.what.trim_start_matches("A: ");
        let what = what.rsplit_once(" with prefetch").map_or(what, |(w, _)| w);
        let other = if eb.command == cmd { "without".to_owned() } else { b.what.clone() };
        return Some((
            gain(ta, tb),
            format!(
                "{cache} start-up of {what} on {storage} with prefetch ({}) against {other}: {} \
                 against {} ({})",
                db.rsplit('/').next().unwrap_or(db),
                seconds(ta),
                seconds(tb),
                a.file
            ),
        ));
    }
    Some((
        gain(tb, ta),
        format!(
            "B ({}) against A ({}), {cache} start-up on {storage}: {} against {} ({})",
            b.what.trim_start_matches("B: "),
            a.what.trim_start_matches("A: "),
            seconds(tb),
            seconds(ta),
            a.file
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn labels_grow_until_they_differ() {
        let l = short_labels(&[
            argv("/d/s-medium/sample --workload b"),
            argv("/d/s-medium-ordered/sample --workload b"),
            argv("/d/s-medium/sample --workload b"),
        ]);
        assert_eq!(
            l,
            vec![
                "s-medium/sample --workload b",
                "s-medium-ordered/sample --workload b",
                "s-medium/sample --workload b"
            ]
        );
        let python = vec!["/usr/bin/python3".into(), "-c".into(), "import json, email".into()];
        assert_eq!(short_labels(&[python]), vec!["python3 -c 'import json, email'"]);
    }

    #[test]
    fn a_prefetch_launch_is_seen_through() {
        let a = argv(
            "/usr/local/bin/coldstart launch --prefetch /var/tmp/p.db -- /usr/bin/python3 -c pass",
        );
        let (db, cmd) = prefetch_launch(&a).unwrap();
        assert_eq!((db, cmd), ("/var/tmp/p.db", &argv("/usr/bin/python3 -c pass")[..]));
        assert!(prefetch_launch(&argv("/usr/bin/python3 -c pass")).is_none());
        assert_eq!(shell_words(&["a b".into(), "it's".into(), "x".into()]), r"'a b' 'it'\''s' x");
    }
}
