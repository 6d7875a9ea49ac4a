//! The mounts of this process's mount namespace, from `/proc/self/mountinfo` (proc(5)).
//!
//! A line is `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
//! Fields are separated by single spaces; the kernel writes a space, tab, newline or
//! backslash inside a path as a three-digit octal escape (`\040`, `\011`, `\012`, `\134`),
//! and [`unescape`] undoes every such escape, so a mount point is the path a program would
//! use, byte for byte.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id, unique in the namespace (reused after an unmount).
    pub id: u64,
    /// The id of the mount it is mounted on.
    pub parent: u64,
    /// `(major, minor)` of the file system's device; for FUSE, `(0, N)` with N the connection.
    pub dev: (u32, u32),
    /// The directory of the file system seen at the mount point (not `/` for a bind mount).
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
    /// The file system's type: `ext4`, `tmpfs`, `fuse.coldstart`, `cgroup2`...
    pub fstype: String,
    /// What is mounted: a device (`/dev/vda1`), or a name the file system chose.
    pub source: String,
    /// The file system's own options (`rw,memory` for a cgroup v1 hierarchy).
    pub super_options: String,
}

impl Mount {
    /// Whether the file system is stored on a block device (its source is under `/dev/`).
    pub fn on_block_device(&self) -> bool {
        self.source.starts_with("/dev/")
    }
}

/// The mounts of this process's mount namespace, in the kernel's order (a later mount on the
/// same point covers an earlier one).
pub fn read() -> io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Every well-formed line of a mountinfo text; a malformed line is passed over.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    let mut f = line.split(' ');
    let id = f.next()?.parse().ok()?;
    let parent = f.next()?.parse().ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let dev = (major.parse().ok()?, minor.parse().ok()?);
    let root = PathBuf::from(unescape(f.next()?));
    let point = PathBuf::from(unescape(f.next()?));
    let _options = f.next()?;
    // Optional fields (`shared:1`, `master:2`...) up to the separator.
    f.by_ref().find(|&x| x == "-")?;
    let fstype = f.next()?.to_owned();
    let source = unescape(f.next()?).to_string_lossy().into_owned();
    let super_options = f.next().unwrap_or("").to_owned();
    Some(Mount { id, parent, dev, root, point, fstype, source, super_options })
}

/// A mountinfo field with every octal escape (`\` and three octal digits) undone; any other
/// byte, a lone backslash included, is kept.
pub fn unescape(field: &str) -> OsString {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' && d[0] <= b'3' => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_octal_escape_the_kernel_writes_is_undone() {
        assert_eq!(unescape(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape(r"/tmp/tab\011x"), "/tmp/tab\tx");
        assert_eq!(unescape(r"/tmp/new\012line"), "/tmp/new\nline");
        assert_eq!(unescape(r"/tmp/back\134slash"), "/tmp/back\\slash");
        assert_eq!(unescape(r"\040\011\012\134"), " \t\n\\");
        // Any byte, not only those four: a name that is not UTF-8 stays its bytes.
        assert_eq!(unescape(r"/x\377").into_vec(), b"/x\xff");
    }

    #[test]
    fn what_is_not_an_escape_is_kept() {
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
        assert_eq!(unescape(r"/not\08x"), r"/not\08x");
        assert_eq!(unescape(r"/above\400"), r"/above\400", "not a byte");
        assert_eq!(unescape(r"\\040"), r"\ ");
    }

    #[test]
    fn a_line_gives_every_field_with_optional_fields_skipped() {
        let text = "\
36 27 7:3 / /var/tmp/coldstart-storage-9-0/mnt rw,noatime shared:1 master:2 - ext4 /dev/loop3 rw
40 27 7:3 /opt/app /opt/my\\040app rw - ext4 /dev/loop3 rw,data=ordered
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
77 30 0:52 / /mnt/lazy\\011tab rw,nosuid - fuse.coldstart coldstart\\040bundle rw,user_id=0
garbage
1 2 3:x / / rw - ext4 /dev/vda rw
";
        let m = parse(text);
        assert_eq!(m.len(), 4, "{m:#?}");
        assert_eq!(
            m[0],
            Mount {
                id: 36,
                parent: 27,
                dev: (7, 3),
                root: "/".into(),
                point: "/var/tmp/coldstart-storage-9-0/mnt".into(),
                fstype: "ext4".into(),
                source: "/dev/loop3".into(),
                super_options: "rw".into(),
            }
        );
        assert_eq!(
            (m[1].root.to_str(), m[1].point.to_str()),
            (Some("/opt/app"), Some("/opt/my app"))
        );
        assert_eq!((m[2].fstype.as_str(), m[2].super_options.as_str()), ("cgroup", "rw,memory"));
        assert_eq!(m[3].point, PathBuf::from("/mnt/lazy\ttab"));
        assert_eq!((m[3].dev, m[3].source.as_str()), ((0, 52), "coldstart bundle"));
        assert!(m[0].on_block_device() && !m[2].on_block_device());
    }

    #[test]
    fn this_process_sees_its_root_and_proc() {
        let mounts = read().unwrap();
        assert!(mounts.iter().any(|m| m.point == std::path::Path::new("/")));
        assert!(mounts.iter().any(|m| m.fstype == "proc"));
    }
}
