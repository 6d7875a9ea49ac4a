//! Publishing a bundle to an S3 bucket: `coldstart publish BUNDLE s3://BUCKET/PREFIX`.
//!
//! A reader must never see half a bundle, and a bundle published again should cost only what
//! changed. So:
//!
//! 1. the bucket is listed under the prefix (ListObjectsV2) once;
//! 2. the content-addressed objects (a file name of 64 hex digits: the cold objects) are
//!    uploaded, in parallel, unless an object of that key and size is there already: their
//!    bytes cannot differ;
//! 3. then every other object (top-level files a bundle does not need) whose SHA-256, kept in the
//!    object's `x-amz-meta-coldstart-sha256` and read with HEAD, differs from the file's;
//! 4. last, one after the other, `signature.json` (of a signed bundle), `manifest.json`,
//!    `manifest.json.zst` and `start`, the objects a reader starts from: until the first of
//!    them is replaced, readers see the previous bundle whole, and every blob the new manifest
//!    names is there before it. (A reader with `--trust` that comes between the signature and
//!    the manifest is refused, not misled: the signature does not match the manifest it read.)
//!
//! Nothing is deleted: objects of earlier bundles stay for the readers that still use them.
//! The hot pieces are in `start` alone, so a reader that read the manifest of one build from
//! `manifest.json.zst` and then reads a hot piece after `start` was replaced by another
//! build's gets bytes that fail the piece's SHA-256: refused and fetched again, never used.
//! Every request keeps the fetcher's bounds ([`crate::remote`]: connect and I/O timeouts, the
//! minimum rate of answers, retries with back-off, cancellation).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use coldstart_error::Category;
use sha2::{Digest, Sha256};

use crate::remote::{fetch_error, io_error, says_https_port, with_retries, S3_HTTPS};
use crate::remote::{FetchError, FetchOptions, FetchStats};
use crate::s3::{sigv4, Bucket, Env, S3Error, S3Settings, S3Url};
use crate::sign::SIGNATURE;
use crate::start::{MANIFEST_JSON, MANIFEST_ZST, START_OBJECT};

/// The objects a reader starts from, in the order they are replaced: last of all.
pub const ENTRY_OBJECTS: [&str; 4] = [SIGNATURE, MANIFEST_JSON, MANIFEST_ZST, START_OBJECT];
/// The metadata header that holds an object's SHA-256.
pub const SHA256_META: &str = "x-amz-meta-coldstart-sha256";
/// The longest listing page read.
const MAX_LIST_PAGE: u64 = 16 << 20;

/// How to publish.
#[derive(Clone, Default)]
pub struct PublishOptions {
    /// Bounds, retries, cancellation, `--ca-file`; `connections` is the number of uploads in
    /// flight.
    pub fetch: FetchOptions,
    /// `--endpoint` and `--region`.
    pub s3: S3Settings,
    /// Called after each object is uploaded or found there.
    pub progress: Option<Arc<ProgressFn>>,
}

/// A progress callback.
pub type ProgressFn = dyn Fn(&Progress) + Send + Sync;

/// How far a publish has come.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub objects_done: usize,
    pub objects: usize,
    pub bytes_done: u64,
    pub bytes: u64,
}

/// What a publish did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PublishReport {
    pub url: String,
    /// Who it was done as (the access key ID and where it came from, or none).
    pub credentials: String,
    /// Objects in the bundle.
    pub objects: usize,
    pub bundle_bytes: u64,
    /// Objects uploaded, and their bytes.
    pub uploaded: usize,
    pub uploaded_bytes: u64,
    /// Objects already in the bucket with the same content.
    pub present: usize,
    /// HTTP requests sent (listing, HEADs, uploads, retries).
    pub requests: u64,
    /// The bucket refused the listing (a key without s3:ListBucket): every object was asked
    /// for with HEAD instead.
    pub listing_refused: bool,
    pub failed_attempts: u64,
}

/// Why a bundle could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(
        "{0} is not a bundle (no manifest.json in it): give the directory `coldstart pack` wrote"
    )]
    NotBundle(PathBuf),
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(
        "interrupted: the bucket's manifest was not replaced, readers see the previous bundle"
    )]
    Cancelled,
}

impl PublishError {
    pub fn category(&self) -> Category {
        match self {
            PublishError::NotBundle(_) => Category::Usage,
            PublishError::Read { .. } | PublishError::Cancelled => Category::Environment,
            PublishError::S3(e) => e.category(),
            PublishError::Fetch(e) => e.category(),
        }
    }
}

/// A file of the bundle.
#[derive(Debug, Clone)]
struct Object {
    /// Its path in the bundle, `/`-separated: the key after the prefix.
    rel: String,
    path: PathBuf,
    size: u64,
}

/// Which step an object is uploaded in (see the module's documentation).
fn step(rel: &str) -> usize {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        0
    } else if let Some(i) = ENTRY_OBJECTS.iter().position(|e| *e == rel) {
        3 + i
    } else if rel.contains('/') {
        1
    } else {
        2
    }
}

/// The bundle's files, hidden ones (a name starting with `.`) left out.
fn walk(root: &Path) -> Result<Vec<Object>, PublishError> {
    let mut out = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = dirs.pop() {
        let read = |source| PublishError::Read { path: dir.clone(), source };
        for e in std::fs::read_dir(&dir).map_err(read)? {
            let e = e.map_err(read)?;
            let Some(name) = e.file_name().to_str().map(str::to_owned) else { continue };
            if name.starts_with('.') {
                continue;
            }
            let path = e.path();
            let meta = std::fs::metadata(&path)
                .map_err(|source| PublishError::Read { path: path.clone(), source })?;
            let rel = format!("{rel}{name}");
            if meta.is_dir() {
                dirs.push((path, format!("{rel}/")));
            } else if meta.is_file() {
                out.push(Object { rel, path, size: meta.len() });
            }
        }
    }
    out.sort_by(|a, b| (step(&a.rel), &a.rel).cmp(&(step(&b.rel), &b.rel)));
    Ok(out)
}

/// The SHA-256 of a file, read in pieces.
fn file_sha256(path: &Path) -> Result<String, PublishError> {
    let read = |source| PublishError::Read { path: path.to_owned(), source };
    let mut f = std::fs::File::open(path).map_err(read)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(read)?;
        if n == 0 {
            return Ok(sigv4::hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

/// Requests to one bucket, each within the fetcher's bounds (also how learn records are
/// written to and read from a bucket: [`crate::learn::store`]).
pub(crate) struct Client {
    agent: ureq::Agent,
    pub(crate) bucket: Bucket,
    opts: FetchOptions,
    pub(crate) stats: FetchStats,
}

/// An answer: status, the headers wanted, the body (bounded).
pub(crate) struct Answer {
    pub(crate) status: u16,
    meta_sha256: Option<String>,
    /// `Content-Length`: the object's size, for a HEAD.
    length: Option<u64>,
    pub(crate) body: Vec<u8>,
}

/// What a request sends.
#[derive(Clone, Copy)]
pub(crate) enum Body<'a> {
    None,
    /// A file's bytes, read as they are sent.
    File(&'a Path),
    Bytes(&'a [u8]),
}

impl Client {
    /// A client of `bucket`, every request within the bounds of `opts`.
    pub(crate) fn new(bucket: Bucket, opts: &FetchOptions) -> Result<Client, FetchError> {
        Ok(Client {
            agent: crate::remote::agent(opts, bucket.https())?,
            bucket,
            opts: opts.clone(),
            stats: FetchStats::default(),
        })
    }

    /// One request, retried as a fetch is; a 4xx answer (but 408 and 429) is an [`S3Error`].
    pub(crate) fn send(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        headers: &[(String, String)],
        body: Body<'_>,
        max_body: u64,
    ) -> Result<Answer, FetchError> {
        let what = self.bucket.describe(key);
        let payload = match body {
            Body::File(p) => file_sha256(p).map_err(|e| match e {
                PublishError::Read { source, .. } => {
                    FetchError::Io { url: p.display().to_string(), source }
                }
                _ => unreachable!("file_sha256 only fails reading"),
            })?,
            Body::Bytes(b) => sigv4::hex(&Sha256::digest(b)),
            Body::None => sigv4::EMPTY_SHA256.to_owned(),
        };
        with_retries(&self.opts, &self.stats, &what, || {
            let signed = self.bucket.request(method, key, query, headers, &payload);
            let url = signed.url.as_str();
            let builder = ureq::http::Request::builder().method(method).uri(url);
            let builder = signed.headers.iter().fold(builder, |b, (k, v)| b.header(k, v));
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let result = match body {
                Body::Bytes(b) => {
                    let req = builder
                        .header("content-length", b.len().to_string())
                        .body(b)
                        .map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
                    self.agent.run(req)
                }
                Body::File(p) => {
                    let file = std::fs::File::open(p).map_err(|source| FetchError::Io {
                        url: p.display().to_string(),
                        source,
                    })?;
                    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                    let req = builder
                        .header("content-length", len.to_string())
                        .body(ureq::SendBody::from_owned_reader(file))
                        .map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
                    self.agent.run(req)
                }
                Body::None => {
                    let req =
                        builder.body(()).map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
                    self.agent.run(req)
                }
            };
            let resp = result.map_err(|e| fetch_error(&what, e))?;
            let status = resp.status().as_u16();
            let meta_sha256 =
                resp.headers().get(SHA256_META).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let length = resp
                .headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let mut data = Vec::new();
            resp.into_body()
                .into_reader()
                .take(max_body + 1)
                .read_to_end(&mut data)
                .map_err(|e| io_error(&what, e))?;
            if data.len() as u64 > max_body {
                let detail = format!("an answer longer than the {max_body} bytes read");
                return Err(FetchError::Protocol { url: what.clone(), detail });
            }
            match status {
                200..=299 => Ok(Answer { status, meta_sha256, length, body: data }),
                404 if method == "HEAD" => Ok(Answer { status, meta_sha256, length, body: data }),
                400 if !self.bucket.https() && says_https_port(&data) => {
                    Err(FetchError::HttpsPort { url: what.clone(), fix: S3_HTTPS.into() })
                }
                301 | 400..=407 | 409..=428 | 430..=499 => {
                    Err(FetchError::from(self.bucket.refusal(key, status, &data)))
                }
                _ => Err(FetchError::Status { url: what.clone(), status }),
            }
        })
        .map_err(|e| match e {
            // A refusal is not retried: its message says it all.
            FetchError::GaveUp { last, .. } if matches!(*last, FetchError::S3(_)) => *last,
            e => e,
        })
    }

    /// The keys under `prefix` (empty or ending in `/`) and their sizes.
    ///
    /// The listing asks for the prefix without its final `/` and keeps the keys under the
    /// prefix itself: a `/` in a query value is signed as `%2F`, and moto (whose web framework
    /// decodes the query before the signature is checked) would refuse the signature of a
    /// one-level prefix otherwise. AWS accepts either.
    pub(crate) fn list(
        &self,
        prefix: &str,
    ) -> Result<std::collections::HashMap<String, u64>, FetchError> {
        let mut keys = std::collections::HashMap::new();
        let mut token: Option<String> = None;
        let asked = prefix.strip_suffix('/').unwrap_or(prefix);
        loop {
            let mut query = vec![("list-type", "2"), ("prefix", asked)];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let a = self.send("GET", "", &query, &[], Body::None, MAX_LIST_PAGE)?;
            let text = String::from_utf8_lossy(&a.body);
            for c in crate::s3::xml_all(&text, "Contents") {
                let key = crate::s3::xml_text(c, "Key");
                let size = crate::s3::xml_text(c, "Size").and_then(|s| s.trim().parse().ok());
                if let (Some(k), Some(s)) = (key, size) {
                    if k.starts_with(prefix) {
                        keys.insert(k, s);
                    }
                }
            }
            let truncated = crate::s3::xml_text(&text, "IsTruncated").is_some_and(|t| t == "true");
            token = crate::s3::xml_text(&text, "NextContinuationToken");
            if !truncated || token.is_none() {
                return Ok(keys);
            }
        }
    }
}

/// Uploads the bundle at `bundle` to `url` (`s3://BUCKET[/PREFIX]`), with the settings of
/// `opts.s3` over those of `env` (see [`crate::s3`]).
pub fn publish(
    bundle: &Path,
    url: &str,
    opts: &PublishOptions,
    env: &dyn Env,
) -> Result<PublishReport, PublishError> {
    let s3 = S3Url::parse(url)?;
    if !bundle.join(MANIFEST_JSON).is_file() {
        return Err(PublishError::NotBundle(bundle.to_owned()));
    }
    let bucket = Bucket::resolve(&s3, &opts.s3, env)?;
    let objects = walk(bundle)?;
    let client = Client::new(bucket, &opts.fetch)?;
    let mut report = PublishReport {
        url: s3.to_string(),
        credentials: client.bucket.who(),
        objects: objects.len(),
        bundle_bytes: objects.iter().map(|o| o.size).sum(),
        ..PublishReport::default()
    };
    // Without s3:ListBucket the listing is refused: each object is then asked for with HEAD
    // (s3:GetObject), which such a key may do. A refused signature or key is still an error.
    let listed = match client.list(&s3.prefix) {
        Ok(keys) => Some(keys),
        Err(FetchError::S3(e)) if e.is_policy_denial() => {
            report.listing_refused = true;
            None
        }
        Err(e) => return Err(e.into()),
    };
    // What the bucket holds at `key`: its size from the listing, or with the listing refused,
    // from a HEAD (whose answer is kept for the entry objects' content check). AWS answers a
    // HEAD of a missing key 403 to a key that may not list: absent too.
    let present = |key: &str| -> Result<(Option<u64>, Option<Answer>), FetchError> {
        match &listed {
            Some(keys) => Ok((keys.get(key).copied(), None)),
            None => match client.send("HEAD", key, &[], &[], Body::None, 0) {
                Ok(a) if a.status == 404 => Ok((None, None)),
                Ok(a) => Ok((a.length, Some(a))),
                Err(FetchError::S3(e)) if e.is_policy_denial() => Ok((None, None)),
                Err(e) => Err(e),
            },
        }
    };
    let progress =
        Progress { objects: objects.len(), bytes: report.bundle_bytes, ..Progress::default() };
    let done = (AtomicUsize::new(0), AtomicU64::new(0));
    let uploaded = (AtomicUsize::new(0), AtomicU64::new(0));
    let tick = |o: &Object, sent: bool| {
        let n = done.0.fetch_add(1, Ordering::Relaxed) + 1;
        let b = done.1.fetch_add(o.size, Ordering::Relaxed) + o.size;
        if sent {
            uploaded.0.fetch_add(1, Ordering::Relaxed);
            uploaded.1.fetch_add(o.size, Ordering::Relaxed);
        }
        if let Some(f) = &opts.progress {
            f(&Progress { objects_done: n, bytes_done: b, ..progress });
        }
    };
    let one = |o: &Object| -> Result<(), PublishError> {
        let key = format!("{}{}", s3.prefix, o.rel);
        let addressed = step(&o.rel) == 0;
        let (size, head) = present(&key)?;
        if addressed && size == Some(o.size) {
            tick(o, false);
            return Ok(());
        }
        let sha = file_sha256(&o.path)?;
        if !addressed && size == Some(o.size) {
            let head = match head {
                Some(h) => h,
                None => client.send("HEAD", &key, &[], &[], Body::None, 0)?,
            };
            if head.status != 404 && head.meta_sha256.as_deref() == Some(sha.as_str()) {
                tick(o, false);
                return Ok(());
            }
        }
        let cache = if addressed { "public, max-age=31536000, immutable" } else { "no-cache" };
        let headers =
            vec![("cache-control".to_owned(), cache.to_owned()), (SHA256_META.to_owned(), sha)];
        client.send("PUT", &key, &[], &headers, Body::File(&o.path), 64 << 10)?;
        tick(o, true);
        Ok(())
    };
    let cancel = &opts.fetch.cancel;
    // Steps 0 to 2 in parallel, each finished before the next starts; the entry objects one
    // by one.
    for s in 0..3 + ENTRY_OBJECTS.len() {
        let batch: Vec<&Object> = objects.iter().filter(|o| step(&o.rel) == s).collect();
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let workers = if s < 3 { opts.fetch.connections.clamp(1, 64).min(batch.len()) } else { 1 };
        let errors: Vec<PublishError> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| -> Result<(), PublishError> {
                        loop {
                            if failed.load(Ordering::Relaxed) || cancel.is_cancelled() {
                                return Ok(());
                            }
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(o) = batch.get(i) else { return Ok(()) };
                            if let Err(e) = one(o) {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().expect("an upload thread panicked").err())
                .collect()
        });
        if let Some(e) = errors.into_iter().next() {
            return Err(match e {
                PublishError::Fetch(f) if f.is_cancelled() => PublishError::Cancelled,
                e => e,
            });
        }
        if cancel.is_cancelled() {
            return Err(PublishError::Cancelled);
        }
    }
    report.uploaded = uploaded.0.load(Ordering::Relaxed);
    report.uploaded_bytes = uploaded.1.load(Ordering::Relaxed);
    report.present = report.objects - report.uploaded;
    report.requests = client.stats.requests.load(Ordering::Relaxed);
    report.failed_attempts = client.stats.failures.load(Ordering::Relaxed);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_go_first_and_the_objects_readers_start_from_last() {
        let blob = format!("blobs/cold/ab/{}", "ab".repeat(32));
        let mut rels = vec![
            START_OBJECT.to_owned(),
            MANIFEST_ZST.to_owned(),
            "blobs/other".to_owned(),
            MANIFEST_JSON.to_owned(),
            "notes.txt".to_owned(),
            SIGNATURE.to_owned(),
            blob.clone(),
        ];
        rels.sort_by_key(|r| step(r));
        assert_eq!(
            rels,
            [
                &blob,
                "blobs/other",
                "notes.txt",
                SIGNATURE,
                MANIFEST_JSON,
                MANIFEST_ZST,
                START_OBJECT
            ]
        );
        // A name of 64 characters that are not all hex is not content-addressed.
        assert_eq!(step(&format!("blobs/x/{}", "g".repeat(64))), 1);
    }

    #[test]
    fn a_directory_without_a_manifest_is_refused_before_any_request() {
        let d = tempfile::tempdir().unwrap();
        let opts = PublishOptions::default();
        let env = crate::s3::ProcessEnv;
        let err = publish(d.path(), "s3://bucket/p", &opts, &env).unwrap_err();
        assert!(matches!(err, PublishError::NotBundle(_)), "{err}");
        assert_eq!(err.category(), Category::Usage);
        let err = publish(d.path(), "http://bucket/p", &opts, &env).unwrap_err();
        assert!(matches!(err, PublishError::S3(S3Error::Url(_))), "{err}");
    }
}
