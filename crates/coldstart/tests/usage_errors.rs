//! What a new user meets on wrong usage: each mistake gets one line that names the path or the
//! word at fault and says what was expected, with exit code 2.

use std::path::Path;
use std::process::Command;

fn coldstart(args: &[&str], dir: &Path) -> (i32, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_coldstart")).args(args).current_dir(dir).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `args` fails with exit code 2 and a message holding each of `wanted`, in one line.
fn refused(dir: &Path, args: &[&str], wanted: &[&str]) {
    let (code, err) = coldstart(args, dir);
    assert_eq!(code, 2, "{args:?}: {err}");
    let line = err.lines().find(|l| l.starts_with("coldstart: error:")).unwrap_or("");
    for w in wanted {
        assert!(line.contains(w), "{args:?}: {w:?} not in {err}");
    }
}

#[test]
fn a_directory_missing_empty_or_foreign_input_is_named_with_what_was_expected() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("empty"), "").unwrap();
    std::fs::write(dir.join("text"), "hello\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let elf = "give the program's binary, an ELF file";
    for binary_cmd in
        [&["analyze"][..], &["verify", "--order", "text"], &["bolt", "--order", "text", "-o", "x"]]
    {
        for (path, problem) in [
            ("sub", "sub is a directory"),
            ("absent", "absent does not exist"),
            ("empty", "empty is empty"),
        ] {
            let mut args = vec![binary_cmd[0], path];
            args.extend(&binary_cmd[1..]);
            refused(dir, &args, &[problem, elf]);
        }
        let mut args = vec![binary_cmd[0], "text"];
        args.extend(&binary_cmd[1..]);
        refused(dir, &args, &["text is not an ELF file"]);
    }
    for cmd in [&["profile", "-o", "p.json", "--"][..], &["measure", "--"]] {
        let mut args = cmd.to_vec();
        args.push("./sub");
        refused(dir, &args, &["sub", "is a directory"]);
    }
    refused(
        dir,
        &["profile", "-o", "p.json", "--", "./absent"],
        &["`./absent` does not exist", "after `--`"],
    );
    refused(
        dir,
        &["profile", "-o", "p.json", "--", "sub"],
        &["`sub` is not in PATH", "after `--`"],
    );
    let profile = "give a profile file";
    refused(dir, &["order", "sub"], &["profile sub is a directory", profile]);
    refused(dir, &["order", "absent"], &["profile absent does not exist", profile]);
    refused(dir, &["order", "empty"], &["profile empty is empty", profile]);
    refused(dir, &["order", "text"], &["text is not a usable coldstart profile: not JSON"]);
    // A program given where a profile, an order file or a database goes.
    refused(
        dir,
        &["order", "/bin/true"],
        &["profile /bin/true is a binary file, not text", profile],
    );
    refused(
        dir,
        &["verify", "/bin/true", "--order", "/bin/true"],
        &["order file /bin/true is a binary file, not text"],
    );
    refused(dir, &["prefetch", "show", "/bin/true"], &["/bin/true is a binary file, not text"]);
    let order = "give the file `coldstart order -o FILE` wrote";
    refused(
        dir,
        &["verify", "/bin/true", "--order", "sub"],
        &["order file sub is a directory", order],
    );
    refused(
        dir,
        &["verify", "/bin/true", "--order", "empty"],
        &["order file empty is empty", order],
    );
    let db = "give a database file";
    refused(dir, &["prefetch", "show", "sub"], &["prefetch database sub is a directory", db]);
    refused(dir, &["prefetch", "show", "empty"], &["prefetch database empty is empty", db]);
    refused(
        dir,
        &["measure", "--prefetch", "absent", "--", "true"],
        &["absent does not exist", db],
    );
}

#[test]
fn a_command_given_without_the_separator_is_shown_after_it() {
    let d = tempfile::tempdir().unwrap();
    for (args, tip) in [
        (
            &["measure", "--runs", "2", "/usr/bin/node", "app.js"][..],
            "coldstart measure --runs 2 -- /usr/bin/node app.js",
        ),
        (
            &["profile", "-o", "p.json", "python3", "-c", "import os"],
            "coldstart profile -o p.json -- python3 -c 'import os'",
        ),
        (&["timeline", "./myprog"], "coldstart timeline -- ./myprog"),
        (&["gate", "./myprog"], "coldstart gate -- ./myprog"),
        (
            &["launch", "--prefetch", "p.db", "./myprog"],
            "coldstart launch --prefetch p.db -- ./myprog",
        ),
    ] {
        let (code, err) = coldstart(args, d.path());
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("the command to run goes after `--`: {tip}")),
            "{args:?}: {err}"
        );
    }
}
