//! A bundle in a local directory, read through the same [`Remote`] trait as a server's.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::{FetchError, FetchOptions, FetchStats, Remote, Sink, Span};

/// A bundle in a local directory.
#[derive(Debug)]
pub struct DirRemote {
    root: PathBuf,
    opts: FetchOptions,
    stats: FetchStats,
}

impl DirRemote {
    pub fn new(root: &Path, opts: FetchOptions) -> DirRemote {
        DirRemote { root: root.to_path_buf(), opts, stats: FetchStats::default() }
    }
}

impl Remote for DirRemote {
    fn fetch(&self, path: &str, span: Span, sink: Sink<'_>) -> Result<u64, FetchError> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let url = self.describe(path);
        if !crate::manifest::is_safe_path(path) {
            return Err(FetchError::NoSuchFile { path: url });
        }
        let io = |source| FetchError::Io { url: url.clone(), source };
        let mut f = std::fs::File::open(self.root.join(path)).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                FetchError::NoSuchFile { path: url.clone() }
            } else {
                io(e)
            }
        })?;
        let size = f.metadata().map_err(io)?.len();
        let (start, end) = match span {
            Span::Range(s, e) => (s, e),
            Span::Whole { max } if size > max => {
                let detail = format!("{size} bytes, more than the {max} a reader takes");
                return Err(FetchError::Protocol { url, detail });
            }
            Span::Whole { .. } => (0, size),
        };
        if start > end || end > size {
            return Err(FetchError::Status { url, status: 416 });
        }
        f.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut left = end - start;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            if self.opts.cancel.is_cancelled() {
                return Err(FetchError::Cancelled { url });
            }
            let n = f.read(&mut buf[..left.min(65536) as usize]).map_err(io)?;
            if n == 0 {
                return Err(FetchError::Protocol { url, detail: "file shrank".into() });
            }
            self.stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
            if !sink(&buf[..n]) {
                return Err(FetchError::Aborted { url });
            }
            left -= n as u64;
        }
        Ok(end - start)
    }

    fn options(&self) -> &FetchOptions {
        &self.opts
    }

    fn stats(&self) -> &FetchStats {
        &self.stats
    }

    fn describe(&self, path: &str) -> String {
        self.root.join(path).display().to_string()
    }
}
