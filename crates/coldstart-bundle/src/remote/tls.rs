//! https: rustls over the transport of [`super::http`], with the certificates curl would
//! trust.
//!
//! Trusted are the system's roots (`SSL_CERT_FILE`, else the first of [`SYSTEM_ROOTS`]; the
//! Mozilla roots built into the client where there is none) and the certificates of
//! `--ca-file`. webpki verifies the server's chain against them: signatures, dates, the name
//! in the URL, what each certificate may be used for.
//!
//! One thing is added, as curl and OpenSSL do it (curl sets `X509_V_FLAG_PARTIAL_CHAIN`): a
//! certificate in `--ca-file` is trusted as the server's own certificate too, whatever issued
//! it and even if it is a CA certificate. The quickest self-signed certificate,
//! `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=HOST -addext subjectAltName=...`, is
//! one (`CA:TRUE`), and webpki refuses a CA certificate as a server's own. Such a certificate
//! must be the very one the server presents (byte for byte), be valid now, name the URL's
//! host, and may not be limited to other uses than serving (extended key usage); the
//! handshake is still signed with its key and checked, as for any certificate. Any other
//! certificate is verified by webpki alone.
//!
//! A handshake that fails on what the server sent is a [`TlsRefusal`]: what is wrong, in
//! words, and what to do. Another attempt would fail the same way, so it is never retried.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use coldstart_error::Category;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct};
use rustls::{RootCertStore, SignatureScheme, StreamOwned};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

use super::FetchError;

/// Files tried, in order, for the system's trusted roots (after `SSL_CERT_FILE`).
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The certificates of a PEM file (other items left out).
fn certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    use ureq::tls::{parse_pem, PemItem};
    parse_pem(pem)
        .filter_map(|i| match i {
            Ok(PemItem::Certificate(c)) => Some(CertificateDer::from(c.der().to_vec())),
            _ => None,
        })
        .collect()
}

/// What is trusted: the roots (the system's and `--ca-file`'s), and `--ca-file`'s
/// certificates again as servers' own.
struct Trust {
    roots: RootCertStore,
    own: Vec<CertificateDer<'static>>,
}

fn trust(ca_file: Option<&Path>) -> Result<Trust, FetchError> {
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(SYSTEM_ROOTS.iter().map(PathBuf::from))
        .find_map(|p| std::fs::read(p).ok());
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(system.as_deref().map(certificates).unwrap_or_default());
    let mut own = Vec::new();
    if let Some(p) = ca_file {
        let err = |detail: String| FetchError::CaFile { path: p.display().to_string(), detail };
        let pem = std::fs::read(p)
            .map_err(|e| err(format!("{e}; give a PEM file of CA certificates")))?;
        own = certificates(&pem);
        if own.is_empty() {
            return Err(err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
        }
        let (_, ignored) = roots.add_parsable_certificates(own.iter().cloned());
        if ignored == own.len() {
            return Err(err("none of its certificates can be read".into()));
        }
    }
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    Ok(Trust { roots, own })
}

/// The [`Verifier`] of what `trust` holds, with ring's algorithms.
fn build_verifier(trust: Trust) -> Result<Verifier, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(trust.roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(Verifier { webpki, own: trust.own })
}

/// The client's TLS settings: ring's algorithms, TLS 1.2 and 1.3, the [`Verifier`].
fn client_config(trust: Trust) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(build_verifier(trust)?))
        .with_no_client_auth())
}

/// webpki's verification, and `--ca-file`'s certificates as servers' own (the module's
/// documentation).
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    own: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match verified {
            Err(_) if self.own.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                own_certificate(end_entity, server_name, now)?;
                Ok(ServerCertVerified::assertion())
            }
            v => v,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Checks a certificate of `--ca-file` presented as the server's own: its dates, its
/// purpose and its names (its issuer is not asked about: it is trusted itself).
fn own_certificate(
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let parsed = rustls::server::ParsedCertificate::try_from(cert)?;
    let facts = super::x509::read(cert).ok_or(CertificateError::BadEncoding)?;
    let at =
        |secs: i64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs.max(0) as u64));
    let time = now.as_secs() as i64;
    if time < facts.not_before {
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before: at(facts.not_before),
        }
        .into());
    }
    if time > facts.not_after {
        return Err(
            CertificateError::ExpiredContext { time: now, not_after: at(facts.not_after) }.into()
        );
    }
    if !facts.server_auth {
        return Err(CertificateError::InvalidPurpose.into());
    }
    rustls::client::verify_server_name(&parsed, name)
}

/// Wraps the transport below it in TLS for an `https://` URL (and for an https proxy).
pub(crate) struct TlsConnector {
    ca_file: Option<PathBuf>,
    config: OnceLock<Arc<ClientConfig>>,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector").field("ca_file", &self.ca_file).finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// A connector that trusts the system's roots and `ca_file`'s certificates. They are read
    /// now if `now` (an https URL, whose trust is needed at once, or a CA file, whose errors
    /// are said before any request), else at the first https connection (a redirect to one).
    pub(crate) fn new(ca_file: Option<&Path>, now: bool) -> Result<TlsConnector, FetchError> {
        let c = TlsConnector { ca_file: ca_file.map(Path::to_path_buf), config: OnceLock::new() };
        if now || ca_file.is_some() {
            c.config()?;
        }
        Ok(c)
    }

    fn config(&self) -> Result<Arc<ClientConfig>, FetchError> {
        if let Some(c) = self.config.get() {
            return Ok(c.clone());
        }
        let config = client_config(trust(self.ca_file.as_deref())?)
            .map_err(|detail| FetchError::CaFile { path: "(the trusted roots)".into(), detail })?;
        Ok(self.config.get_or_init(|| Arc::new(config)).clone())
    }
}

/// The host and port a connection is made to, as a message names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The host without brackets (an IPv6 address bare).
    pub host: String,
    pub port: u16,
}

impl Peer {
    pub(crate) fn of(uri: &ureq::http::Uri) -> Peer {
        let host = uri.host().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let https = uri.scheme_str() == Some("https");
        Peer { host, port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }) }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else { return Ok(None) };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let config = self.config().map_err(|e| ureq::Error::Other(Box::new(e)))?;
        let peer = Peer::of(details.uri);
        let name = ServerName::try_from(peer.host.clone())
            .map_err(|_| ureq::Error::Tls("the host is not a name TLS can verify"))?;
        let mut conn = ClientConnection::new(config, name).map_err(ureq::Error::Rustls)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock).map_err(|e| refused(peer, e))?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport { buffers, stream: StreamOwned::new(conn, sock) })))
    }
}

/// A failed handshake as ureq carries it: a [`TlsRefusal`] when rustls refused what the
/// peer sent, else the transport's own error (a timeout, a reset), unchanged.
fn refused(peer: Peer, e: io::Error) -> ureq::Error {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(r) => {
            let refusal = TlsRefusal { peer, proxy: None, problem: TlsProblem::of(r) };
            ureq::Error::Io(io::Error::new(io::ErrorKind::InvalidData, refusal))
        }
        None => ureq::Error::Io(e),
    }
}

/// A TLS connection over the transport below it.
pub(crate) struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        self.stream.write_all(&self.buffers.output()[..amount])?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let n = self.stream.read(self.buffers.input_append_buf())?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// What was wrong with a TLS peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsProblem {
    /// Its certificate chains to no trusted root.
    UnknownIssuer,
    /// Its certificate is a CA certificate not in `--ca-file`.
    CaAsServer,
    /// Its certificate does not name the URL's host; the names it has.
    WrongName { names: Vec<String> },
    /// Its certificate expired (at this Unix time, if known).
    Expired { not_after: Option<i64> },
    /// Its certificate is not valid yet (before this Unix time, if known).
    NotYetValid { not_before: Option<i64> },
    /// Its certificate's extended key usage does not allow serving TLS.
    NotForServers,
    /// Something else about its certificate (a bad signature, an algorithm refused, ...).
    Certificate(String),
    /// It does not speak TLS: what it sent is no TLS record (plain HTTP, say).
    NotTls,
    /// The handshake failed otherwise (no protocol version or cipher in common, an alert).
    Handshake(String),
}

impl TlsProblem {
    fn of(e: &rustls::Error) -> TlsProblem {
        use rustls::Error as E;
        use CertificateError as C;
        let at = |t: &UnixTime| Some(t.as_secs() as i64);
        match e {
            E::InvalidCertificate(c) => match c {
                C::UnknownIssuer => TlsProblem::UnknownIssuer,
                C::Other(o)
                    if matches!(
                        o.0.downcast_ref::<webpki::Error>(),
                        Some(webpki::Error::CaUsedAsEndEntity)
                    ) =>
                {
                    TlsProblem::CaAsServer
                }
                C::NotValidForName => TlsProblem::WrongName { names: Vec::new() },
                C::NotValidForNameContext { presented, .. } => {
                    TlsProblem::WrongName { names: presented.iter().map(|n| bare(n)).collect() }
                }
                C::Expired => TlsProblem::Expired { not_after: None },
                C::ExpiredContext { not_after, .. } => {
                    TlsProblem::Expired { not_after: at(not_after) }
                }
                C::NotValidYet => TlsProblem::NotYetValid { not_before: None },
                C::NotValidYetContext { not_before, .. } => {
                    TlsProblem::NotYetValid { not_before: at(not_before) }
                }
                C::InvalidPurpose | C::InvalidPurposeContext { .. } => TlsProblem::NotForServers,
                C::BadSignature => TlsProblem::Certificate("its signature does not verify".into()),
                C::Revoked => TlsProblem::Certificate("it is revoked".into()),
                C::BadEncoding => {
                    TlsProblem::Certificate("it is not a valid X.509 certificate".into())
                }
                C::UnsupportedSignatureAlgorithmContext { .. }
                | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                    TlsProblem::Certificate(
                        "it is signed with an algorithm not accepted (SHA-1, say)".into(),
                    )
                }
                other => TlsProblem::Certificate(format!("{other:?}")),
            },
            E::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => TlsProblem::NotTls,
            e => TlsProblem::Handshake(e.to_string()),
        }
    }

    /// Bad input when the command line can fix it (trust, the URL's name or scheme); else the
    /// environment (the server's certificate or this machine's clock must change).
    pub fn category(&self) -> Category {
        match self {
            TlsProblem::UnknownIssuer
            | TlsProblem::CaAsServer
            | TlsProblem::WrongName { .. }
            | TlsProblem::NotTls => Category::Usage,
            TlsProblem::Expired { .. }
            | TlsProblem::NotYetValid { .. }
            | TlsProblem::NotForServers
            | TlsProblem::Certificate(_)
            | TlsProblem::Handshake(_) => Category::Environment,
        }
    }
}

/// A name webpki shows as `DnsName("x")` or `IpAddress(1.2.3.4)`, as `x` and `1.2.3.4`.
fn bare(name: &str) -> String {
    let inner = |p: &str, s: &str| name.strip_prefix(p).and_then(|n| n.strip_suffix(s));
    inner("DnsName(\"", "\")").or_else(|| inner("IpAddress(", ")")).unwrap_or(name).to_owned()
}

/// A Unix time as `2036-11-25 05:30 UTC`.
fn date(secs: i64) -> String {
    let (y, m, d, h, min, _) = coldstart_units::utc_from_unix(secs.max(0) as u64);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02} UTC")
}

/// A TLS connection refused: to whom, why, and what to do (its `Display`, one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsRefusal {
    /// Whom the handshake was with.
    pub peer: Peer,
    /// The environment variable that names `peer` as the proxy, when it is the proxy.
    pub proxy: Option<&'static str>,
    pub problem: TlsProblem,
}

impl std::error::Error for TlsRefusal {}

impl std::fmt::Display for TlsRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = &self.peer.host;
        let who = match self.proxy {
            Some(var) => format!("the proxy {} ({var})", self.peer),
            None => "the server".to_owned(),
        };
        match &self.problem {
            TlsProblem::UnknownIssuer => write!(
                f,
                "{who}'s certificate is signed by an authority this machine does not trust: \
                 give that authority's certificate (PEM) with --ca-file FILE"
            ),
            TlsProblem::CaAsServer => write!(
                f,
                "{who}'s certificate is a CA certificate (CA:TRUE, as `openssl req -x509` makes \
                 them) that no --ca-file names: if it is {who}'s own, give it (PEM) with \
                 --ca-file FILE"
            ),
            TlsProblem::WrongName { names } if names.is_empty() => write!(
                f,
                "{who}'s certificate is not valid for {host} (it names no host): give {who} a \
                 certificate for {host}"
            ),
            TlsProblem::WrongName { names } => write!(
                f,
                "{who}'s certificate is not valid for {host} (it is for {}): use one of those \
                 names in the URL, or give {who} a certificate for {host}",
                names.join(", ")
            ),
            TlsProblem::Expired { not_after } => write!(
                f,
                "{who}'s certificate expired{}: renew it (or, if it has not, set this machine's \
                 clock right)",
                not_after.map_or(String::new(), |t| format!(" on {}", date(t)))
            ),
            TlsProblem::NotYetValid { not_before } => write!(
                f,
                "{who}'s certificate is not valid yet{}: set this machine's clock right, or give \
                 {who} a current certificate",
                not_before.map_or(String::new(), |t| format!(" (from {})", date(t)))
            ),
            TlsProblem::NotForServers => write!(
                f,
                "{who}'s certificate may not serve TLS (its extended key usage lacks \
                 serverAuth): give {who} a certificate made for a server"
            ),
            TlsProblem::Certificate(why) => {
                write!(f, "{who}'s certificate is refused: {why}: give {who} a valid certificate")
            }
            TlsProblem::NotTls => match self.proxy {
                Some(var) => write!(
                    f,
                    "{who} does not speak TLS (plain HTTP?): write its URL with http:// in {var}"
                ),
                None => write!(
                    f,
                    "{} does not speak TLS (plain HTTP?): use http:// for this port, or the \
                     server's https port",
                    self.peer
                ),
            },
            TlsProblem::Handshake(why) => {
                write!(f, "the TLS handshake with {} failed: {why}", self.peer)
            }
        }
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
