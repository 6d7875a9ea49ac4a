//! The emulated slow storage of a measurement (`--storage`): created with the program's files
//! once, handed to the executor, and torn down at the end, on an error, or on an interrupt.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::files::device_files;
use super::options::{MeasureError, MeasureOptions, StorageOptions};
use crate::launch::{Executor, RunStorage};
use crate::result::StorageInfo;
use crate::storage::{EmulatedStorage, StorageError};

/// The emulated storage of a measurement, shared with the interrupt handler: an interrupt
/// ends the process with `exit`, so the handler takes the emulation out and drops it (which
/// unmounts, detaches the loop device and deletes the backing file) after killing the runs.
pub(super) struct Emulation {
    storage: Arc<Mutex<Option<EmulatedStorage>>>,
    hook: u64,
}

impl Emulation {
    /// Create the emulation with the interrupt hook already registered: an interrupt during
    /// the creation (mkfs, the copy) waits for it to end, successfully or not, and then tears
    /// down what was made.
    fn create(so: &StorageOptions, paths: &[PathBuf]) -> Result<Emulation, StorageError> {
        let storage = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&storage);
        let mut slot = storage.lock().unwrap_or_else(|e| e.into_inner());
        let hook = crate::cgroup::register_interrupt_hook(move || {
            drop(shared.lock().unwrap_or_else(|e| e.into_inner()).take());
        });
        match EmulatedStorage::create(&so.profile, paths, &so.work_dir) {
            Ok(created) => *slot = Some(created),
            Err(e) => {
                drop(slot);
                crate::cgroup::unregister_interrupt_hook(hook);
                return Err(e);
            }
        }
        drop(slot);
        Ok(Emulation { storage, hook })
    }

    /// Work with the emulation; an error once an interrupt has torn it down (the process is
    /// about to exit then).
    pub(super) fn with<R>(
        &self,
        f: impl FnOnce(&mut EmulatedStorage) -> Result<R, StorageError>,
    ) -> Result<R, MeasureError> {
        let mut guard = self.storage.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(s) => Ok(f(s)?),
            None => Err(MeasureError::Interrupted),
        }
    }

    /// `files` as the host sees the copies: a file under a copied entry is evicted and
    /// checked at its place under the mount point (the same inode the run sees through the
    /// bind mount), any other file where it is.
    pub(super) fn on_copy(&self, files: &[PathBuf]) -> Result<Vec<PathBuf>, MeasureError> {
        self.with(|s| {
            Ok(files
                .iter()
                .map(|f| {
                    if s.entries().iter().any(|e| f.starts_with(e)) {
                        s.emulated_path(f)
                    } else {
                        f.clone()
                    }
                })
                .collect())
        })
    }

    pub(super) fn close(self) -> Result<(), StorageError> {
        crate::cgroup::unregister_interrupt_hook(self.hook);
        let taken = self.storage.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.map_or(Ok(()), EmulatedStorage::close)
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        crate::cgroup::unregister_interrupt_hook(self.hook);
        drop(self.storage.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// Create the emulated device with the program's files and hand it to the executor.
pub(super) fn start_emulation(
    opts: &MeasureOptions,
    so: &StorageOptions,
    discovered: &[Vec<PathBuf>],
    exec: &mut dyn Executor,
) -> Result<(Emulation, StorageInfo, Option<String>), MeasureError> {
    let paths: Vec<PathBuf> = match &so.app_dir {
        Some(d) => vec![d.clone()],
        None => {
            let mut all = Vec::new();
            for (i, files) in discovered.iter().enumerate() {
                all.extend(device_files(files, &opts.commands[i])?);
            }
            all.sort();
            all.dedup();
            all
        }
    };
    let emulation = Emulation::create(so, &paths)?;
    let (host_read_iops, run_storage, entries) = emulation.with(|s| {
        Ok::<_, StorageError>((
            s.host_random_read_iops(200)?,
            RunStorage::of(s)?,
            s.entries().to_vec(),
        ))
    })?;
    exec.set_storage(Some(run_storage))?;
    let fidelity =
        host_read_iops.and_then(|iops| crate::storage::fidelity_warning(&so.profile, iops));
    let info = StorageInfo {
        profile: so.profile.name.clone(),
        read_iops: so.profile.read_iops,
        read_bps: so.profile.read_bps,
        readahead_kb: so.profile.readahead_kb,
        seek: so.profile.seek,
        paths: entries,
        host_read_iops,
        fidelity_warning: fidelity.clone(),
    };
    Ok((emulation, info, fidelity))
}
