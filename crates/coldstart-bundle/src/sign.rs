//! Signed bundles: who packed a bundle, proved with ed25519.
//!
//! `pack --sign KEY` writes `BUNDLE/signature.json`: the SHA-256 of `manifest.json` and of the
//! start object, and an ed25519 signature over both (with a fixed context string, so the
//! signature means nothing anywhere else). A reader given trusted public keys (`--trust`)
//! fetches it beside the manifest and refuses the bundle, before anything is mounted, unless
//! one trusted key signed it and the signed digest is that of the manifest it fetched, byte
//! for byte.
//!
//! That covers every byte a program can read: the manifest names each piece by its SHA-256
//! (and each file's whole content), and every piece is checked against that
//! digest before a program sees it. The start object's header holds the manifest's digest,
//! which must be the signed one, and its hot part is checked piece by piece; its own digest is
//! signed too, for checking a copy of the bundle at rest.
//!
//! Keys are the usual PEM files, so OpenSSL reads and makes them too: the private key is
//! PKCS#8 (`-----BEGIN PRIVATE KEY-----`, what `openssl genpkey -algorithm ed25519` writes),
//! the public key SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`, what `openssl pkey
//! -pubout` writes). [`new_key_pair`] writes both, the private one readable by its owner only.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use coldstart_error::Category;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};

/// The signature's path inside a bundle.
pub const SIGNATURE: &str = "signature.json";
/// The signature file's `format`.
pub const SIGNATURE_FORMAT: &str = "coldstart-bundle-signature";
/// The signature file's version this build writes and reads.
pub const SIGNATURE_VERSION: u32 = 1;
/// What is signed starts with this: a signature of coldstart's means nothing elsewhere.
const CONTEXT: &[u8] = b"coldstart-bundle-signature v1\0";
/// The largest signature file a reader accepts.
pub const MAX_SIGNATURE: u64 = 64 * 1024;

/// A private key, read from its PEM file.
#[derive(Clone)]
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    path: PathBuf,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({}, public {})", self.path.display(), self.id())
    }
}

impl SigningKey {
    /// Reads a PKCS#8 PEM ed25519 private key.
    pub fn read(path: &Path) -> Result<SigningKey, KeyError> {
        let text = read_text(path)?;
        let key =
            ed25519_dalek::SigningKey::from_pkcs8_pem(&text).map_err(|e| KeyError::Format {
                path: path.to_path_buf(),
                what: "PKCS#8 private",
                why: e.to_string(),
            })?;
        Ok(SigningKey { key, path: path.to_path_buf() })
    }

    /// The public key's hex, as a signature names its key.
    pub fn id(&self) -> String {
        hex(self.key.verifying_key().as_bytes())
    }
}

/// A public key a reader trusts, read from its PEM file.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    key: ed25519_dalek::VerifyingKey,
    /// The file it was read from, to name it in messages.
    pub path: PathBuf,
}

impl TrustedKey {
    /// Reads a SubjectPublicKeyInfo PEM ed25519 public key.
    pub fn read(path: &Path) -> Result<TrustedKey, KeyError> {
        let text = read_text(path)?;
        if text.contains("PRIVATE KEY") {
            return Err(KeyError::Private(path.to_path_buf()));
        }
        let key = ed25519_dalek::VerifyingKey::from_public_key_pem(&text).map_err(|e| {
            KeyError::Format { path: path.to_path_buf(), what: "public", why: e.to_string() }
        })?;
        Ok(TrustedKey { key, path: path.to_path_buf() })
    }

    /// The key's hex, as a signature names it.
    pub fn id(&self) -> String {
        hex(self.key.as_bytes())
    }
}

fn read_text(path: &Path) -> Result<String, KeyError> {
    let meta =
        fs::metadata(path).map_err(|source| KeyError::Read { path: path.to_path_buf(), source })?;
    if meta.len() > 64 * 1024 {
        return Err(KeyError::Format {
            path: path.to_path_buf(),
            what: "PEM",
            why: format!("{} bytes is too long for a key", meta.len()),
        });
    }
    fs::read_to_string(path).map_err(|source| KeyError::Read { path: path.to_path_buf(), source })
}

/// The public key's path beside a private key `KEY`: `KEY.pub`.
pub fn public_path(private: &Path) -> PathBuf {
    let mut s = private.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Makes a new key pair: the private key at `private` (mode 0600) and the public key at
/// `private.pub`. Neither may exist (a private key is never replaced). Each is written
/// whole into a temporary file and linked into place, so a failure leaves no half key; the
/// public key is written first, so a private key never exists without it. Returns the
/// public key's path.
pub fn new_key_pair(private: &Path) -> Result<PathBuf, KeyError> {
    let public = public_path(private);
    for p in [private, public.as_path()] {
        if p.symlink_metadata().is_ok() {
            return Err(KeyError::Exists(p.to_path_buf()));
        }
    }
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    seed.fill(0);
    // PKCS#8 version 1 (the private key alone), the form OpenSSL 3.0 reads too (it refuses
    // version 2, which adds the public key).
    let bytes = ed25519_dalek::pkcs8::KeypairBytes { secret_key: key.to_bytes(), public_key: None };
    let pem_private =
        bytes.to_pkcs8_pem(LineEnding::LF).map_err(|e| KeyError::Encode(e.to_string()))?;
    let pem_public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError::Encode(e.to_string()))?;
    write_new(&public, pem_public.as_bytes(), 0o644)?;
    if let Err(e) = write_new(private, pem_private.as_bytes(), 0o600) {
        let _ = fs::remove_file(&public);
        return Err(e);
    }
    Ok(public)
}

/// Writes `bytes` into a new file `path` with `mode`, atomically and never over an existing
/// file: a temporary file created with `mode` from the start, synced, then hard-linked to
/// `path` (which fails if `path` appeared meanwhile) and unlinked.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KeyError> {
    let err = |source| KeyError::Write { path: path.to_path_buf(), source };
    let name = path
        .file_name()
        .ok_or_else(|| err(io::Error::new(io::ErrorKind::InvalidInput, "not a file name")))?;
    let tmp =
        path.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), coldstart_fs::unique()));
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        // The umask may have taken bits of a public key's mode; a private key's it cannot add.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    match result {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(KeyError::Exists(path.into())),
        Err(e) => Err(err(e)),
        Ok(()) => {
            if let Some(d) = path.parent().and_then(|d| fs::File::open(d).ok()) {
                let _ = d.sync_all();
            }
            Ok(())
        }
    }
}

/// `signature.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    pub format: String,
    pub version: u32,
    /// Always `ed25519`.
    pub algorithm: String,
    /// The signer's public key, hex (32 bytes).
    pub key: String,
    /// SHA-256 of `manifest.json`, hex.
    pub manifest_sha256: String,
    /// SHA-256 of the start object, hex.
    pub start_sha256: String,
    /// The ed25519 signature (64 bytes, hex) of the context string, then the manifest's
    /// digest, then the start object's (raw bytes).
    pub signature: String,
}

fn message(manifest: &[u8; 32], start: &[u8; 32]) -> Vec<u8> {
    let mut m = CONTEXT.to_vec();
    m.extend_from_slice(manifest);
    m.extend_from_slice(start);
    m
}

/// Signs a bundle's manifest and start object (their bytes as packed): the contents of
/// `signature.json`.
pub fn sign(key: &SigningKey, manifest_json: &[u8], start: &[u8]) -> Vec<u8> {
    let (m, s) = (digest(manifest_json), digest(start));
    let sig = key.key.sign(&message(&m, &s));
    let file = SignatureFile {
        format: SIGNATURE_FORMAT.into(),
        version: SIGNATURE_VERSION,
        algorithm: "ed25519".into(),
        key: key.id(),
        manifest_sha256: hex(&m),
        start_sha256: hex(&s),
        signature: hex(&sig.to_bytes()),
    };
    let mut out = serde_json::to_vec_pretty(&file).expect("a signature serialises");
    out.push(b'\n');
    out
}

/// Checks `signature.json` (`bytes`, as fetched from `url`) against the trusted keys and the
/// digest of the manifest the reader fetched, `manifest_sha256`. Returns the key that signed.
pub fn verify<'k>(
    bytes: &[u8],
    url: &str,
    manifest_sha256: &[u8; 32],
    trusted: &'k [TrustedKey],
) -> Result<&'k TrustedKey, SignatureError> {
    let bad = |why: String| SignatureError::Malformed { url: url.to_owned(), why };
    let file: SignatureFile = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if file.format != SIGNATURE_FORMAT {
        return Err(bad(format!("format `{}`, not {SIGNATURE_FORMAT}", file.format)));
    }
    if file.version != SIGNATURE_VERSION {
        return Err(bad(format!(
            "version {}, this build reads version {SIGNATURE_VERSION}: use a coldstart that reads it",
            file.version
        )));
    }
    if file.algorithm != "ed25519" {
        return Err(bad(format!("algorithm `{}`, this build knows ed25519", file.algorithm)));
    }
    let m: [u8; 32] = unhex(&file.manifest_sha256).ok_or_else(|| bad("manifest_sha256".into()))?;
    let s: [u8; 32] = unhex(&file.start_sha256).ok_or_else(|| bad("start_sha256".into()))?;
    let sig: [u8; 64] = unhex(&file.signature).ok_or_else(|| bad("signature".into()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    let names = || trusted.iter().map(|k| k.path.display().to_string()).collect::<Vec<_>>();
    let Some(key) = trusted.iter().find(|k| k.id() == file.key) else {
        return Err(SignatureError::UnknownKey {
            url: url.to_owned(),
            key: file.key,
            trusted: names().join(", "),
        });
    };
    if key.key.verify_strict(&message(&m, &s), &sig).is_err() {
        return Err(SignatureError::Invalid { url: url.to_owned(), key: key.path.clone() });
    }
    if &m != manifest_sha256 {
        return Err(SignatureError::ManifestDiffers { url: url.to_owned(), key: key.path.clone() });
    }
    Ok(key)
}

/// Fetches `signature.json` of the bundle `remote` serves: `None` when the server says it is
/// not there (an unsigned bundle).
pub fn fetch_signature(remote: &dyn crate::Remote) -> Result<Option<Vec<u8>>, crate::FetchError> {
    match crate::remote::get(remote, SIGNATURE, crate::Span::Whole { max: MAX_SIGNATURE }) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`verify`] of what [`fetch_signature`] brought from `url`: a missing signature is refused
/// like a wrong one.
pub fn check<'k>(
    fetched: Option<&[u8]>,
    url: &str,
    manifest_sha256: &[u8; 32],
    trusted: &'k [TrustedKey],
) -> Result<&'k TrustedKey, SignatureError> {
    match fetched {
        None => Err(SignatureError::Missing { url: url.to_owned() }),
        Some(b) => verify(b, url, manifest_sha256, trusted),
    }
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: not an ed25519 {what} key in PEM ({why}); make one with `coldstart key new -o KEY`", path.display())]
    Format { path: PathBuf, what: &'static str, why: String },
    #[error("{}: this is a private key; trust the public one (KEY.pub)", .0.display())]
    Private(PathBuf),
    #[error("{} already exists: a key is never replaced; remove it or choose another name", .0.display())]
    Exists(PathBuf),
    #[error("cannot write key {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("the system's random number generator failed: {0}")]
    Random(String),
    #[error("cannot encode the key: {0}")]
    Encode(String),
}

impl KeyError {
    /// What kind of failure this is (the exit code follows from it).
    pub fn category(&self) -> Category {
        match self {
            KeyError::Read { .. }
            | KeyError::Format { .. }
            | KeyError::Private(_)
            | KeyError::Exists(_) => Category::Usage,
            KeyError::Write { .. } | KeyError::Random(_) => Category::Environment,
            KeyError::Encode(_) => Category::Internal,
        }
    }
}

/// Why a bundle is not trusted: under `--trust`, it is refused before anything is mounted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("{url} is not there: the bundle is not signed, and --trust accepts only a bundle signed by a trusted key (pack it with --sign KEY)")]
    Missing { url: String },
    #[error("{url} is not a valid bundle signature: {why}")]
    Malformed { url: String, why: String },
    #[error(
        "{url}: the bundle is signed by key {key}, which is none of the trusted keys ({trusted})"
    )]
    UnknownKey { url: String, key: String, trusted: String },
    #[error("{url}: the signature does not verify with the trusted key {}: the signature file was altered", key.display())]
    Invalid { url: String, key: PathBuf },
    #[error("{url}: the manifest fetched is not the one signed with the trusted key {}: the bundle was altered or is being replaced", key.display())]
    ManifestDiffers { url: String, key: PathBuf },
}

impl SignatureError {
    /// What kind of failure this is: always [`Category::Untrusted`].
    pub fn category(&self) -> Category {
        match self {
            SignatureError::Missing { .. }
            | SignatureError::Malformed { .. }
            | SignatureError::UnknownKey { .. }
            | SignatureError::Invalid { .. }
            | SignatureError::ManifestDiffers { .. } => Category::Untrusted,
        }
    }
}

/// The SHA-256 of `data`.
pub fn digest(data: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(data).into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (SigningKey, TrustedKey) {
        let p = dir.join(name);
        let public = new_key_pair(&p).unwrap();
        (SigningKey::read(&p).unwrap(), TrustedKey::read(&public).unwrap())
    }

    #[test]
    fn a_new_private_key_is_its_owners_only_and_never_replaced() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        let public = new_key_pair(&p).unwrap();
        assert_eq!(public, d.path().join("k.pub"));
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let before = fs::read(&p).unwrap();
        assert!(String::from_utf8_lossy(&before).starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(matches!(new_key_pair(&p), Err(KeyError::Exists(_))));
        assert_eq!(fs::read(&p).unwrap(), before, "the old key is kept");
        let names: Vec<_> =
            fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary left: {names:?}");
        assert!(matches!(TrustedKey::read(&p), Err(KeyError::Private(_))));
        assert!(matches!(SigningKey::read(&public), Err(KeyError::Format { .. })));
    }

    #[test]
    fn a_signature_verifies_only_with_its_key_and_its_manifest() {
        let d = tempfile::tempdir().unwrap();
        let (k1, t1) = pair(d.path(), "one");
        let (_, t2) = pair(d.path(), "two");
        let sig = sign(&k1, b"{manifest}", b"start");
        let m = digest(b"{manifest}");
        assert_eq!(verify(&sig, "u", &m, &[t2.clone(), t1.clone()]).unwrap().path, t1.path);
        assert!(matches!(
            verify(&sig, "u", &m, std::slice::from_ref(&t2)),
            Err(SignatureError::UnknownKey { .. })
        ));
        assert!(matches!(
            verify(&sig, "u", &digest(b"{other}"), std::slice::from_ref(&t1)),
            Err(SignatureError::ManifestDiffers { .. })
        ));
        // A signature file that claims another manifest's digest no longer verifies.
        let mut file: SignatureFile = serde_json::from_slice(&sig).unwrap();
        file.manifest_sha256 = hex(&digest(b"{other}"));
        let forged = serde_json::to_vec(&file).unwrap();
        assert!(matches!(
            verify(&forged, "u", &digest(b"{other}"), std::slice::from_ref(&t1)),
            Err(SignatureError::Invalid { .. })
        ));
        // Nor one that names a trusted key it was not made with.
        let mut file: SignatureFile = serde_json::from_slice(&sig).unwrap();
        file.key = t2.id();
        let forged = serde_json::to_vec(&file).unwrap();
        assert!(matches!(verify(&forged, "u", &m, &[t1, t2]), Err(SignatureError::Invalid { .. })));
        assert!(matches!(verify(b"{}", "u", &m, &[]), Err(SignatureError::Malformed { .. })));
    }
}
