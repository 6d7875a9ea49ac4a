//! URLs as coldstart shows them: never a password or a signed URL's signature.

/// `url` as coldstart shows it, wherever it does (errors, warnings, JSON, progress): the
/// credentials of its user information (`user:password@`) as `***@`, its query string (a
/// signed URL's signature) as `?...`, its fragment left out. What is not a URL (a directory)
/// is shown as it is.
///
/// ```
/// use coldstart_bundle::remote::redact_url;
/// assert_eq!(redact_url("http://user:pw@host:8080/app/?sig=1"), "http://***@host:8080/app/?...");
/// assert_eq!(redact_url("/srv/bundles/app"), "/srv/bundles/app");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(end);
    let host = match authority.rfind('@') {
        Some(at) => format!("***@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let rest = match rest.split_once('?') {
        Some((path, _)) => format!("{path}?..."),
        None => rest.to_owned(),
    };
    format!("{scheme}://{host}{rest}")
}
