//! AWS Signature Version 4 in the `Authorization` header, for S3: what a request must carry so
//! that the store knows who sent it and that nothing signed was changed on the way.
//!
//! Header signing rather than presigned URLs: S3-compatible servers check it the same way
//! (moto checks only header signatures when it enforces credentials), and a signature in
//! headers stays out of URLs that end up in logs and error messages.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The SHA-256 of an empty payload, as `x-amz-content-sha256` carries it.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// What is signed: the request as it will be sent.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The `Host` header's value (`host`, or `host:port` for a port other than the scheme's).
    pub host: &'a str,
    /// The path, already percent-encoded as it is sent ([`encode`] with `/` kept).
    pub path: &'a str,
    /// The query, already in canonical form ([`canonical_query`]), without `?`.
    pub query: &'a str,
    /// Headers to sign besides `host`, `x-amz-date` and `x-amz-content-sha256` (lowercase
    /// names; `x-amz-meta-*` and `x-amz-security-token` must be among them when sent).
    pub headers: &'a [(String, String)],
    /// The payload's SHA-256 (hex).
    pub payload_sha256: &'a str,
}

/// Who signs: the key, the secret, the region and the time (`YYYYMMDDTHHMMSSZ`).
#[derive(Debug)]
pub struct Signer<'a> {
    pub key_id: &'a str,
    pub secret: &'a str,
    pub region: &'a str,
    pub amz_date: &'a str,
}

/// The headers to add to `req`: `x-amz-date`, `x-amz-content-sha256` and `authorization`.
pub fn sign(req: &Request, s: &Signer) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), req.host.to_owned()),
        ("x-amz-content-sha256".into(), req.payload_sha256.to_owned()),
        ("x-amz-date".into(), s.amz_date.to_owned()),
    ];
    headers.extend(req.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned())));
    headers.sort();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method, req.path, req.query, canonical_headers, signed, req.payload_sha256
    );
    let day = &s.amz_date[..8];
    let scope = format!("{day}/{}/s3/aws4_request", s.region);
    let to_sign =
        format!("AWS4-HMAC-SHA256\n{}\n{scope}\n{}", s.amz_date, hex(&Sha256::digest(canonical)));
    let mut key = hmac(format!("AWS4{}", s.secret).as_bytes(), day.as_bytes());
    for part in [s.region, "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    vec![
        ("x-amz-date".into(), s.amz_date.to_owned()),
        ("x-amz-content-sha256".into(), req.payload_sha256.to_owned()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
                s.key_id
            ),
        ),
    ]
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `s` percent-encoded as SigV4 wants: unreserved characters (`A-Z a-z 0-9 - _ . ~`) kept,
/// `/` kept when `keep_slash`, every other byte `%XX`.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The canonical query string of `pairs`: each name and value encoded, sorted, joined by `&`.
/// It is also what the request sends, so the server sees what was signed.
pub fn canonical_query(pairs: &[(&str, &str)]) -> String {
    let mut enc: Vec<(String, String)> =
        pairs.iter().map(|(k, v)| (encode(k, false), encode(v, false))).collect();
    enc.sort();
    enc.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

/// `secs` since the epoch as SigV4's `YYYYMMDDTHHMMSSZ`.
pub fn amz_date(secs: u64) -> String {
    let (y, m, d, h, min, sec) = coldstart_units::utc_from_unix(secs);
    format!("{y:04}{m:02}{d:02}T{h:02}{min:02}{sec:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of AWS's documentation ("Signature Calculations for the Authorization
    /// Header: Transferring Payload in a Single Chunk", GET Object with a Range header).
    #[test]
    fn the_documented_get_object_example_signs_as_aws_does() {
        let headers = vec![("range".to_owned(), "bytes=0-9".to_owned())];
        let req = Request {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            path: "/test.txt",
            query: "",
            headers: &headers,
            payload_sha256: EMPTY_SHA256,
        };
        let s = Signer {
            key_id: "AKIAIOSFODNN7EXAMPLE",
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
            amz_date: "20130524T000000Z",
        };
        let out = sign(&req, &s);
        let auth = &out.iter().find(|(k, _)| k == "authorization").unwrap().1;
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn dates_and_encodings() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 3_723), "20000229T010203Z");
        assert_eq!(encode("a b/c~", true), "a%20b/c~");
        assert_eq!(encode("a b/c", false), "a%20b%2Fc");
        assert_eq!(
            canonical_query(&[("prefix", "p/x"), ("list-type", "2")]),
            "list-type=2&prefix=p%2Fx"
        );
    }
}
