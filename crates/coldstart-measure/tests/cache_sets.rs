//! The `warm` and `selective` file sets on a real process of the system.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use coldstart_measure::cache;

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The files a process maps, as a discovery run would list them (pseudo entries included).
fn mapped_files(pid: u32) -> Vec<PathBuf> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines().filter_map(|l| l.split_whitespace().nth(5)).map(PathBuf::from).collect()
}

#[test]
fn system_libraries_are_kept_warm_and_the_program_is_not() {
    let sleep = Kill(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = sleep.0.id();
    // Wait for exec to finish: the maps name the sleep binary once it has.
    let exe = fs::canonicalize(Path::new("/proc").join(pid.to_string()).join("exe")).unwrap();
    let mut discovered = Vec::new();
    for _ in 0..100 {
        discovered = mapped_files(pid);
        if discovered.iter().any(|p| p.to_string_lossy().contains("libc.so")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    discovered.push(PathBuf::from("/proc/self/status"));
    discovered.push(PathBuf::from("/dev/null"));
    let libc = discovered
        .iter()
        .find(|p| p.to_string_lossy().contains("libc.so"))
        .map(|p| fs::canonicalize(p).unwrap())
        .expect("sleep maps the C library");

    let selective = cache::selective_set(&discovered);
    assert!(selective.contains(&libc), "{selective:?}");
    assert!(selective.contains(&exe), "{selective:?}");
    assert!(selective.iter().all(|p| !p.starts_with("/proc") && !p.starts_with("/dev")));

    let warm = cache::warm_set(&discovered, &exe);
    assert!(warm.contains(&exe), "{warm:?}");
    assert!(!warm.contains(&libc), "{warm:?}");
    assert!(
        warm.iter().all(|p| !p.to_string_lossy().contains(".so")),
        "no system shared object is evicted in the warm state: {warm:?}"
    );
}
