//! Where a started program's standard error goes, so that a failed run can say why.
//!
//! A measured program writes its standard error into a memory file ([`StderrFile`], a
//! `memfd`), not into a pipe: writing never blocks whatever the program writes and whether or
//! not coldstart reads, so the start-up measured is the same as with `/dev/null`. When the run
//! failed, [`StderrFile::last_lines`] reads its end: a few lines, each cut to a width that fits
//! a terminal line.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};

/// Lines [`last_lines`] keeps.
pub const TAIL_LINES: usize = 5;
/// Characters a line keeps in [`last_lines`]; a longer one ends with `...`.
pub const TAIL_WIDTH: usize = 160;
/// Bytes read from the end of the file: enough for [`TAIL_LINES`] lines of [`TAIL_WIDTH`].
const TAIL_BYTES: u64 = 16 * 1024;

/// A memory file to hand a started program as its standard error (see the module docs).
#[derive(Debug)]
pub struct StderrFile(File);

impl StderrFile {
    /// A new, empty memory file, closed on `exec` (the child gets it by `dup2`, which clears
    /// the flag on the copy).
    pub fn new() -> io::Result<StderrFile> {
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"coldstart-stderr".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        Ok(StderrFile(unsafe { File::from_raw_fd(fd) }))
    }

    /// The descriptor to `dup2` onto the child's 2.
    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// A copy to give `std::process::Command::stderr`.
    pub fn to_stdio(&self) -> io::Result<std::process::Stdio> {
        Ok(self.0.try_clone()?.into())
    }

    /// The last lines written (see [`last_lines`]); none when nothing was or it cannot be read.
    pub fn last_lines(&self) -> Vec<String> {
        let mut f = &self.0;
        let Ok(len) = f.seek(SeekFrom::End(0)) else { return Vec::new() };
        let start = len.saturating_sub(TAIL_BYTES);
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(start)).and_then(|_| f.read_to_end(&mut bytes)).is_err() {
            return Vec::new();
        }
        // A cut first line is only a fragment.
        let skip = match start {
            0 => 0,
            _ => bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1),
        };
        last_lines(&bytes[skip..])
    }
}

impl AsFd for StderrFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The last [`TAIL_LINES`] non-blank lines of `bytes`, each cut to [`TAIL_WIDTH`] characters,
/// without control characters (a terminal escape of the program's must not reach ours). When
/// the error itself lies above them, as a stack trace printed after its message does
/// (Node.js, Java), the last line that names an error comes first, then `...`.
pub fn last_lines(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<String> = text
        .lines()
        .map(|l| l.trim_end().replace(|c: char| c.is_control(), " "))
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.char_indices().nth(TAIL_WIDTH) {
            Some((cut, _)) => format!("{}...", &l[..cut]),
            None => l,
        })
        .collect();
    let tail = all.len().saturating_sub(TAIL_LINES);
    let names_error = |l: &String| {
        let l = l.to_ascii_lowercase();
        ["error", "fatal", "exception", "panicked"].iter().any(|w| l.contains(w))
    };
    let mut out = Vec::new();
    if !all[tail..].iter().any(names_error) {
        if let Some(error) = all[..tail].iter().rev().find(|l| names_error(l)) {
            out.push(error.trim_start().to_string());
            out.push("...".to_string());
        }
    }
    out.extend(all[tail..].iter().cloned());
    out
}

/// The end of a failure message about a program: `, its last lines on standard error:` and
/// `tail`, one indented line each; or `; it wrote nothing to standard error`.
pub fn said(tail: &[String]) -> String {
    if tail.is_empty() {
        return "; it wrote nothing to standard error".into();
    }
    let mut s = ", its last lines on standard error:".to_string();
    for line in tail {
        s.push_str("\n    ");
        s.push_str(line);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_a_few_lines_each_cut_to_a_line_of_a_terminal() {
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("line {i}\n\n"));
        }
        text.push_str(&"x".repeat(500));
        text.push_str("\x1b[31m\n");
        let tail = last_lines(text.as_bytes());
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[0], "line 16");
        assert_eq!(tail[3], "line 19");
        assert_eq!(tail[4].chars().count(), TAIL_WIDTH + 3, "{}", tail[4]);
        assert!(tail[4].ends_with("..."));
        assert!(last_lines(b"").is_empty());
    }

    #[test]
    fn an_error_above_its_stack_trace_is_kept() {
        let node = "node:internal/modules/cjs/loader:1228\n  throw err;\n  ^\n\n\
                    Error: Cannot find module '/nonexistent.js'\n    at Module._resolveFilename (x:1)\n\
                    \x20   at Module._load (x:2)\n    at main (x:3) {\n  code: 'MODULE_NOT_FOUND',\n\
                    \x20 requireStack: []\n}\n\nNode.js v20.20.2\n";
        let tail = last_lines(node.as_bytes());
        assert_eq!(tail[0], "Error: Cannot find module '/nonexistent.js'", "{tail:?}");
        assert_eq!(tail[1], "...");
        assert_eq!(tail.last().map(String::as_str), Some("Node.js v20.20.2"));
        assert_eq!(tail.len(), TAIL_LINES + 2);
        // Python prints the error last: the tail alone.
        let py = "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'a'\n";
        assert_eq!(last_lines(py.as_bytes()).len(), 3);
    }

    #[test]
    fn a_child_writes_into_the_file_and_its_end_is_read() {
        let f = StderrFile::new().unwrap();
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 3000 ]; do echo filler $i >&2; i=$((i+1)); done; echo 'the real error' >&2; exit 3"])
            .stderr(f.to_stdio().unwrap())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3));
        let tail = f.last_lines();
        assert_eq!(tail.last().map(String::as_str), Some("the real error"), "{tail:?}");
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[0], "filler 2996");
    }
}
