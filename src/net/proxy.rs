//! The HTTP CONNECT proxy outbound `wss://` connections go through: its setting
//! (`HTTPS_PROXY`, `NO_PROXY`), which hosts bypass it, and the tunnel itself.

use anyhow::{anyhow, bail, Context, Result};
use tokio::net::TcpStream;

use crate::config::is_loopback_host;
use crate::secret::Secret;

/// An HTTP proxy reached with CONNECT.
#[derive(Clone)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    credentials: Option<(String, Secret)>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy({}:{})", self.host, self.port)
    }
}

impl Proxy {
    /// Parses `http://[user:pass@]host[:port]` (scheme optional).
    pub fn parse(text: &str) -> Result<Self> {
        let with_scheme = if text.contains("://") { text.to_owned() } else { format!("http://{text}") };
        let url = url::Url::parse(&with_scheme).map_err(|err| anyhow!("proxy setting is not a valid URL: {err}"))?;
        if url.scheme() != "http" {
            bail!("only http:// proxies are supported (CONNECT), not {}://", url.scheme());
        }
        let host = url.host_str().ok_or_else(|| anyhow!("proxy setting has no host"))?;
        let credentials = (!url.username().is_empty())
            .then(|| (url.username().to_owned(), Secret::from_string(url.password().unwrap_or_default().to_owned())));
        Ok(Proxy {
            host: host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            port: url.port().unwrap_or(80),
            credentials,
        })
    }

    /// Opens a tunnel through the proxy to `host:port` with CONNECT.
    pub(crate) async fn connect(&self, host: &str, port: u16) -> Result<TcpStream> {
        let mut stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("could not reach proxy {}:{}", self.host, self.port))?;
        let result = match &self.credentials {
            Some((user, password)) => {
                async_http_proxy::http_connect_tokio_with_basic_auth(&mut stream, host, port, user, password.expose())
                    .await
            }
            None => async_http_proxy::http_connect_tokio(&mut stream, host, port).await,
        };
        result.map_err(|err| anyhow!("proxy {}:{} refused CONNECT: {err}", self.host, self.port))?;
        Ok(stream)
    }
}

/// The proxy named by `HTTPS_PROXY`/`https_proxy`/`ALL_PROXY`/`all_proxy`, if one is set.
pub(crate) fn from_env() -> Result<Option<Proxy>> {
    match env_setting(&["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]) {
        Some(proxy) => Ok(Some(Proxy::parse(proxy.trim()).context("HTTPS_PROXY is not usable")?)),
        None => Ok(None),
    }
}

/// The hosts listed in `NO_PROXY`/`no_proxy`, lower-cased, if it is set.
pub(crate) fn no_proxy_from_env() -> Option<Vec<String>> {
    let list = env_setting(&["NO_PROXY", "no_proxy"])?;
    Some(list.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect())
}

fn env_setting(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| std::env::var(n).ok()).filter(|v| !v.trim().is_empty())
}

/// Whether `host` is dialled directly: loopback hosts always, and hosts `no_proxy` lists (a
/// domain covers its subdomains; `*` covers everything).
pub(crate) fn bypasses(no_proxy: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    is_loopback_host(&host)
        || no_proxy.iter().any(|entry| {
            let entry = entry.trim_start_matches("*.").trim_start_matches('.');
            entry == "*" || host == entry || host.ends_with(&format!(".{entry}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_parsing_and_bypass() {
        let proxy = Proxy::parse("http://user:pw@proxy.corp:3128").unwrap();
        assert_eq!((proxy.host.as_str(), proxy.port), ("proxy.corp", 3128));
        assert!(!format!("{proxy:?}").contains("pw"));
        assert_eq!(Proxy::parse("proxy.corp").unwrap().port, 80);
        assert!(Proxy::parse("socks5://p:1").is_err());

        let no_proxy = [".example.com".to_owned(), "internal".to_owned()];
        assert!(bypasses(&no_proxy, "relay.example.com"));
        assert!(bypasses(&no_proxy, "internal"));
        assert!(bypasses(&no_proxy, "127.0.0.1"));
        assert!(!bypasses(&no_proxy, "api.voxa.space"));
        assert!(!bypasses(&no_proxy, "notexample.com"));
    }
}
