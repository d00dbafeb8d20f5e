//! Where the laptop may send a push. A `push_subscribe` names any URL it likes, and the laptop then
//! POSTs to it on its own: without a check that is a request forgery from inside the user's network
//! (a router's admin page, a cloud metadata address, a local service). So an endpoint must be
//! `https://` and every address its host resolves to public — not loopback, private, link-local,
//! unique-local, CGNAT, multicast, unspecified, documentation or reserved — checked when it is
//! subscribed and again before every push (a name can be made to resolve elsewhere later), and the
//! push goes to the very address that was checked. `[push] allow_private_endpoints = true` lifts
//! the address check (and lets plain `http://` reach loopback) for a push service of one's own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// Longest a name lookup of an endpoint may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// An endpoint the laptop may send to, and the addresses it was found at.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The host as the URL names it (the TLS name), without brackets.
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Every address the host resolved to, each allowed.
    pub addrs: Vec<SocketAddr>,
}

/// An endpoint the laptop will not send to, whatever it answers: not worth a retry.
#[derive(Debug)]
pub struct NotAllowed(pub String);

impl std::fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotAllowed {}

/// Checks `endpoint` and resolves its host: `https://` and public addresses only, unless
/// `allow_private`. The error is a sentence for the page ([`NotAllowed`] when the endpoint itself
/// is refused); it names the host, never the path (the path is the subscription's capability).
pub async fn check(endpoint: &str, allow_private: bool) -> Result<Checked> {
    let refuse = |reason: String| anyhow::Error::new(NotAllowed(reason));
    let url = url::Url::parse(endpoint).map_err(|_| refuse("the push endpoint is not a URL".into()))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(refuse("the push endpoint must be an https:// URL".into()));
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(refuse("the push endpoint has no host".into())),
    };
    let tls = match url.scheme() {
        "https" => true,
        "http" if allow_private && crate::config::is_loopback_host(&host) => false,
        _ => return Err(refuse("the push endpoint must be an https:// URL".into())),
    };
    let port = url.port().unwrap_or(if tls { 443 } else { 80 });
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host.as_str(), port)))
            .await
            .map_err(|_| anyhow!("could not resolve the push endpoint {host} in time"))?
            .with_context(|| format!("could not resolve the push endpoint {host}"))?
            .collect(),
    };
    if addrs.is_empty() {
        bail!("the push endpoint {host} resolves to no address");
    }
    if !allow_private {
        if let Some(private) = addrs.iter().find(|addr| !is_public(addr.ip())) {
            return Err(refuse(format!(
                "the push endpoint {host} is at {}, which is not a public address; voxa sends notifications \
                 only to public push services ([push] allow_private_endpoints = true in config.toml allows \
                 one on your own network)",
                private.ip()
            )));
        }
    }
    Ok(Checked { host, port, tls, addrs })
}

/// True for an address a public push service can have: none of loopback, private (RFC 1918),
/// link-local, unique-local, shared/CGNAT (RFC 6598), multicast, broadcast, unspecified,
/// "this network", documentation, benchmarking, IETF protocol assignments or reserved ranges. An
/// IPv6 address that carries an IPv4 one (mapped, compatible, NAT64, 6to4) is judged by it.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

/// IPv4 ranges no push service lives in, as (network, prefix length).
const NOT_PUBLIC_V4: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),       // "this network", unspecified
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // shared address space (CGNAT)
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local (cloud metadata lives here)
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // documentation
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast (deprecated)
    ([192, 168, 0, 0], 16),  // private
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation
    ([203, 0, 113, 0], 24),  // documentation
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and 255.255.255.255 broadcast
];

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    !NOT_PUBLIC_V4.iter().any(|(network, len)| {
        let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
        bits & mask == u32::from(Ipv4Addr::from(*network)) & mask
    })
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    let first = segments[0];
    let not_public = ip.is_unspecified()
        || ip.is_loopback()
        || first & 0xff00 == 0xff00 // multicast
        || first & 0xfe00 == 0xfc00 // unique-local fc00::/7
        || first & 0xffc0 == 0xfe80 // link-local fe80::/10
        || first & 0xffc0 == 0xfec0 // site-local fec0::/10 (deprecated)
        || (first == 0x2001 && segments[1] == 0x0db8) // documentation 2001:db8::/32
        || (first == 0x2001 && segments[1] < 0x0200) // IETF protocol assignments 2001::/23 (Teredo included)
        || (first == 0x0100 && segments[1..4] == [0, 0, 0]) // discard-only 100::/64
        || first & 0xe000 != 0x2000; // outside global unicast 2000::/3
    !not_public
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(tail());
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.7",
            "198.18.0.1",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "fec0::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:c0a8:0101::1",
            "2001::1",
            "100::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private} is not public");
        }
        for public in
            ["8.8.8.8", "1.1.1.1", "142.250.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"]
        {
            assert!(is_public(public.parse().unwrap()), "{public} is public");
        }
    }

    #[tokio::test]
    async fn endpoints_must_be_https_on_public_addresses_unless_private_ones_are_allowed() {
        for (endpoint, word) in [
            ("http://127.0.0.1:9/x", "https"),
            ("http://push.example/x", "https"),
            ("file:///etc/passwd", "https"),
            ("https://127.0.0.1:9/x", "127.0.0.1"),
            ("https://[::1]:9/x", "::1"),
            ("https://169.254.169.254/latest", "169.254.169.254"),
            ("https://[::ffff:192.168.0.1]/x", "not a public address"),
            // A name is resolved, and judged by where it points.
            ("https://localhost:9/x", "not a public address"),
        ] {
            let err = check(endpoint, false).await.unwrap_err().to_string();
            assert!(err.contains(word), "{endpoint}: {err}");
            assert!(!err.contains("/x") && !err.contains("latest"), "the path stays out of it: {err}");
        }
        let own = check("http://127.0.0.1:9/x", true).await.unwrap();
        assert_eq!((own.tls, own.port, own.addrs[0].to_string().as_str()), (false, 9, "127.0.0.1:9"));
        assert!(check("https://localhost:9/x", true).await.unwrap().tls);
        assert!(check("http://192.168.0.1/x", true).await.is_err(), "plain http only to loopback");
        let public = check("https://8.8.8.8/push/abc", false).await.unwrap();
        assert_eq!((public.host.as_str(), public.port), ("8.8.8.8", 443));
    }
}
