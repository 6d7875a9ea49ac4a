//! Where learn records go (`--learn DEST`) and come from (`--learn-from SRC`): a directory, an
//! `s3://BUCKET/PREFIX/` (signed with the credentials `publish` uses: [`crate::s3`]) or an
//! `http[s]://` URL.
//!
//! - A directory (made if missing): each record is a file of its own, named so that no two
//!   starts take the same name ([`Record::unique_name`]), written atomically (a temporary file
//!   renamed into place).
//!   Read back: every `*.json` file in it (not hidden), or the one file named.
//! - `s3://BUCKET/PREFIX/`: one object per record under the prefix (one PUT). Read back: the
//!   prefix is listed (ListObjectsV2, 1,000 keys a request) and every `*.json` key fetched.
//! - `http[s]://HOST/PATH/`: the record is PUT to the URL's path with its name after it (and
//!   the URL's query after that, as for a signed URL). Read back: a URL whose path ends in
//!   `.json` is one record; the body of any other is a record, or a listing (an HTML index
//!   such as nginx's `autoindex` or Python's `http.server`, or nginx's JSON index) whose
//!   `*.json` names are each fetched.
//!
//! Every request keeps the fetcher's bounds ([`crate::remote`]); every record read is at most
//! [`MAX_RECORD_BYTES`] bytes, and a source yields at most [`MAX_SOURCE_RECORDS`] records.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use coldstart_error::Category;

use super::{Record, RecordError, MAX_RECORD_BYTES};
use crate::publish::{Body, Client};
use crate::remote::{fetch_error, with_retries, FetchError, FetchOptions, FetchStats};
use crate::s3::{Bucket, Env, S3Error, S3Settings, S3Url};

/// The most records one source yields.
pub const MAX_SOURCE_RECORDS: usize = 1_000_000;

/// A destination or source of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Dir(PathBuf),
    S3(S3Url),
    /// The URL as given.
    Http(String),
}

impl Place {
    /// `s3://...`, `http://...` or `https://...`, else a local path.
    pub fn parse(s: &str) -> Result<Place, StoreError> {
        if s.starts_with("s3://") {
            Ok(Place::S3(S3Url::parse(s)?))
        } else if s.starts_with("http://") || s.starts_with("https://") {
            crate::remote::split_url(s)
                .ok_or_else(|| StoreError::Fetch(FetchError::Url(crate::remote::redact_url(s))))?;
            Ok(Place::Http(s.to_owned()))
        } else if s.contains("://") {
            Err(StoreError::Fetch(FetchError::Url(crate::remote::redact_url(s))))
        } else {
            Ok(Place::Dir(PathBuf::from(s)))
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Dir(p) => write!(f, "{}", p.display()),
            Place::S3(u) => write!(f, "{u}"),
            Place::Http(u) => f.write_str(&crate::remote::redact_url(u)),
        }
    }
}

/// Why records could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}{}", path.display(), hint(source))]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("{} is not a directory: give a directory, an s3:// prefix or an http(s):// URL", .0.display())]
    NotDir(PathBuf),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("{0}: more than {MAX_SOURCE_RECORDS} records: merge a sample of them")]
    TooMany(String),
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => " (no such directory)",
        std::io::ErrorKind::PermissionDenied => " (choose a directory this user may write)",
        _ => "",
    }
}

impl StoreError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            StoreError::Dir { source, .. } => Category::of_io(source, Category::Environment),
            StoreError::NotDir(_) | StoreError::TooMany(_) => Category::Usage,
            StoreError::S3(e) => e.category(),
            StoreError::Fetch(e) => e.category(),
        }
    }
}

/// Writes `record` to `place` under a name of its own; returns where it went (for messages).
/// `s3` and `env` give an `s3://` place's settings and credentials.
pub fn write(
    place: &Place,
    record: &Record,
    opts: &FetchOptions,
    s3: &S3Settings,
    env: &dyn Env,
) -> Result<String, StoreError> {
    let name = record.unique_name();
    let bytes = record.to_bytes();
    match place {
        Place::Dir(dir) => {
            if dir.exists() && !dir.is_dir() {
                return Err(StoreError::NotDir(dir.clone()));
            }
            std::fs::create_dir_all(dir)
                .map_err(|source| StoreError::Dir { path: dir.clone(), source })?;
            let path = dir.join(&name);
            coldstart_fs::write_atomic(&path, &bytes)
                .map_err(|source| StoreError::Dir { path: path.clone(), source })?;
            Ok(path.display().to_string())
        }
        Place::S3(url) => {
            let client = Client::new(Bucket::resolve(url, s3, env)?, opts)?;
            let key = format!("{}{name}", url.prefix);
            let headers = vec![("content-type".to_owned(), "application/json".to_owned())];
            client.send("PUT", &key, &[], &headers, Body::Bytes(&bytes), 64 << 10)?;
            Ok(client.bucket.describe(&key))
        }
        Place::Http(url) => {
            let (base, query) = crate::remote::split_url(url)
                .ok_or_else(|| FetchError::Url(crate::remote::redact_url(url)))?;
            let target = match query {
                Some(q) => format!("{base}{name}?{q}"),
                None => format!("{base}{name}"),
            };
            let shown = crate::remote::redact_url(&target);
            let agent = crate::remote::agent(opts, base.starts_with("https://"))?;
            let stats = FetchStats::default();
            with_retries(opts, &stats, &shown, || {
                let req = ureq::http::Request::builder()
                    .method("PUT")
                    .uri(&target)
                    .header("content-type", "application/json")
                    .header("content-length", bytes.len().to_string())
                    .body(&bytes[..])
                    .map_err(|e| FetchError::Url(format!("{shown}: {e}")))?;
                let resp = agent.run(req).map_err(|e| fetch_error(&shown, e))?;
                match resp.status().as_u16() {
                    200..=299 => Ok(()),
                    status => Err(FetchError::Status { url: shown.clone(), status }),
                }
            })?;
            Ok(shown)
        }
    }
}

/// For an `http[s]://` URL whose path names a `.json` file (one record): the URL of its
/// directory (with the query, as a signed URL has it) and the file's name. `None` for any
/// other URL (a listing).
fn one_record(url: &str) -> Option<(String, String)> {
    let url = url.split_once('#').map_or(url, |(u, _)| u);
    let (path, query) = url.split_once('?').map_or((url, None), |(p, q)| (p, Some(q)));
    let (dir, name) = path.rsplit_once('/')?;
    if !name.ends_with(".json") || !dir.contains("://") || dir.ends_with(':') {
        return None;
    }
    let dir = match query {
        Some(q) => format!("{dir}/?{q}"),
        None => format!("{dir}/"),
    };
    Some((dir, name.to_owned()))
}

/// One record as read from a source: where it came from, and the record or why it was
/// refused.
pub type Read = (String, Result<Record, RecordError>);

/// Every record at `place` (see the module documentation), each checked and handed to `each`
/// as it is read (from several threads at once: fetched and parsed in parallel), so that a
/// fleet's records need not be in memory together. A record refused is handed over with its
/// error, not dropped: the caller says which and why. Returns how many were read.
pub fn for_each(
    place: &Place,
    opts: &FetchOptions,
    s3: &S3Settings,
    env: &dyn Env,
    each: &(dyn Fn(Read) + Sync),
) -> Result<usize, StoreError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match place {
        Place::Dir(path) => {
            let files = record_files(path)?;
            parallel(&files, cores, |f| {
                each((f.display().to_string(), read_file(f)?));
                Ok(())
            })?;
            Ok(files.len())
        }
        Place::S3(url) => {
            let client = Client::new(Bucket::resolve(url, s3, env)?, opts)?;
            let mut keys: Vec<String> = client
                .list(&url.prefix)?
                .into_iter()
                .filter(|(k, _)| k.ends_with(".json") && !k[url.prefix.len()..].contains('/'))
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            if keys.len() > MAX_SOURCE_RECORDS {
                return Err(StoreError::TooMany(url.to_string()));
            }
            let max = MAX_RECORD_BYTES as u64;
            parallel(&keys, opts.connections.max(cores), |key| {
                let what = client.bucket.describe(key);
                each(match client.send("GET", key, &[], &[], Body::None, max) {
                    Ok(a) => (what, Record::parse(&a.body)),
                    Err(e) => (what, Err(RecordError::Fetch(e.to_string()))),
                });
                Ok(())
            })?;
            Ok(keys.len())
        }
        Place::Http(url) => {
            // The URL of one record is fetched as given, not as a directory of them.
            let (dir, first) = one_record(url).unwrap_or_else(|| (url.clone(), String::new()));
            let remote = crate::remote::HttpRemote::new(&dir, opts.clone())?;
            let span = crate::remote::Span::Whole { max: MAX_RECORD_BYTES as u64 * 8 };
            let body = crate::remote::get(&remote, &first, span)?;
            let shown = crate::remote::redact_url(url);
            if body.first_non_space() == Some(b'{') {
                each((shown, Record::parse(&body)));
                return Ok(1);
            }
            let names = listing(&String::from_utf8_lossy(&body));
            if names.len() > MAX_SOURCE_RECORDS {
                return Err(StoreError::TooMany(shown));
            }
            let span = crate::remote::Span::Whole { max: MAX_RECORD_BYTES as u64 };
            parallel(&names, opts.connections.max(cores), |name| {
                let what = crate::remote::Remote::describe(&remote, name);
                each(match crate::remote::get(&remote, name, span) {
                    Ok(b) => (what, Record::parse(&b)),
                    Err(e) => (what, Err(RecordError::Fetch(e.to_string()))),
                });
                Ok(())
            })?;
            Ok(names.len())
        }
    }
}

/// Every record at `place`, in memory ([`for_each`]), in the order of their names.
pub fn read_all(
    place: &Place,
    opts: &FetchOptions,
    s3: &S3Settings,
    env: &dyn Env,
) -> Result<Vec<Read>, StoreError> {
    let all = std::sync::Mutex::new(Vec::new());
    for_each(place, opts, s3, env, &|r| all.lock().unwrap().push(r))?;
    let mut all = all.into_inner().unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(all)
}

/// Runs `one` over `items` on up to `threads` threads (at most 16); stops at the first error,
/// which it returns.
fn parallel<T: Sync>(
    items: &[T],
    threads: usize,
    one: impl Fn(&T) -> Result<(), StoreError> + Sync,
) -> Result<(), StoreError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, 16).min(items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                if let Err(e) = one(item) {
                    failed.lock().unwrap().get_or_insert(e);
                    next.store(items.len(), Ordering::Relaxed);
                    return;
                }
            });
        }
    });
    match failed.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

trait FirstNonSpace {
    fn first_non_space(&self) -> Option<u8>;
}

impl FirstNonSpace for Vec<u8> {
    fn first_non_space(&self) -> Option<u8> {
        self.iter().copied().find(|b| !b.is_ascii_whitespace())
    }
}

/// The record files of a directory (its `*.json` files, hidden ones left out, by name), or
/// the one record file `path` is.
fn record_files(path: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let err = |source| StoreError::Dir { path: path.to_path_buf(), source };
    if std::fs::metadata(path).map_err(err)?.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut v = Vec::new();
    for item in std::fs::read_dir(path).map_err(err)? {
        let item = item.map_err(err)?;
        let name = item.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if v.len() == MAX_SOURCE_RECORDS {
            return Err(StoreError::TooMany(path.display().to_string()));
        }
        v.push(item.path());
    }
    v.sort();
    Ok(v)
}

/// One record file, at most [`MAX_RECORD_BYTES`] of it read.
fn read_file(f: &Path) -> Result<Result<Record, RecordError>, StoreError> {
    use std::io::Read as _;
    let err = |source| StoreError::Dir { path: f.to_path_buf(), source };
    let file = std::fs::File::open(f).map_err(err)?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(err)?;
    Ok(Record::parse(&bytes))
}

/// The `*.json` names a listing links to, each once, in order: `href="NAME"` of an HTML
/// index, or `"name": "NAME"` of nginx's JSON one. Only plain names (no `/`, `?`, `#` or
/// `..`): a listing cannot send the reader elsewhere.
fn listing(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for marker in ["href=\"", "\"name\":\"", "\"name\": \""] {
        for piece in text.split(marker).skip(1) {
            let Some(end) = piece.find('"') else { continue };
            let name = &piece[..end];
            let plain = name.ends_with(".json")
                && !name.starts_with('.')
                && !name.contains(['/', '?', '#', '\\', '%', '&'])
                && !name.chars().any(|c| c.is_control() || c == ' ');
            if plain && seen.insert(name.to_owned()) {
                out.push(name.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_gives_plain_json_names_only() {
        let html = r#"<a href="a.json">a.json</a><a href="../x.json">x</a>
            <a href="sub/">sub/</a><a href="b.json">b</a><a href="a.json">again</a>
            <a href="http://evil/c.json">c</a><a href=".hidden.json">h</a>"#;
        assert_eq!(listing(html), ["a.json", "b.json"]);
        let json = r#"[{"name":"r1.json","type":"file"},{"name": "r2.json","type":"file"}]"#;
        assert_eq!(listing(json), ["r1.json", "r2.json"]);
    }

    #[test]
    fn a_url_of_a_json_file_is_one_record_at_its_directory() {
        let got = |u: &str| one_record(u);
        let pair = |d: &str, n: &str| Some((d.to_owned(), n.to_owned()));
        assert_eq!(got("https://h/learn/r.json"), pair("https://h/learn/", "r.json"));
        assert_eq!(got("https://h/r.json?X-Sig=1#x"), pair("https://h/?X-Sig=1", "r.json"));
        assert_eq!(got("https://h/learn/"), None);
        assert_eq!(got("https://h/learn"), None);
        assert_eq!(got("https://h.json"), None);
        assert_eq!(got("https://h/listing?f=.json"), None);
    }

    #[test]
    fn places_are_told_apart() {
        assert_eq!(Place::parse("/tmp/r").unwrap(), Place::Dir("/tmp/r".into()));
        assert!(matches!(Place::parse("s3://bucket/learn/").unwrap(), Place::S3(_)));
        assert!(matches!(Place::parse("https://h/learn/").unwrap(), Place::Http(_)));
        assert!(Place::parse("ftp://h/x").is_err());
        assert!(Place::parse("s3://B/x").is_err(), "a bad bucket name");
    }
}
