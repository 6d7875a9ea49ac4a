//! The file system on the real kernel: FUSE mounts of a bundle served over HTTP.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use coldstart_bundle::{pack, FetchOptions, HotList, PackOptions, Touch};
use coldstart_lazyfs::{is_mount_point, mount, MountError, MountOptions, Strategy};
use coldstart_serve::serve;

/// Lazily unmounts on drop, so a failed test leaves no stale mount.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mount_point(&self.0) {
            let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.0).status();
        }
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    files: Vec<(&'static str, Vec<u8>)>,
}

impl Fixture {
    fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    fn mountpoint(&self, name: &str) -> (PathBuf, Unmount) {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        (p.clone(), Unmount(p))
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("lib")).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let small = b"hello from the bundle\n".to_vec();
    std::fs::write(src.join("lib/big.so.1"), &big).unwrap();
    std::fs::write(src.join("run.sh"), &small).unwrap();
    std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("big.so.1", src.join("lib/big.so")).unwrap();
    let hot = HotList {
        touches: vec![
            Touch { path: "run.sh".into(), offset: 0, length: 22 },
            Touch { path: "lib/big.so.1".into(), offset: 200_000, length: 4096 },
        ],
        ..HotList::default()
    };
    pack(
        &src,
        &hot,
        &PackOptions { chunk_size: 16 * 1024, ..PackOptions::default() },
        &dir.path().join("bundle"),
    )
    .unwrap();
    Fixture { dir, files: vec![("lib/big.so.1", big), ("run.sh", small), ("lib/big.so", vec![])] }
}

fn quick(strategy: Strategy, cache: &Path) -> MountOptions {
    let mut o = MountOptions::new(strategy, cache.to_path_buf());
    o.fetch = FetchOptions {
        retries: 2,
        backoff: Duration::from_millis(20),
        connect_timeout: Duration::from_secs(1),
        io_timeout: Duration::from_secs(2),
        ..FetchOptions::default()
    };
    o.read_timeout = Some(Duration::from_secs(5));
    o
}

#[test]
fn every_strategy_presents_the_tree_with_the_right_bytes() {
    let f = fixture();
    let server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    for s in Strategy::ALL {
        let cache = f.dir.path().join(format!("cache-{s}"));
        let (mp, _guard) = f.mountpoint(&format!("mnt-{s}"));
        let m = mount(&server.url(), &mp, quick(s, &cache)).unwrap();
        for (path, data) in &f.files[..2] {
            assert_eq!(&std::fs::read(mp.join(path)).unwrap(), data, "{s}: {path}");
        }
        assert_eq!(std::fs::read_link(mp.join("lib/big.so")).unwrap(), Path::new("big.so.1"));
        assert_eq!(std::fs::read(mp.join("lib/big.so")).unwrap(), f.files[0].1);
        let meta = std::fs::metadata(mp.join("run.sh")).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o7777), (22, 0o750));
        let mut names: Vec<String> = std::fs::read_dir(&mp)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["lib", "run.sh"]);
        assert!(std::fs::write(mp.join("new"), b"x").is_err(), "read-only");
        let report = m.unmount().unwrap();
        assert!(!is_mount_point(&mp), "{s}: unmounted");
        assert_eq!(report.errors, 0, "{s}");
        assert!(report.bytes_fetched >= 300_000, "{s}: {report:?}");
        // The hot-set strategies read the manifest and the hot set in one request.
        let source = match s {
            Strategy::Original | Strategy::Paged => "manifest.json.zst",
            _ => "start",
        };
        assert_eq!(report.manifest_source, source, "{s}");
        assert_eq!(report.manifest_fallback, None, "{s}");
    }
    // A start object whose header cannot be used and no compressed manifest: both fall back
    // to manifest.json, and still read the hot pieces with Ranges of the start object.
    let start = f.bundle().join("start");
    let mut object = std::fs::read(&start).unwrap();
    object[0] ^= 1;
    std::fs::write(&start, object).unwrap();
    std::fs::remove_file(f.bundle().join("manifest.json.zst")).unwrap();
    for s in [Strategy::Paged, Strategy::Stream] {
        let cache = f.dir.path().join(format!("cache-old-{s}"));
        let (mp, _guard) = f.mountpoint(&format!("mnt-old-{s}"));
        let m = mount(&server.url(), &mp, quick(s, &cache)).unwrap();
        assert_eq!(std::fs::read(mp.join("lib/big.so.1")).unwrap(), f.files[0].1, "{s}");
        let report = m.unmount().unwrap();
        assert_eq!(report.manifest_source, "manifest.json", "{s}");
        let why = report.manifest_fallback.unwrap();
        assert!(why.contains("manifest.json.zst") && why.contains("404"), "{s}: {why}");
        assert_eq!(why.contains("magic"), s == Strategy::Stream, "{s}: {why}");
        assert_eq!(report.errors, 0, "{s}");
    }
}

#[test]
fn refuses_a_non_empty_or_busy_mount_point() {
    let f = fixture();
    let url = f.bundle().display().to_string();
    let (mp, _guard) = f.mountpoint("full");
    std::fs::write(mp.join("x"), b"").unwrap();
    let err = mount(&url, &mp, quick(Strategy::Paged, &f.cache())).err().unwrap();
    assert!(matches!(err, MountError::NotEmpty(_)), "{err}");
    assert!(err.to_string().contains("not empty"));

    let (mp, _guard) = f.mountpoint("busy");
    let first = mount(&url, &mp, quick(Strategy::Paged, &f.cache())).unwrap();
    let err = mount(&url, &mp, quick(Strategy::Paged, &f.cache())).err().unwrap();
    assert!(matches!(err, MountError::Busy(_)), "{err}");
    drop(first);
    assert!(!is_mount_point(&mp));
}

#[test]
fn a_malformed_manifest_is_rejected_before_mounting() {
    let f = fixture();
    let path = f.bundle().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = text.replace("\"run.sh\"", "\"../run.sh\"");
    // In every copy a client may read: manifest.json, manifest.json.zst and the start object.
    let m = coldstart_bundle::Manifest::parse(text.as_bytes()).unwrap();
    let hot = std::fs::read(f.bundle().join("start")).unwrap()[m.hot.offset as usize..].to_vec();
    let (bad, start) = coldstart_bundle::start::rebuild(bad.as_bytes(), &hot).unwrap();
    std::fs::write(&path, &bad).unwrap();
    let zst = coldstart_bundle::start::compress_manifest(&bad);
    std::fs::write(f.bundle().join("manifest.json.zst"), zst).unwrap();
    std::fs::write(f.bundle().join("start"), start).unwrap();
    let (mp, _guard) = f.mountpoint("mnt");
    for s in [Strategy::Paged, Strategy::Stream] {
        let err =
            mount(&f.bundle().display().to_string(), &mp, quick(s, &f.cache())).err().unwrap();
        assert!(matches!(err, MountError::Manifest(_)), "{s}: {err}");
        assert!(err.to_string().contains("../run.sh"), "{s}: {err}");
        assert!(!is_mount_point(&mp));
    }
}

#[test]
fn a_corrupt_blob_reads_as_eio_not_wrong_bytes() {
    let f = fixture();
    let manifest = coldstart_bundle::Manifest::parse(
        &std::fs::read(f.bundle().join("manifest.json")).unwrap(),
    )
    .unwrap();
    let chunk = &manifest.entry("lib/big.so.1").unwrap().chunks[3];
    let (object, at) = manifest.locate(chunk);
    let blob = f.bundle().join(object);
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[at as usize + 100] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    let (mp, _guard) = f.mountpoint("mnt");
    let m = mount(&server.url(), &mp, quick(Strategy::Paged, &f.cache())).unwrap();
    let err = std::fs::read(mp.join("lib/big.so.1")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // Chunks before the damaged one read fine.
    let mut file = std::fs::File::open(mp.join("lib/big.so.1")).unwrap();
    let mut head = vec![0u8; 16 * 1024];
    std::io::Read::read_exact(&mut file, &mut head).unwrap();
    assert_eq!(head, f.files[0].1[..16 * 1024]);
    let report = m.unmount().unwrap();
    assert!(report.errors >= 1);
}

#[test]
fn a_dead_server_gives_eio_within_the_bound() {
    let f = fixture();
    let mut server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    let (mp, _guard) = f.mountpoint("mnt");
    let m = mount(&server.url(), &mp, quick(Strategy::Paged, &f.cache())).unwrap();
    assert_eq!(std::fs::read(mp.join("run.sh")).unwrap(), f.files[1].1);
    server.stop();
    let t = Instant::now();
    let err = std::fs::read(mp.join("lib/big.so.1")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // 3 attempts, 20 + 40 ms back-off, 1 s connect bound each: well under 5 s.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(m);
    assert!(!is_mount_point(&mp));
}

#[test]
fn two_concurrent_mounts_share_one_cache() {
    let f = fixture();
    let server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    let (a, _ga) = f.mountpoint("a");
    let (b, _gb) = f.mountpoint("b");
    let ma = mount(&server.url(), &a, quick(Strategy::Stream, &f.cache())).unwrap();
    let mb = mount(&server.url(), &b, quick(Strategy::Paged, &f.cache())).unwrap();
    std::thread::scope(|s| {
        for mp in [&a, &b, &a, &b] {
            s.spawn(|| {
                for (path, data) in &f.files[..2] {
                    assert_eq!(&std::fs::read(mp.join(path)).unwrap(), data);
                }
            });
        }
    });
    ma.unmount().unwrap();
    mb.unmount().unwrap();
    // Every cached chunk is intact, and a third mount is served from the cache alone.
    let (c, _gc) = f.mountpoint("c");
    let mc = mount(&server.url(), &c, quick(Strategy::Paged, &f.cache())).unwrap();
    for (path, data) in &f.files[..2] {
        assert_eq!(&std::fs::read(c.join(path)).unwrap(), data);
    }
    let report = mc.unmount().unwrap();
    assert_eq!((report.misses, report.errors), (0, 0), "{report:?}");
    // No temporary files left behind by racing writers.
    assert_eq!(std::fs::read_dir(f.cache().join("tmp")).unwrap().count(), 0);
}

#[test]
fn record_writes_the_first_touches() {
    let f = fixture();
    let (mp, _guard) = f.mountpoint("mnt");
    let rec = f.dir.path().join("rec.json");
    let mut o = quick(Strategy::Paged, &f.cache());
    o.record = Some(rec.clone());
    let m = mount(&f.bundle().display().to_string(), &mp, o).unwrap();
    std::fs::read(mp.join("run.sh")).unwrap();
    m.unmount().unwrap();
    let list = HotList::read(&rec).unwrap();
    assert_eq!(list.touches[0].path, "run.sh");
    assert_eq!(list.touches.len(), 1);
}

#[test]
fn auto_with_the_link_given_reads_the_start_object_and_keeps_it_only_for_a_hot_set_strategy() {
    use coldstart_lazyfs::model::LinkEstimate;
    use coldstart_lazyfs::AutoOptions;
    let f = fixture();
    let server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    // A slow, far link: a hot-set strategy, fed by the start object's request.
    let link = |bits: f64, ms: u64| LinkEstimate::given(bits, Duration::from_millis(ms));
    let mut o = quick(Strategy::Stream, &f.dir.path().join("cache-auto-slow"));
    o.auto = Some(AutoOptions { link: Some(link(1e6, 200)), ..AutoOptions::default() });
    let (mp, _guard) = f.mountpoint("mnt-auto-slow");
    let m = mount(&server.url(), &mp, o).unwrap();
    let chosen = m.choice().unwrap().chosen;
    assert_eq!(chosen, Strategy::ReorderedPaged, "{:?}", m.choice());
    assert_eq!(std::fs::read(mp.join("lib/big.so.1")).unwrap(), f.files[0].1);
    let r = m.unmount().unwrap();
    assert_eq!((r.manifest_source.as_str(), r.strategy.as_str()), ("start", "reordered-paged"));
    assert!(r.hot_chunks > 0, "the hot set came in the start object's request: {r:?}");

    // The link measured on the start object's own arrival: the same request serves.
    let mut o = quick(Strategy::Stream, &f.dir.path().join("cache-auto-measured"));
    o.auto = Some(AutoOptions::default());
    let (mp, _guard) = f.mountpoint("mnt-auto-measured");
    let m = mount(&server.url(), &mp, o).unwrap();
    let c = m.choice().unwrap().clone();
    assert!(c.link.bandwidth_estimated && c.link.latency_estimated, "{c:?}");
    assert_eq!(std::fs::read(mp.join("lib/big.so.1")).unwrap(), f.files[0].1);
    let r = m.unmount().unwrap();
    assert_eq!(r.manifest_source, "start", "{r:?}");
    assert_eq!(r.strategy, c.chosen.name());

    // Without a hot set, on a fast link with latency: `original`; the start object's request
    // is dropped and the files come whole.
    let bare = f.dir.path().join("bare");
    pack(
        &f.dir.path().join("src"),
        &HotList::default(),
        &PackOptions { chunk_size: 16 * 1024, ..PackOptions::default() },
        &bare,
    )
    .unwrap();
    let server = serve(&bare, "127.0.0.1:0", None).unwrap();
    let mut o = quick(Strategy::Stream, &f.dir.path().join("cache-auto-fast"));
    o.auto = Some(AutoOptions { link: Some(link(1e9, 100)), ..AutoOptions::default() });
    let (mp, _guard) = f.mountpoint("mnt-auto-fast");
    let m = mount(&server.url(), &mp, o).unwrap();
    assert_eq!(m.choice().unwrap().chosen, Strategy::Original, "{:?}", m.choice());
    for (path, data) in &f.files[..2] {
        assert_eq!(&std::fs::read(mp.join(path)).unwrap(), data, "{path}");
    }
    let r = m.unmount().unwrap();
    assert_eq!((r.manifest_source.as_str(), r.strategy.as_str()), ("start", "original"));
    assert_eq!((r.misses, r.errors), (0, 0), "{r:?}");
}

/// A process that entered a mount namespace of its own while the bundle was mounted (a
/// container, a sandbox, `unshare --mount`), holding the copy of the mount it got; killed on
/// drop.
struct NamespaceCopy(std::process::Child);

impl NamespaceCopy {
    fn enter() -> NamespaceCopy {
        use std::io::BufRead;
        let mut child = Command::new("unshare")
            .args(["--mount", "sh", "-c", "echo in; exec sleep 60"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line, "in\n", "the namespace was entered");
        NamespaceCopy(child)
    }
}

impl Drop for NamespaceCopy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn unmount_ends_the_session_while_another_namespace_holds_a_copy_of_the_mount() {
    let f = fixture();
    let server = serve(&f.bundle(), "127.0.0.1:0", None).unwrap();
    let (mp, _guard) = f.mountpoint("mnt");
    let m = mount(&server.url(), &mp, quick(Strategy::Paged, &f.cache())).unwrap();
    assert_eq!(std::fs::read(mp.join("run.sh")).unwrap(), f.files[1].1);
    // The copy keeps the file system's superblock, and with it the FUSE connection, alive
    // after this namespace's mount is gone: the unmount must not wait for it.
    let _copy = NamespaceCopy::enter();
    let t = Instant::now();
    let report = m.unmount().unwrap();
    let took = t.elapsed();
    assert!(!is_mount_point(&mp));
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(took < Duration::from_millis(500), "the unmount took {took:?}");
}
