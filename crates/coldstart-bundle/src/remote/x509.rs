//! What the TLS verifier reads of a certificate itself, from its DER (RFC 5280, 4.1): its
//! validity dates, and whether its extended key usage lets it serve. webpki checks both for
//! every certificate it verifies; a certificate trusted as the server's own
//! (see [`super::tls`]) is not one webpki verifies, so they are read here.

/// A certificate's validity and purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    /// `notBefore`, in seconds since the Unix epoch (negative before it).
    pub not_before: i64,
    /// `notAfter`, likewise.
    pub not_after: i64,
    /// Whether it may authenticate a TLS server: it has no extended key usage, or one that
    /// lists `serverAuth` (as webpki requires).
    pub server_auth: bool,
}

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;
/// `[3] EXPLICIT Extensions`.
const EXTENSIONS: u8 = 0xa3;
/// id-ce-extKeyUsage, 2.5.29.37.
const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
/// id-kp-serverAuth, 1.3.6.1.5.5.7.3.1.
const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

/// The validity and purpose of the DER certificate `cert`; `None` if it is not one.
pub(crate) fn read(cert: &[u8]) -> Option<Facts> {
    let [(SEQUENCE, cert)] = elements(cert)?[..] else { return None };
    let (SEQUENCE, tbs) = *elements(cert)?.first()? else { return None };
    let mut fields = elements(tbs)?.into_iter().peekable();
    fields.next_if(|(tag, _)| *tag == VERSION);
    // serialNumber, signature, issuer: then the validity.
    let (SEQUENCE, validity) = fields.nth(3)? else { return None };
    let [(t1, v1), (t2, v2)] = elements(validity)?[..] else { return None };
    let (not_before, not_after) = (time(t1, v1)?, time(t2, v2)?);
    let mut server_auth = true;
    // subject and subjectPublicKeyInfo, then the optional unique ids and the extensions.
    for (tag, body) in fields.skip(2) {
        if tag != EXTENSIONS {
            continue;
        }
        let [(SEQUENCE, list)] = elements(body)?[..] else { return None };
        for (tag, extension) in elements(list)? {
            if tag != SEQUENCE {
                return None;
            }
            if let Some(purposes) = key_usage(extension)? {
                server_auth = purposes;
            }
        }
    }
    Some(Facts { not_before, not_after, server_auth })
}

/// For one `Extension`: `Some(Some(whether it lists serverAuth))` if it is the extended key
/// usage, `Some(None)` if it is another, `None` if it is malformed.
fn key_usage(extension: &[u8]) -> Option<Option<bool>> {
    let parts = elements(extension)?;
    let (OID, id) = *parts.first()? else { return None };
    if id != EXT_KEY_USAGE {
        return Some(None);
    }
    // extnID, critical (a BOOLEAN, optional), extnValue.
    let value = match parts[1..] {
        [(BOOLEAN, _), (OCTET_STRING, v)] | [(OCTET_STRING, v)] => v,
        _ => return None,
    };
    let [(SEQUENCE, purposes)] = elements(value)?[..] else { return None };
    let purposes = elements(purposes)?;
    Some(Some(purposes.iter().any(|&(tag, p)| tag == OID && p == SERVER_AUTH)))
}

/// The DER elements of `input`, one after another, as `(tag, contents)`; `None` if it is not
/// made of whole elements (single-byte tags, definite lengths of at most four bytes).
fn elements(mut input: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while let Some((&tag, rest)) = input.split_first() {
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n].iter().fold(0usize, |a, &b| a << 8 | usize::from(b));
            (len, &rest[n..])
        };
        if tag & 0x1f == 0x1f || rest.len() < len {
            return None;
        }
        out.push((tag, &rest[..len]));
        input = &rest[len..];
    }
    Some(out)
}

/// A `Time`: UTCTime `YYMMDDHHMMSSZ` (years 1950 to 2049) or GeneralizedTime
/// `YYYYMMDDHHMMSSZ`, as RFC 5280 has them, in seconds since the Unix epoch.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = text[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let n = |i: usize| rest[i..i + 2].parse::<i64>().expect("two digits");
    let (month, day, hour, minute, second) = (n(0), n(2), n(4), n(6), n(8));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 59 {
        return None;
    }
    Some(coldstart_units::unix_from_utc(year, month, day, hour, minute, second))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The DER of the first certificate of a PEM file of `testdata/`.
    pub(crate) fn der(pem: &str) -> Vec<u8> {
        ureq::tls::parse_pem(pem.as_bytes())
            .find_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c.der().to_vec()),
                _ => None,
            })
            .expect("a certificate")
    }

    // The test certificates were made with OpenSSL 3.0 (the keys thrown away):
    //   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null \
    //     -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
    //     -days 3650 -out self-signed-ca.pem
    // and likewise client-only.pem (`-addext extendedKeyUsage=clientAuth`), ca.pem
    // (`-subj "/CN=test CA"`) and leaf.pem, signed by ca.pem (`openssl x509 -req` with
    // subjectAltName=IP:127.0.0.1, basicConstraints=CA:FALSE, extendedKeyUsage=serverAuth).
    // All are valid from 2026-11-28 05:30:46 to 2036-11-25 05:30:46 UTC.
    pub(crate) const NOT_BEFORE: i64 = 1_795_843_846;
    pub(crate) const NOT_AFTER: i64 = 2_111_203_846;

    #[test]
    fn the_dates_and_purpose_are_those_openssl_wrote() {
        let facts = |pem| read(&der(pem)).unwrap();
        let ca = facts(include_str!("testdata/self-signed-ca.pem"));
        assert_eq!(ca, Facts { not_before: NOT_BEFORE, not_after: NOT_AFTER, server_auth: true });
        assert!(!facts(include_str!("testdata/client-only.pem")).server_auth);
        assert!(facts(include_str!("testdata/leaf.pem")).server_auth);
    }

    #[test]
    fn both_kinds_of_time_are_read_and_nonsense_is_not() {
        assert_eq!(time(UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(GENERALIZED_TIME, b"20500101000000Z"), Some(2_524_608_000));
        assert_eq!(time(UTC_TIME, b"700101000000"), None, "no Z");
        assert_eq!(time(UTC_TIME, b"701301000000Z"), None, "month 13");
        assert_eq!(time(GENERALIZED_TIME, b"700101000000Z"), None, "too short");
        assert_eq!(time(OCTET_STRING, b"700101000000Z"), None);
    }

    #[test]
    fn truncated_or_long_form_tags_are_not_a_certificate() {
        let cert = der(include_str!("testdata/leaf.pem"));
        for cut in [1, 2, 10, cert.len() / 2, cert.len() - 1] {
            assert_eq!(read(&cert[..cut]), None, "cut at {cut}");
        }
        assert_eq!(elements(&[0x1f, 0x01, 0x00]), None);
        assert_eq!(elements(&[0x30, 0x80]), None, "indefinite length");
        assert_eq!(elements(&[0x04, 0x81, 0x01, 0xff]), Some(vec![(0x04, &[0xff][..])]));
    }
}
