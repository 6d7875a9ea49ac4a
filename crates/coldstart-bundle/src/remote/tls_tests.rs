//! The verifier on the certificates of `testdata/` (how they were made: `x509.rs`'s tests),
//! at chosen times: what `--ca-file` adds, and that everything else is still checked.

use super::*;
use crate::remote::x509::tests::{der, NOT_AFTER, NOT_BEFORE};

const SELF_SIGNED_CA: &str = include_str!("testdata/self-signed-ca.pem");
const CLIENT_ONLY: &str = include_str!("testdata/client-only.pem");
const CA: &str = include_str!("testdata/ca.pem");
const LEAF: &str = include_str!("testdata/leaf.pem");

/// The verifier of a client given `ca_file` (PEM text), or none.
fn verifier(ca_file: Option<&str>) -> Verifier {
    let file = tempfile::NamedTempFile::new().unwrap();
    if let Some(pem) = ca_file {
        std::fs::write(file.path(), pem).unwrap();
    }
    build_verifier(trust(ca_file.map(|_| file.path())).unwrap()).unwrap()
}

fn at(secs: i64) -> UnixTime {
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs as u64))
}

const DAY: i64 = 86_400;

/// What the verifier says of the server certificate `pem` for `host` at `time`.
fn verify(v: &Verifier, pem: &str, host: &str, time: i64) -> Result<(), TlsProblem> {
    let cert = CertificateDer::from(der(pem));
    let name = ServerName::try_from(host.to_owned()).unwrap();
    v.verify_server_cert(&cert, &[], &name, &[], at(time))
        .map(|_| ())
        .map_err(|e| TlsProblem::of(&e))
}

#[test]
fn a_self_signed_ca_certificate_in_the_ca_file_is_trusted_as_the_servers_own() {
    let v = verifier(Some(SELF_SIGNED_CA));
    assert_eq!(verify(&v, SELF_SIGNED_CA, "127.0.0.1", NOT_BEFORE + DAY), Ok(()));
    assert_eq!(verify(&v, SELF_SIGNED_CA, "localhost", NOT_AFTER - DAY), Ok(()));
    // Without it, refused for what it is, with what to do.
    let refused = verify(&verifier(None), SELF_SIGNED_CA, "127.0.0.1", NOT_BEFORE + DAY);
    assert_eq!(refused, Err(TlsProblem::CaAsServer));
}

#[test]
fn a_certificate_of_the_ca_file_still_needs_the_right_name_and_dates_and_purpose() {
    let v = verifier(Some(SELF_SIGNED_CA));
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let now = NOT_BEFORE + DAY;
    assert_eq!(verify(&v, SELF_SIGNED_CA, "127.0.0.2", now), Err(TlsProblem::WrongName { names }));
    let expired = Err(TlsProblem::Expired { not_after: Some(NOT_AFTER) });
    assert_eq!(verify(&v, SELF_SIGNED_CA, "127.0.0.1", NOT_AFTER + 1), expired);
    let early = Err(TlsProblem::NotYetValid { not_before: Some(NOT_BEFORE) });
    assert_eq!(verify(&v, SELF_SIGNED_CA, "127.0.0.1", NOT_BEFORE - 1), early);
    let client = verifier(Some(CLIENT_ONLY));
    assert_eq!(verify(&client, CLIENT_ONLY, "127.0.0.1", now), Err(TlsProblem::NotForServers));
}

#[test]
fn only_the_very_certificates_of_the_ca_file_are_trusted_as_a_servers_own() {
    let now = NOT_BEFORE + DAY;
    // Another file: the self-signed certificate is still a CA certificate nobody trusts.
    let other = verifier(Some(CA));
    assert_eq!(verify(&other, SELF_SIGNED_CA, "127.0.0.1", now), Err(TlsProblem::CaAsServer));
    assert_eq!(verify(&verifier(None), LEAF, "127.0.0.1", now), Err(TlsProblem::UnknownIssuer));
}

#[test]
fn a_chain_to_a_ca_of_the_file_is_verified_as_before() {
    let v = verifier(Some(CA));
    let now = NOT_BEFORE + DAY;
    assert_eq!(verify(&v, LEAF, "127.0.0.1", now), Ok(()));
    let names = vec!["127.0.0.1".to_owned()];
    assert_eq!(verify(&v, LEAF, "localhost", now), Err(TlsProblem::WrongName { names }));
    let expired = Err(TlsProblem::Expired { not_after: Some(NOT_AFTER) });
    assert_eq!(verify(&v, LEAF, "127.0.0.1", NOT_AFTER + DAY), expired);
    // A leaf given as the file is trusted itself, as curl trusts it.
    assert_eq!(verify(&verifier(Some(LEAF)), LEAF, "127.0.0.1", now), Ok(()));
}

#[test]
fn each_refusal_is_one_line_that_says_what_to_do_and_whose_fix_it_is() {
    let peer = Peer { host: "127.0.0.1".into(), port: 8443 };
    let say = |problem: TlsProblem| {
        let r = TlsRefusal { peer: peer.clone(), proxy: None, problem: problem.clone() };
        let text = r.to_string();
        assert!(!text.contains('\n'), "{text}");
        (text, problem.category())
    };
    let (text, category) = say(TlsProblem::CaAsServer);
    assert!(text.contains("CA certificate") && text.contains("--ca-file FILE"), "{text}");
    assert_eq!(category, Category::Usage);
    let (text, _) = say(TlsProblem::UnknownIssuer);
    assert!(text.contains("unknown") || text.contains("does not trust"), "{text}");
    let (text, _) = say(TlsProblem::WrongName { names: vec!["localhost".into()] });
    assert!(text.contains("not valid for 127.0.0.1 (it is for localhost)"), "{text}");
    let (text, category) = say(TlsProblem::Expired { not_after: Some(NOT_AFTER) });
    assert!(text.contains("expired on 2036-11-25 05:30 UTC"), "{text}");
    assert_eq!(category, Category::Environment);
    let (text, category) = say(TlsProblem::NotTls);
    assert!(
        text.contains("127.0.0.1:8443 does not speak TLS") && text.contains("http://"),
        "{text}"
    );
    assert_eq!(category, Category::Usage);
    let proxied = TlsRefusal { peer, proxy: Some("HTTPS_PROXY"), problem: TlsProblem::NotTls };
    assert!(proxied.to_string().contains("in HTTPS_PROXY"), "{proxied}");
}

#[test]
fn a_ca_file_of_nothing_readable_is_refused_before_any_request() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "not PEM").unwrap();
    let err = TlsConnector::new(Some(file.path()), false).unwrap_err();
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    let missing = Path::new("/nonexistent/ca.pem");
    let err = TlsConnector::new(Some(missing), false).unwrap_err();
    assert!(err.to_string().starts_with("--ca-file /nonexistent/ca.pem: "), "{err}");
}
