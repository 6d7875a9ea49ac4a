//! The emulated slow storage of a measurement (`--storage`): created with the program's files
//! once, handed to the executor, and torn down at the end, on an error, or on an interrupt (by its `Drop`).

use std::path::PathBuf;
use std::sync::Mutex;

use super::files::device_files;
use super::options::{MeasureError, MeasureOptions, StorageOptions};
use crate::launch::{Executor, RunStorage};
use coldstart_formats::measure::StorageInfo;
use coldstart_storage::{EmulatedStorage, StorageError};

/// The emulated storage of a measurement. Dropping it (at the end, on an error, or when an
/// interrupt ends the measurement with [`coldstart_process::cancel::Interrupted`]) unmounts,
/// detaches the loop device and deletes the backing file.
pub(super) struct Emulation {
    storage: Mutex<Option<EmulatedStorage>>,
}

impl Emulation {
    fn create(so: &StorageOptions, paths: &[PathBuf]) -> Result<Emulation, StorageError> {
        let created = EmulatedStorage::create(&so.profile, paths, &so.work_dir)?;
        Ok(Emulation { storage: Mutex::new(Some(created)) })
    }

    /// Work with the emulation.
    pub(super) fn with<R>(
        &self,
        f: impl FnOnce(&mut EmulatedStorage) -> Result<R, StorageError>,
    ) -> Result<R, MeasureError> {
        match self.storage.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(s) => Ok(f(s)?),
            None => Err(MeasureError::Invalid("the emulated storage was closed".into())),
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
        let taken = self.storage.into_inner().unwrap_or_else(|e| e.into_inner());
        taken.map_or(Ok(()), EmulatedStorage::close)
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
        host_read_iops.and_then(|iops| coldstart_storage::fidelity_warning(&so.profile, iops));
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
