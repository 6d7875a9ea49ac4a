//! Page profiles as the hot-set input: `coldstart pack DIR --profile P`.
//!
//! A page profile from `coldstart profile --pages` (docs/formats/profile.md) names every file
//! page start-up touched, in order, by absolute path and content (size, mtime, build-id). The
//! hot set of a bundle is the same thing seen from the packed directory: byte ranges of files
//! under `DIR`, in first-touch order. This module converts one into the other, so the profile
//! is the hot-set input without an intermediate file, and it refuses to trust pages of a file
//! whose content is not the one profiled (a hot set for another build would fetch the wrong
//! chunks first).
//!
//! The rules, in order:
//!
//! - Several profiles are merged by the profile crate's rule ([`coldstart_profile_format::merge`]):
//!   each page's rank is its earliest normalised position over the workloads.
//! - A profiled path is mapped to the packed directory by stripping the *profile root*: the
//!   directory the program was profiled in. It is `DIR` itself unless given
//!   ([`ProfileMapping::profile_root`], `--profile-root`), for a program profiled in one place
//!   and packed from a copy elsewhere. Paths outside the root (system libraries, `/etc`, ...)
//!   are ignored and counted. A file the profile knows by device and inode only (closed
//!   before the profiler could name it) is looked for by its inode in the packed directory,
//!   and kept when found there (its inode is all its identity); otherwise it is counted as
//!   outside too.
//! - Each file kept is checked against the file now in `DIR`: its size, and its ELF build-id
//!   when the profile has one, else its mtime (a matching build-id names the build, so a copy
//!   with a new mtime still matches). A mismatch leaves the file out of the hot set with a
//!   warning naming it.
//! - Page `p` with `count` `n` becomes the byte range `[p * 4096, (p + n) * 4096)`; ranges
//!   next to each other in the same file are joined. `pack` clips ranges at the end of a file.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use coldstart_error::Category;
use coldstart_profile_format::{FormatError, Profile};

use crate::hotlist::{HotList, Touch};

/// The page size of page profiles: page `p` is the bytes from `p * PAGE_SIZE`.
pub const PAGE_SIZE: u64 = 4096;

/// How profiled paths map to the packed directory.
#[derive(Debug, Clone, Default)]
pub struct ProfileMapping {
    /// The directory the profiled program ran from: a profiled path `ROOT/x/y` is `x/y` in the
    /// packed directory. `None`: the packed directory itself (as given, and canonicalised).
    pub profile_root: Option<PathBuf>,
}

/// What a file in the packed directory is now, to compare with what was profiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// The ELF build-id in hex, `None` for a file without one (or not ELF).
    pub build_id: Option<String>,
}

/// Looks up the identity of files (the OS part of the conversion, faked in unit tests).
pub trait Identify {
    /// The identity of the file at `path`, or an error when it cannot be read.
    fn identify(&self, path: &Path) -> io::Result<FileIdentity>;

    /// The regular files under `dir` by device (`major:minor`) and inode, as bundle paths
    /// relative to `dir`: how a file a page profile knows by inode only is found. The real
    /// file system by default (symbolic links are not followed).
    fn inodes(&self, dir: &Path) -> HashMap<(String, u64), String> {
        let mut out = HashMap::new();
        let mut pending = vec![(dir.to_path_buf(), String::new())];
        while let Some((at, rel)) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&at) else { continue };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
                let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
                if meta.is_dir() {
                    pending.push((entry.path(), rel));
                } else if meta.is_file() {
                    let dev = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
                    out.entry((dev, meta.ino())).or_insert(rel);
                }
            }
        }
        out
    }
}

/// The real file system: metadata, and the build-id read with `coldstart-elf`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

impl Identify for RealFiles {
    fn identify(&self, path: &Path) -> io::Result<FileIdentity> {
        let meta = std::fs::metadata(path)?;
        let options = coldstart_elf::SymbolOptions { use_debug_files: false, ..Default::default() };
        let build_id = if meta.is_file() {
            coldstart_elf::ElfInfo::open(path, &options).ok().and_then(|i| i.build_id_hex())
        } else {
            None
        };
        Ok(FileIdentity { size: meta.len(), mtime: meta.mtime(), build_id })
    }
}

/// A file of the profile left out of the hot set because it is not the file profiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The path relative to the packed directory.
    pub path: String,
    /// What differs, for people: `size 100 in the profile, 120 now`.
    pub reason: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}; the profile was recorded on a different build, so its pages are left out of the hot set (re-run `coldstart profile --pages` on this build)",
            self.path, self.reason
        )
    }
}

/// The result of converting page profiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileHotList {
    /// The hot list `pack` takes, paths relative to the packed directory.
    pub hot: HotList,
    /// Files under the packed directory whose pages made it into the hot list.
    pub files: usize,
    /// Files left out because they differ from the profiled ones.
    pub mismatches: Vec<Mismatch>,
    /// Files of the profile outside the packed directory (or unnamed and not found in it),
    /// ignored.
    pub outside: usize,
    /// Files the profile knew by device and inode only (closed before the profiler could
    /// name them), found in the packed directory by their inode and kept.
    pub by_inode: usize,
    /// Profiled files under the packed directory that are not there now (or not readable).
    pub missing: Vec<String>,
    /// Whether a profile's pages were only a sample (perf page-fault samples, without root).
    pub sampled: bool,
}

/// Why page profiles could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ProfileHotListError {
    #[error(transparent)]
    Profile(#[from] FormatError),
    #[error("profile {path} has no page data: record it with `coldstart profile --pages -o P.json -- CMD`")]
    NoPages { path: PathBuf },
    #[error("no profile given")]
    NoProfiles,
}

impl ProfileHotListError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            ProfileHotListError::Profile(e) => e.category(),
            ProfileHotListError::NoPages { .. } | ProfileHotListError::NoProfiles => {
                Category::Usage
            }
        }
    }
}

/// Reads page profiles (unknown versions are refused by the profile reader).
pub fn read_profiles(paths: &[PathBuf]) -> Result<Vec<Profile>, ProfileHotListError> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let profile = Profile::read(p)?;
        if profile.pages.is_none() {
            return Err(ProfileHotListError::NoPages { path: p.clone() });
        }
        out.push(profile);
    }
    Ok(out)
}

/// Converts page profiles into the hot list of `dir` (see the module documentation).
pub fn hot_list_from_profiles(
    dir: &Path,
    profiles: Vec<Profile>,
    mapping: &ProfileMapping,
    files: &dyn Identify,
) -> Result<ProfileHotList, ProfileHotListError> {
    let profile = match profiles.len() {
        0 => return Err(ProfileHotListError::NoProfiles),
        1 => profiles.into_iter().next().expect("one profile"),
        _ => coldstart_profile_format::merge(profiles)?,
    };
    let Some(pages) = profile.pages else {
        return Err(ProfileHotListError::NoPages { path: PathBuf::from(profile.workload) });
    };
    // The root as given and canonicalised (profiled paths are absolute and resolved; the
    // root may be relative or reached through a symbolic link).
    let root = mapping.profile_root.as_deref().unwrap_or(dir);
    let mut roots = vec![root.to_path_buf()];
    if let Ok(c) = root.canonicalize() {
        if c != root {
            roots.push(c);
        }
    }

    // Per file of the profile: its path relative to `dir` when it is kept.
    let mut result = ProfileHotList {
        hot: HotList::default(),
        files: 0,
        mismatches: Vec::new(),
        outside: 0,
        by_inode: 0,
        missing: Vec::new(),
        sampled: pages.sampled,
    };
    let mut kept: Vec<Option<String>> = Vec::with_capacity(pages.files.len());
    let mut seen_rel: HashMap<String, bool> = HashMap::new();
    // Files known by inode only are looked for in the packed directory (the profile was taken
    // there, the same files), walked once if there are any.
    let inodes = if pages.files.iter().any(|f| f.path.as_os_str().is_empty()) {
        files.inodes(dir)
    } else {
        HashMap::new()
    };
    for f in &pages.files {
        if f.path.as_os_str().is_empty() {
            match inodes.get(&(f.dev.clone(), f.ino)) {
                Some(rel) => {
                    // Its inode is its identity: nothing else of it was recorded.
                    if seen_rel.insert(rel.clone(), true).is_none() {
                        result.files += 1;
                    }
                    result.by_inode += 1;
                    kept.push(Some(rel.clone()));
                }
                None => {
                    result.outside += 1;
                    kept.push(None);
                }
            }
            continue;
        }
        let Some(rel) = relative(&f.path, &roots) else {
            result.outside += 1;
            kept.push(None);
            continue;
        };
        if let Some(&ok) = seen_rel.get(&rel) {
            // The same path twice (merged profiles of one build): one check.
            kept.push(ok.then(|| rel.clone()));
            continue;
        }
        let ok = match files.identify(&dir.join(&rel)) {
            Err(_) => {
                result.missing.push(rel.clone());
                false
            }
            Ok(now) => match differs(f, &now) {
                Some(reason) => {
                    result.mismatches.push(Mismatch { path: rel.clone(), reason });
                    false
                }
                None => true,
            },
        };
        if ok {
            result.files += 1;
        }
        seen_rel.insert(rel.clone(), ok);
        kept.push(ok.then_some(rel));
    }

    for a in &pages.accesses {
        let Some(Some(rel)) = kept.get(a.file) else { continue };
        let offset = a.page.saturating_mul(PAGE_SIZE);
        let length = a.count.max(1).saturating_mul(PAGE_SIZE);
        if let Some(last) = result.hot.touches.last_mut() {
            if last.path == *rel && last.offset.saturating_add(last.length) == offset {
                last.length += length;
                continue;
            }
        }
        result.hot.touches.push(Touch { path: rel.clone(), offset, length });
    }
    Ok(result)
}

/// `path` relative to the first root it lies under, as a bundle path (`/`-separated, no
/// `..`), or `None`.
fn relative(path: &Path, roots: &[PathBuf]) -> Option<String> {
    if path.as_os_str().is_empty() {
        return None;
    }
    for root in roots {
        let Ok(rest) = path.strip_prefix(root) else { continue };
        let mut parts = Vec::new();
        for c in rest.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_str()?),
                Component::CurDir => {}
                _ => return None,
            }
        }
        if !parts.is_empty() {
            return Some(parts.join("/"));
        }
    }
    None
}

/// Why the file now differs from the profiled one, or `None` when it is the same.
fn differs(profiled: &coldstart_profile_format::PageFile, now: &FileIdentity) -> Option<String> {
    if let Some(b) = &profiled.build_id {
        if now.build_id.as_ref() != Some(b) {
            return Some(format!(
                "build-id {b} in the profile, {} now",
                now.build_id.as_deref().unwrap_or("(none)")
            ));
        }
    }
    if profiled.size != now.size {
        return Some(format!("size {} in the profile, {} now", profiled.size, now.size));
    }
    // A matching build-id names the build: a copy with a new mtime (`cp` without `-p`, an
    // image layer) is still the file profiled. Without one, mtime is all there is.
    if profiled.build_id.is_none() && profiled.mtime != now.mtime {
        return Some(format!("mtime {} in the profile, {} now", profiled.mtime, now.mtime));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_profile_format::{testing, PageFile, PageProfile};

    /// A fake file system: path -> identity.
    struct Fake(HashMap<PathBuf, FileIdentity>);

    impl Identify for Fake {
        fn identify(&self, path: &Path) -> io::Result<FileIdentity> {
            self.0.get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    fn id(size: u64, build_id: Option<&str>) -> FileIdentity {
        FileIdentity { size, mtime: 7, build_id: build_id.map(Into::into) }
    }

    fn file(path: &str, size: u64, build_id: Option<&str>) -> PageFile {
        PageFile {
            path: path.into(),
            size,
            mtime: 7,
            build_id: build_id.map(Into::into),
            dev: "8:1".into(),
            ino: 1,
        }
    }

    fn profile(label: &str, files: Vec<PageFile>, accesses: &[(usize, u64, u64)]) -> Profile {
        let pages = PageProfile {
            source: "tracefs".into(),
            sampled: false,
            files,
            accesses: testing::faults(accesses),
            lost_events: 0,
        };
        Profile {
            command: vec!["/app/bin/prog".into()],
            pages: Some(pages),
            ..testing::profile(label, vec![])
        }
    }

    fn fake() -> Fake {
        Fake(HashMap::from([
            ("/app/bin/prog".into(), id(40_000, Some("aa"))),
            ("/app/lib/libx.so".into(), id(20_000, Some("bb"))),
            ("/app/share/data".into(), id(10_000, None)),
        ]))
    }

    fn touches(r: &ProfileHotList) -> Vec<(&str, u64, u64)> {
        r.hot.touches.iter().map(|t| (t.path.as_str(), t.offset, t.length)).collect()
    }

    fn standard_files() -> Vec<PageFile> {
        vec![
            file("/app/bin/prog", 40_000, Some("aa")),
            file("/usr/lib/x86_64-linux-gnu/libc.so.6", 2_000_000, Some("cc")),
            file("/app/lib/libx.so", 20_000, Some("bb")),
            file("/app/share/data", 10_000, None),
        ]
    }

    #[test]
    fn pages_become_byte_ranges_in_first_touch_order_across_files() {
        let p = profile(
            "a",
            standard_files(),
            &[(0, 0, 1), (1, 0, 4), (2, 3, 2), (0, 5, 1), (0, 6, 2), (3, 1, 1), (2, 0, 1)],
        );
        let r =
            hot_list_from_profiles(Path::new("/app"), vec![p], &ProfileMapping::default(), &fake())
                .unwrap();
        assert_eq!(
            touches(&r),
            [
                ("bin/prog", 0, 4096),
                ("lib/libx.so", 3 * 4096, 2 * 4096),
                // Pages 5 and 6..8 are adjacent: one range.
                ("bin/prog", 5 * 4096, 3 * 4096),
                ("share/data", 4096, 4096),
                ("lib/libx.so", 0, 4096),
            ]
        );
        assert_eq!(r.files, 3);
        assert_eq!(r.outside, 1, "libc is outside /app and ignored");
        assert!(r.mismatches.is_empty() && r.missing.is_empty());
        assert_eq!(r.hot.format, crate::hotlist::FORMAT);
    }

    /// The fake file system, with files found by inode in the packed directory.
    struct WithInodes(Fake, HashMap<(String, u64), String>);

    impl Identify for WithInodes {
        fn identify(&self, path: &Path) -> io::Result<FileIdentity> {
            self.0.identify(path)
        }
        fn inodes(&self, dir: &Path) -> HashMap<(String, u64), String> {
            assert_eq!(dir, Path::new("/app"));
            self.1.clone()
        }
    }

    #[test]
    fn files_known_by_inode_only_are_found_in_the_packed_directory() {
        // Two files the profiler could not name (closed before it looked): one is in /app
        // under that inode, the other is not.
        let unnamed = |ino: u64| PageFile { path: PathBuf::new(), ino, ..file("", 0, None) };
        let mut files = standard_files();
        files.push(unnamed(77));
        files.push(unnamed(78));
        let p = profile("a", files, &[(0, 0, 1), (4, 0, 2), (5, 0, 1)]);
        let fs =
            WithInodes(fake(), HashMap::from([(("8:1".to_string(), 77), "lib/mod.pyc".into())]));
        let r = hot_list_from_profiles(Path::new("/app"), vec![p], &ProfileMapping::default(), &fs)
            .unwrap();
        assert_eq!(touches(&r), [("bin/prog", 0, 4096), ("lib/mod.pyc", 0, 2 * 4096)]);
        assert_eq!(r.by_inode, 1);
        assert_eq!(r.outside, 2, "libc and the file not in /app");
    }

    #[test]
    fn a_different_build_id_or_size_is_left_out_with_a_warning_naming_the_file() {
        let mut fs = fake();
        fs.0.insert("/app/lib/libx.so".into(), id(20_000, Some("b2")));
        fs.0.insert("/app/share/data".into(), id(10_001, None));
        let p = profile("a", standard_files(), &[(0, 0, 1), (2, 0, 1), (3, 0, 1), (0, 1, 1)]);
        let r = hot_list_from_profiles(Path::new("/app"), vec![p], &ProfileMapping::default(), &fs)
            .unwrap();
        assert_eq!(touches(&r), [("bin/prog", 0, 2 * 4096)]);
        assert_eq!(r.mismatches.len(), 2);
        let text: Vec<String> = r.mismatches.iter().map(|m| m.to_string()).collect();
        assert!(text[0].starts_with("lib/libx.so: build-id bb in the profile, b2 now"), "{text:?}");
        assert!(text[0].contains("different build"), "{text:?}");
        assert!(text[1].starts_with("share/data: size 10000 in the profile, 10001 now"));

        // A changed mtime is a mismatch for a file without build-id, not for one whose
        // build-id matches (a copy of the same build).
        let mut fs = fake();
        fs.0.get_mut(Path::new("/app/bin/prog")).unwrap().mtime = 8;
        fs.0.get_mut(Path::new("/app/share/data")).unwrap().mtime = 8;
        let p = profile("a", standard_files(), &[(0, 0, 1), (3, 0, 1)]);
        let r = hot_list_from_profiles(Path::new("/app"), vec![p], &ProfileMapping::default(), &fs)
            .unwrap();
        assert_eq!(touches(&r), [("bin/prog", 0, 4096)]);
        assert_eq!(r.mismatches.len(), 1);
        let text = r.mismatches[0].to_string();
        assert!(text.starts_with("share/data: mtime 7 in the profile, 8 now"), "{text}");
    }

    #[test]
    fn files_outside_dir_missing_or_unnamed_are_not_in_the_hot_set() {
        let mut files = standard_files();
        files.push(file("", 100, None));
        files.push(file("/app/gone", 100, None));
        files.push(file("/application/bin/prog", 40_000, Some("aa")));
        let p = profile("a", files, &[(4, 0, 1), (5, 0, 1), (6, 0, 1), (1, 0, 1), (0, 2, 1)]);
        let r =
            hot_list_from_profiles(Path::new("/app"), vec![p], &ProfileMapping::default(), &fake())
                .unwrap();
        assert_eq!(touches(&r), [("bin/prog", 2 * 4096, 4096)]);
        assert_eq!(r.outside, 3, "libc, the unnamed file and /application (not under /app)");
        assert_eq!(r.missing, ["gone"]);
    }

    #[test]
    fn a_profile_root_maps_a_program_profiled_elsewhere() {
        let files = vec![
            file("/opt/build/bin/prog", 40_000, Some("aa")),
            file("/app/lib/libx.so", 20_000, Some("bb")),
        ];
        let p = profile("a", files, &[(0, 0, 1), (1, 0, 1)]);
        let mapping = ProfileMapping { profile_root: Some("/opt/build".into()) };
        let r = hot_list_from_profiles(Path::new("/app"), vec![p], &mapping, &fake()).unwrap();
        // With a root given, only paths under it count: /app/... is outside.
        assert_eq!(touches(&r), [("bin/prog", 0, 4096)]);
        assert_eq!(r.outside, 1);
    }

    #[test]
    fn two_profiles_merge_by_earliest_normalised_rank() {
        // a: prog 0, libx 0, data 0, prog 1 ; b: data 3, prog 1.
        let a = profile("a", standard_files(), &[(0, 0, 1), (2, 0, 1), (3, 0, 1), (0, 1, 1)]);
        let b_files =
            vec![file("/app/share/data", 10_000, None), file("/app/bin/prog", 40_000, Some("aa"))];
        let b = profile("b", b_files, &[(0, 3, 1), (1, 1, 1)]);
        let r = hot_list_from_profiles(
            Path::new("/app"),
            vec![a, b],
            &ProfileMapping::default(),
            &fake(),
        )
        .unwrap();
        // Ranks: prog0 0, data3 0 (b), libx0 1/4, data0 2/4, prog1 2/4 (b; 3/4 in a).
        // Equal ranks by file (first seen in the merge: prog, libx, data), then page.
        assert_eq!(
            touches(&r),
            [
                ("bin/prog", 0, 4096),
                ("share/data", 3 * 4096, 4096),
                ("lib/libx.so", 0, 4096),
                ("bin/prog", 4096, 4096),
                ("share/data", 0, 4096),
            ]
        );
    }

    #[test]
    fn a_profile_without_pages_is_refused() {
        let mut p = profile("a", vec![], &[]);
        p.pages = None;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        p.write(&path).unwrap();
        let err = read_profiles(&[path]).unwrap_err();
        assert!(err.to_string().contains("--pages"), "{err}");
    }

    #[test]
    fn the_real_files_give_size_mtime_and_no_build_id_for_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, b"abc").unwrap();
        let got = RealFiles.identify(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(got, FileIdentity { size: 3, mtime: meta.mtime(), build_id: None });
        let exe = std::env::current_exe().unwrap();
        assert!(RealFiles.identify(&exe).unwrap().build_id.is_some(), "test binaries have one");
    }

    #[test]
    fn the_real_files_are_found_by_inode_under_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/__pycache__")).unwrap();
        let pyc = dir.path().join("a/__pycache__/m.pyc");
        std::fs::write(&pyc, b"x").unwrap();
        std::os::unix::fs::symlink(&pyc, dir.path().join("link")).unwrap();
        let meta = std::fs::metadata(&pyc).unwrap();
        let dev = format!("{}:{}", libc::major(meta.dev()), libc::minor(meta.dev()));
        let found = RealFiles.inodes(dir.path());
        assert_eq!(found.get(&(dev, meta.ino())).map(String::as_str), Some("a/__pycache__/m.pyc"));
        assert_eq!(found.len(), 1, "links are not followed: {found:?}");
    }
}
