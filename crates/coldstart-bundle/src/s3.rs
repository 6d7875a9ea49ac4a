//! S3 and S3-compatible stores: `s3://BUCKET/PREFIX` URLs, where the endpoint, the region and
//! the credentials come from (the variables and files the AWS tools read), and requests signed
//! with SigV4 ([`sigv4`]).
//!
//! Where each setting comes from, first found wins:
//!
//! | setting | sources |
//! | --- | --- |
//! | endpoint | `--endpoint`; `AWS_ENDPOINT_URL_S3`; `AWS_ENDPOINT_URL`; `endpoint_url` of the profile in the config file; else `https://s3.REGION.amazonaws.com` |
//! | region | `--region`; `AWS_REGION`; `AWS_DEFAULT_REGION`; `region` of the profile in the config file; else `us-east-1` |
//! | credentials | `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`); the profile's keys in the credentials file, then in the config file; else none: requests go unsigned (a public bucket) |
//!
//! The profile is `AWS_PROFILE` (else `default`); the credentials file is
//! `AWS_SHARED_CREDENTIALS_FILE` (else `~/.aws/credentials`), the config file `AWS_CONFIG_FILE`
//! (else `~/.aws/config`). A profile named by `AWS_PROFILE` that neither file has is an
//! error, not anonymous access. The secret is never shown: errors name the access key ID and
//! where it came from.
//!
//! Objects are addressed path-style (`ENDPOINT/BUCKET/KEY`) on a given endpoint, as
//! S3-compatible servers expect, and virtual-hosted (`BUCKET.s3.REGION.amazonaws.com/KEY`) on
//! AWS's own, unless the bucket's name has a dot (which a wildcard certificate cannot cover).

pub mod sigv4;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use coldstart_error::Category;

use crate::remote::redact::redact_url;

/// An `s3://BUCKET[/PREFIX]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    pub bucket: String,
    /// The key prefix of the bundle's objects: empty, or ending in `/`.
    pub prefix: String,
}

impl S3Url {
    pub fn parse(url: &str) -> Result<S3Url, S3Error> {
        let bad = || S3Error::Url(redact_url(url));
        let rest = url.strip_prefix("s3://").ok_or_else(bad)?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b))
            && bucket.as_bytes()[0].is_ascii_alphanumeric();
        if !valid_bucket
            || prefix.contains(['?', '#'])
            || prefix.chars().any(|c| c.is_control())
            || prefix.split('/').any(|p| p == "." || p == "..")
        {
            return Err(bad());
        }
        let mut prefix = prefix.trim_start_matches('/').to_owned();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(S3Url { bucket: bucket.to_owned(), prefix })
    }
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// What the command line says about S3, over the environment's settings.
#[derive(Debug, Clone, Default)]
pub struct S3Settings {
    /// `--endpoint`: the store's URL, e.g. `http://127.0.0.1:5000`.
    pub endpoint: Option<String>,
    /// `--region`.
    pub region: Option<String>,
}

/// An access key. `Debug` does not show the secret.
#[derive(Clone)]
pub struct Credentials {
    pub key_id: String,
    secret: String,
    pub token: Option<String>,
    /// Where they came from: `AWS_ACCESS_KEY_ID`, `profile `p` in /root/.aws/credentials`.
    pub source: String,
}

impl Credentials {
    pub fn new(key_id: &str, secret: &str, token: Option<&str>, source: &str) -> Credentials {
        Credentials {
            key_id: key_id.to_owned(),
            secret: secret.to_owned(),
            token: token.map(str::to_owned),
            source: source.to_owned(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("key_id", &self.key_id)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why S3 could not be used.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("bad S3 URL `{0}`: expected s3://BUCKET[/PREFIX] with a valid bucket name")]
    Url(String),
    #[error(
        "bad S3 endpoint `{value}` (from {source_name}): expected http[s]://HOST[:PORT][/PATH]"
    )]
    Endpoint { value: String, source_name: String },
    #[error("S3 credentials: {0}")]
    Credentials(String),
    #[error(
        "{object}: access denied ({status}{code}{message}) for {who}; check the key, the secret \
         and the bucket's policy, or set other credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID)"
    )]
    Denied { object: String, status: u16, code: String, message: String, who: String },
    #[error(
        "{object}: the bucket `{bucket}` does not exist at {endpoint}; create it, or check the \
         URL, --endpoint and --region"
    )]
    NoBucket { object: String, bucket: String, endpoint: String },
    #[error(
        "{object}: the bucket is in another region ({status}{code}{message}); give its region \
         with --region or AWS_REGION"
    )]
    Region { object: String, status: u16, code: String, message: String },
    #[error("{object}: the store answered {status}{code}{message}")]
    Refused { object: String, status: u16, code: String, message: String },
}

impl S3Error {
    /// A refusal by the bucket's or the user's policy (`AccessDenied`, or a 403 without a
    /// body, as to a HEAD), not a refused key or signature.
    pub fn is_policy_denial(&self) -> bool {
        matches!(self, S3Error::Denied { status: 403, code, .. }
            if code.trim() == "AccessDenied" || code.is_empty())
    }

    /// What kind of failure this is: a refused signature or key is a missing privilege; a
    /// URL, setting, bucket or region that cannot be used is bad input.
    pub fn category(&self) -> Category {
        match self {
            S3Error::Url(_)
            | S3Error::Endpoint { .. }
            | S3Error::Credentials(_)
            | S3Error::NoBucket { .. }
            | S3Error::Region { .. } => Category::Usage,
            S3Error::Denied { .. } => Category::Privilege,
            S3Error::Refused { status, .. } if *status < 500 => Category::Usage,
            S3Error::Refused { .. } => Category::Environment,
        }
    }

    /// The object is not there (404 for an existing bucket).
    pub fn is_not_found(&self) -> bool {
        matches!(self, S3Error::Refused { status: 404 | 410, .. })
    }
}

/// A bucket and how to reach and sign for it.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub name: String,
    pub region: String,
    /// `http` or `https`.
    scheme: String,
    /// The `Host` header: `host` or `host:port`, the bucket's name first when virtual-hosted.
    host: String,
    /// The path objects are under, ending in `/`: `/BUCKET/` path-style, `/` virtual-hosted.
    base_path: String,
    /// Where the endpoint came from, for messages.
    endpoint: String,
    pub credentials: Option<Credentials>,
}

/// A signed request: its URL and the headers to send with it.
#[derive(Debug, Clone)]
pub struct Signed {
    pub url: String,
    pub headers: Vec<(String, String)>,
}

/// How the environment is read: variables, and the home directory for `~/.aws`.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
}

/// The process's environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }
}

/// An INI file's sections: name -> (key -> value).
type Ini = HashMap<String, HashMap<String, String>>;

fn read_ini(path: &Path) -> Result<Option<Ini>, S3Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(S3Error::Credentials(format!("cannot read {}: {e}", path.display()))),
    };
    let mut ini = Ini::new();
    let mut section = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_owned();
            ini.entry(name.clone()).or_default();
            section = Some(name);
        } else if let (Some(s), Some((k, v))) = (&section, line.split_once('=')) {
            ini.get_mut(s).expect("entered").insert(k.trim().to_owned(), v.trim().to_owned());
        }
    }
    Ok(Some(ini))
}

impl Bucket {
    /// The bucket of `url`, with the settings of `settings` over those of `env`.
    pub fn resolve(url: &S3Url, settings: &S3Settings, env: &dyn Env) -> Result<Bucket, S3Error> {
        let profile_given = env.var("AWS_PROFILE");
        let profile = profile_given.clone().unwrap_or_else(|| "default".to_owned());
        let aws = |var: &str, file: &str| {
            env.var(var)
                .map(PathBuf::from)
                .or_else(|| env.home().map(|h| h.join(".aws").join(file)))
        };
        let cred_path = aws("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_path = aws("AWS_CONFIG_FILE", "config");
        let cred_file = match &cred_path {
            Some(p) => read_ini(p)?,
            None => None,
        };
        let config_file = match &config_path {
            Some(p) => read_ini(p)?,
            None => None,
        };
        let cred_section = cred_file.as_ref().and_then(|f| f.get(&profile));
        let config_section = config_file.as_ref().and_then(|f| {
            f.get(&format!("profile {profile}"))
                .or_else(|| (profile == "default").then(|| f.get("default")).flatten())
        });
        if profile_given.is_some() && cred_section.is_none() && config_section.is_none() {
            let shown = |p: &Option<PathBuf>| {
                p.as_ref().map_or("(no home directory)".to_owned(), |p| p.display().to_string())
            };
            return Err(S3Error::Credentials(format!(
                "AWS_PROFILE={profile}: no such profile in {} or {}",
                shown(&cred_path),
                shown(&config_path)
            )));
        }
        let config_value = |k: &str| config_section.and_then(|s| s.get(k)).cloned();

        let credentials = match (env.var("AWS_ACCESS_KEY_ID"), env.var("AWS_SECRET_ACCESS_KEY")) {
            (Some(k), Some(s)) => {
                let token = env.var("AWS_SESSION_TOKEN");
                Some(Credentials::new(&k, &s, token.as_deref(), "AWS_ACCESS_KEY_ID"))
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(S3Error::Credentials(
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together".into(),
                ))
            }
            (None, None) => {
                let from = |sec: Option<&HashMap<String, String>>, path: &Option<PathBuf>| {
                    let sec = sec?;
                    let key = sec.get("aws_access_key_id")?;
                    let secret = sec.get("aws_secret_access_key")?;
                    let where_ = format!(
                        "profile `{profile}` in {}",
                        path.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
                    );
                    let token = sec.get("aws_session_token").map(String::as_str);
                    Some(Credentials::new(key, secret, token, &where_))
                };
                from(cred_section, &cred_path).or_else(|| from(config_section, &config_path))
            }
        };

        let region = settings
            .region
            .clone()
            .or_else(|| env.var("AWS_REGION"))
            .or_else(|| env.var("AWS_DEFAULT_REGION"))
            .or_else(|| config_value("region"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let given = [
            (settings.endpoint.clone(), "--endpoint"),
            (env.var("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"),
            (env.var("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"),
            (config_value("endpoint_url"), "endpoint_url in the config file"),
        ]
        .into_iter()
        .find_map(|(v, from)| v.map(|v| (v, from)));
        let (endpoint, from, virtual_host) = match given {
            Some((v, from)) => (v, from, false),
            None => {
                let v = format!("https://s3.{region}.amazonaws.com");
                (v, "the region", !url.bucket.contains('.'))
            }
        };
        let bad =
            || S3Error::Endpoint { value: redact_url(&endpoint), source_name: from.to_owned() };
        let (scheme, rest) = endpoint.split_once("://").ok_or_else(bad)?;
        if !matches!(scheme, "http" | "https") || rest.contains(['?', '#', '@']) {
            return Err(bad());
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.chars().any(|c| c.is_whitespace()) {
            return Err(bad());
        }
        // The Host header as the HTTP client sends it: no port when it is the scheme's own.
        let default_port = if scheme == "https" { ":443" } else { ":80" };
        let authority = authority.strip_suffix(default_port).unwrap_or(authority).to_owned();
        let mut path = path.to_owned();
        if !path.ends_with('/') {
            path.push('/');
        }
        let (host, base_path) = if virtual_host {
            (format!("{}.{authority}", url.bucket), path)
        } else {
            (authority, format!("{path}{}/", sigv4::encode(&url.bucket, false)))
        };
        Ok(Bucket {
            name: url.bucket.clone(),
            region,
            scheme: scheme.to_owned(),
            host,
            base_path,
            endpoint: format!("{scheme}://{}", endpoint.split_once("://").map_or("", |e| e.1)),
            credentials,
        })
    }

    /// Whether the store is reached over https.
    pub fn https(&self) -> bool {
        self.scheme == "https"
    }

    /// Who the requests are made as, for messages: never the secret.
    pub fn who(&self) -> String {
        match &self.credentials {
            Some(c) => format!("access key {} (from {})", c.key_id, c.source),
            None => "no credentials (unsigned requests: set AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                .to_owned(),
        }
    }

    /// `s3://BUCKET/KEY`, for messages.
    pub fn describe(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.name)
    }

    /// A request for `key` (empty: the bucket itself) with the query `query`, signed when
    /// there are credentials. `headers` are sent and signed (lowercase names);
    /// `payload_sha256` is the body's SHA-256 (hex).
    pub fn request(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        headers: &[(String, String)],
        payload_sha256: &str,
    ) -> Signed {
        let path = format!("{}{}", self.base_path, sigv4::encode(key, true));
        let query = sigv4::canonical_query(query);
        let url = if query.is_empty() {
            format!("{}://{}{path}", self.scheme, self.host)
        } else {
            format!("{}://{}{path}?{query}", self.scheme, self.host)
        };
        let Some(c) = &self.credentials else {
            return Signed { url, headers: headers.to_vec() };
        };
        let mut signed_headers = headers.to_vec();
        if let Some(t) = &c.token {
            signed_headers.push(("x-amz-security-token".into(), t.clone()));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let amz_date = sigv4::amz_date(now);
        let req = sigv4::Request {
            method,
            host: &self.host,
            path: &path,
            query: &query,
            headers: &signed_headers,
            payload_sha256,
        };
        let signer = sigv4::Signer {
            key_id: &c.key_id,
            secret: &c.secret,
            region: &self.region,
            amz_date: &amz_date,
        };
        let mut all = signed_headers.clone();
        all.extend(sigv4::sign(&req, &signer));
        Signed { url, headers: all }
    }

    /// The error for a 4xx answer about `object`, from the error document's `Code` and
    /// `Message` (S3's XML; empty when the answer had none, as to a HEAD).
    pub fn refusal(&self, object: &str, status: u16, body: &[u8]) -> S3Error {
        let text = String::from_utf8_lossy(body);
        let raw = xml_text(&text, "Code").unwrap_or_default();
        // As the messages show them: `403 AccessDenied: Access Denied`, or `403`.
        let code = if raw.is_empty() { raw.clone() } else { format!(" {raw}") };
        let message = xml_text(&text, "Message").map(|m| format!(": {m}")).unwrap_or_default();
        let object = self.describe(object);
        match (status, raw.as_str()) {
            (404, "NoSuchBucket") => S3Error::NoBucket {
                object,
                bucket: self.name.clone(),
                endpoint: redact_url(&self.endpoint),
            },
            (301, _)
            | (400, "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException") => {
                S3Error::Region { object, status, code, message }
            }
            (401 | 403, _)
            | (
                400,
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken",
            ) => S3Error::Denied { object, status, code, message, who: self.who() },
            _ => S3Error::Refused { object, status, code, message },
        }
    }
}

/// The text of the first `<tag>...</tag>` of `xml`, entities decoded.
pub fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(unescape(&xml[start..end]))
}

/// Every `<tag>...</tag>` of `xml`, in order, raw.
pub fn xml_all<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

/// XML's five entities and numeric references decoded.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let Some(end) = after.find(';') else {
            out.push_str(after);
            return out;
        };
        let entity = &after[1..end];
        let c = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e => e
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| e.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => out.push(c),
            None => out.push_str(&after[..=end]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeEnv(HashMap<&'static str, String>, Option<PathBuf>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
    }

    fn env(vars: &[(&'static str, &str)], home: Option<&Path>) -> FakeEnv {
        FakeEnv(vars.iter().map(|(k, v)| (*k, v.to_string())).collect(), home.map(Into::into))
    }

    #[test]
    fn s3_urls() {
        let u = S3Url::parse("s3://my-bucket/apps/clang").unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("my-bucket", "apps/clang/"));
        assert_eq!(S3Url::parse("s3://my-bucket").unwrap().prefix, "");
        assert_eq!(S3Url::parse("s3://my-bucket/").unwrap().prefix, "");
        for bad in
            ["s3://", "s3://B/x", "s3://ab/x", "s3://bucket/a/../b", "http://b/x", "s3://bkt/x?y"]
        {
            assert!(S3Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_come_from_flags_then_variables_then_files() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n\
             [other]\naws_access_key_id=OTHER\naws_secret_access_key=S2\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = eu-west-3\n[profile other]\nregion = ap-south-1\nendpoint_url = http://store:9000\n",
        )
        .unwrap();
        let url = S3Url::parse("s3://bkt/p").unwrap();
        let none = S3Settings::default();
        // The default profile of the files; AWS's endpoint, virtual-hosted.
        let b = Bucket::resolve(&url, &none, &env(&[], Some(home.path()))).unwrap();
        assert_eq!(b.credentials.as_ref().unwrap().key_id, "FILEKEY");
        assert_eq!(b.region, "eu-west-3");
        let r = b.request("GET", "p/manifest.json", &[], &[], sigv4::EMPTY_SHA256);
        assert_eq!(r.url, "https://bkt.s3.eu-west-3.amazonaws.com/p/manifest.json");
        assert!(r.headers.iter().any(|(k, _)| k == "authorization"));
        // AWS_PROFILE: its keys, region and endpoint (path-style).
        let e = env(&[("AWS_PROFILE", "other")], Some(home.path()));
        let b = Bucket::resolve(&url, &none, &e).unwrap();
        assert_eq!(b.credentials.as_ref().unwrap().key_id, "OTHER");
        assert_eq!(b.region, "ap-south-1");
        assert_eq!(b.request("GET", "k", &[], &[], "x").url, "http://store:9000/bkt/k");
        // Variables over files, flags over variables; the secret is never shown.
        let e = env(
            &[
                ("AWS_ACCESS_KEY_ID", "ENVKEY"),
                ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
                ("AWS_REGION", "us-west-2"),
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:80/"),
            ],
            Some(home.path()),
        );
        let flags = S3Settings { region: Some("eu-north-1".into()), endpoint: None };
        let b = Bucket::resolve(&url, &flags, &e).unwrap();
        assert_eq!(b.region, "eu-north-1");
        assert_eq!(b.request("GET", "a b", &[], &[], "x").url, "http://127.0.0.1/bkt/a%20b");
        assert!(b.who().contains("ENVKEY") && b.who().contains("AWS_ACCESS_KEY_ID"));
        assert!(!format!("{b:?} {}", b.who()).contains("ENVSECRET"));
        // A profile that is nowhere, half a key, a bad endpoint: errors that say so.
        let e = env(&[("AWS_PROFILE", "nope")], Some(home.path()));
        let err = Bucket::resolve(&url, &none, &e).unwrap_err();
        assert!(err.to_string().contains("AWS_PROFILE=nope"), "{err}");
        let e = env(&[("AWS_ACCESS_KEY_ID", "K")], None);
        assert!(Bucket::resolve(&url, &none, &e).is_err());
        let flags = S3Settings { endpoint: Some("ftp://x".into()), region: None };
        let err = Bucket::resolve(&url, &flags, &env(&[], None)).unwrap_err();
        assert!(err.to_string().contains("--endpoint"), "{err}");
        // No credentials anywhere: unsigned requests.
        let b = Bucket::resolve(&url, &none, &env(&[], None)).unwrap();
        assert!(b.credentials.is_none());
        assert!(b.request("GET", "k", &[], &[], "x").headers.is_empty());
    }

    #[test]
    fn refusals_say_what_to_do() {
        let url = S3Url::parse("s3://bkt/p").unwrap();
        let e = env(&[("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "SEKRIT")], None);
        let b = Bucket::resolve(&url, &S3Settings::default(), &e).unwrap();
        let body = b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        let err = b.refusal("p/manifest.json", 404, body);
        assert!(matches!(err, S3Error::NoBucket { .. }), "{err}");
        assert_eq!(err.category(), Category::Usage);
        let body = b"<Error><Code>SignatureDoesNotMatch</Code><Message>a &amp; b</Message></Error>";
        let err = b.refusal("p/start", 403, body);
        let text = err.to_string();
        assert!(text.contains("s3://bkt/p/start") && text.contains("AKID"), "{text}");
        assert!(text.contains("a & b") && !text.contains("SEKRIT"), "{text}");
        assert_eq!(err.category(), Category::Privilege);
        assert!(b.refusal("k", 404, b"<Code>NoSuchKey</Code>").is_not_found());
        assert_eq!(unescape("&lt;&#65;&#x42;&bogus;"), "<AB&bogus;");
    }
}
