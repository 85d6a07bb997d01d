//! Which web pages may talk to the server's HTTP listeners (the management
//! interface and STOMP over WebSocket).
//!
//! A browser on any web page can send requests to a listener on the
//! user's machine: a cross-site form post, or, after DNS rebinding, a
//! page whose host name now resolves to 127.0.0.1. Browsers say where a
//! request comes from (`Origin`) and which host it is for (`Host`); these
//! checks turn away those that are not the server's own.

use std::net::IpAddr;

/// The host part of a `Host` header or of an origin's authority
/// (`name`, `name:port`, `1.2.3.4:port`, `[::1]:port`), lower-cased.
pub fn host_of(authority: &str) -> String {
    let authority = authority.trim();
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, port)| {
            // A bare IPv6 address has colons but no port.
            if port.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') {
                h
            } else {
                authority
            }
        }),
    };
    host.to_ascii_lowercase()
}

/// The `host[:port]` of an origin (`scheme://host[:port]`), if it has one.
pub fn authority_of(origin: &str) -> Option<&str> {
    let (_, rest) = origin.trim().split_once("://")?;
    Some(rest.split('/').next().unwrap_or_default())
}

/// Whether `host` names this machine's loopback interface.
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a `Host` header's host may be answered: an address (which no
/// DNS rebinding can produce), a loopback name, or one of `allowed`.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    host.parse::<IpAddr>().is_ok()
        || is_loopback(host)
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
}

/// Whether a page from `origin` may use the listener: one served by the
/// listener itself (the same authority as `host_header`), or from a
/// loopback host, or one of `allowed` (full origins, or `*` for any).
pub fn origin_allowed(origin: &str, host_header: Option<&str>, allowed: &[String]) -> bool {
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(origin.trim()))
    {
        return true;
    }
    let Some(authority) = authority_of(origin) else {
        // "null" (a sandboxed page, a file) or garbage.
        return false;
    };
    host_header.is_some_and(|h| h.trim().eq_ignore_ascii_case(authority))
        || is_loopback(&host_of(authority))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        assert_eq!(host_of("LocalHost:8161"), "localhost");
        assert_eq!(host_of("[::1]:8161"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("example.com"), "example.com");
        assert_eq!(
            authority_of("http://127.0.0.1:8161"),
            Some("127.0.0.1:8161")
        );
        assert_eq!(authority_of("null"), None);
        let none: &[String] = &[];
        assert!(host_allowed("127.0.0.1", none) && host_allowed("10.1.2.3", none));
        assert!(host_allowed("localhost", none));
        assert!(!host_allowed("evil.example", none), "DNS rebinding");
        assert!(host_allowed("broker.corp", &["broker.corp".to_owned()]));
        let host = Some("10.0.0.5:8161");
        assert!(origin_allowed("http://10.0.0.5:8161", host, none), "itself");
        assert!(origin_allowed("http://localhost:3000", host, none));
        assert!(
            !origin_allowed("http://6.6.6.6", host, none),
            "another site"
        );
        assert!(!origin_allowed("null", host, none));
        assert!(
            !origin_allowed("file://", host, none),
            "a file page has no host to trust"
        );
        assert!(origin_allowed(
            "https://app.corp",
            host,
            &["https://app.corp".to_owned()]
        ));
        assert!(origin_allowed("https://any.where", host, &["*".to_owned()]));
    }
}
