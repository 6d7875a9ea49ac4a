//! One start of the measured command from the bundle: mount it with a run's options, run the
//! command to its end, unmount, and measure what the start fetched and waited for.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coldstart_formats::{AutoLink, CellRun};
use coldstart_lazyfs::model::LinkEstimate;
use coldstart_lazyfs::{MountRequest, NetworkRequest};

use crate::error::{io, ExperimentError};
use crate::options::{ExperimentOptions, GridLink, GridStrategy};

/// The mount's options for one run (on `link`: `auto-hint` is told it).
pub(crate) fn request(
    o: &ExperimentOptions,
    strategy: GridStrategy,
    link: Option<&GridLink>,
    cache: &Path,
    record: Option<PathBuf>,
) -> MountRequest {
    let given = link.filter(|_| strategy == GridStrategy::AutoHint);
    MountRequest {
        strategy: strategy.mount(),
        link_hint: given.map(|l| LinkEstimate::given(l.link.bits_per_second, l.link.latency)),
        cache_dir: Some(cache.to_owned()),
        record,
        network: NetworkRequest {
            cancel: o.cancel.clone(),
            min_rate: 1,
            ..NetworkRequest::default()
        },
        readahead: o.readahead,
    }
}

/// One start from the bundle at `url`: mount, run the command to its end, unmount. Beside the
/// run, what the command said on standard error when it failed
/// ([`coldstart_sys::stderr::said`]).
pub(crate) fn start(
    o: &ExperimentOptions,
    url: &str,
    req: MountRequest,
    command: &[String],
    n: usize,
) -> Result<(CellRun, String), ExperimentError> {
    let root = o.work.join(format!("mnt-{n}"));
    let _ = std::fs::remove_dir(&root);
    std::fs::create_dir_all(&root).map_err(io(format!("mount point {}", root.display())))?;
    let mut opts = req
        .options()
        .map_err(|source| ExperimentError::Mount { what: "options".into(), source })?;
    opts.remove_on_death = vec![root.clone()];
    let t0 = Instant::now();
    let mount =
        coldstart_lazyfs::mount(url, &root, opts).map_err(|source| ExperimentError::Mount {
            what: format!("mounting {}", coldstart_bundle::remote::redact_url(url)),
            source,
        })?;
    let chosen = mount.choice().map(|c| c.chosen.to_string());
    let auto_link = mount.choice().map(|c| AutoLink {
        bits_per_second: c.link.bytes_per_second * 8.0,
        latency_s: c.link.latency_ms / 1e3,
    });
    let stderr = coldstart_sys::stderr::StderrFile::new()
        .map_err(io("a memory file for the standard error"))?;
    let program = root.join(&command[0]);
    let argv = std::iter::once(program.as_os_str()).chain(command[1..].iter().map(OsStr::new));
    let spawner = coldstart_process::held::Spawner::new(&program, argv)
        .current_dir(&root)
        .env("COLDSTART_ROOT", &root)
        .null(0)
        .null(1)
        .fd(2, stderr.as_fd());
    let status = match mount.spawn(spawner) {
        Ok(mut group) => loop {
            if o.cancel.is_cancelled() {
                group.end(Duration::from_millis(200));
                break None;
            }
            match group.try_wait() {
                Ok(Some(s)) => {
                    group.end(Duration::from_secs(1));
                    break Some(s);
                }
                Ok(None) => std::thread::sleep(Duration::from_micros(500)),
                Err(_) => break None,
            }
        },
        Err(_) => None,
    };
    let program_s = t0.elapsed().as_secs_f64();
    let (report, result) = mount.close();
    let wall_s = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir(&root);
    result.map_err(|source| ExperimentError::Mount { what: "unmounting".into(), source })?;
    if o.cancel.is_cancelled() {
        return Err(ExperimentError::Interrupted);
    }
    Ok((
        CellRun {
            wall_s,
            bytes_fetched: report.bytes_fetched,
            requests: report.requests,
            stall_s: report.miss_wait_total_ms / 1e3,
            exit_code: status.and_then(|s| s.code()),
            chosen,
            teardown_s: Some(wall_s - program_s),
            held_out_misses: Some(report.held_out_misses),
            held_out_bytes: Some(report.held_out_bytes),
            other_bytes: Some(report.other_bytes),
            auto_link,
        },
        match status.is_some_and(|s| s.success()) {
            true => String::new(),
            false => coldstart_sys::stderr::said(&stderr.last_lines()),
        },
    ))
}
