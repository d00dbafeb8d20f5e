//! Deciding a request from its head alone: the relay's paths, the relay token, the code, the
//! upgrade, and the relay framing an agent speaks (the newest it offers that the relay knows).

use crate::net::http::RequestHead;
use crate::protocol::relay::{Framing, AGENT_SUBPROTOCOLS, OLD_AGENT_REFUSAL, TOKEN_PROTOCOL_PREFIX};
use crate::protocol::PeerRole;
use crate::relay::service::PhoneService;
use crate::relay::web::WebApp;
use crate::secret::{is_lower_hex, Secret, SECRET_HEX_LEN};

/// The path for a log line: only the relay's own paths are named, never what a client sent.
pub(super) fn printable_path(head: &RequestHead, service: Option<&dyn PhoneService>) -> &'static str {
    match head.path.as_str() {
        "/agent" => "/agent",
        "/ws" => "/ws",
        "/healthz" => "/healthz",
        "/ack" => "/ack",
        path if service.is_some_and(|service| service.path() == path) => "<service>",
        path if WebApp::serves(path) => "<web client>",
        _ => "<other>",
    }
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    Health,
    /// The web client's page, files and `/config` (never behind the relay token: a browser cannot
    /// send one, and nothing served is secret).
    Web,
    /// An agent's socket, in the relay framing picked from its offer.
    Agent {
        code: u128,
        framing: Framing,
    },
    /// A phone's socket.
    Phone {
        code: u128,
    },
    /// A push receipt (`POST /ack?code=…`) for the agent of `code`.
    Receipt {
        code: u128,
    },
    /// The [`PhoneService`]'s path: a phone socket the service serves.
    Service {
        code: u128,
    },
    Refuse(Refusal),
}

/// A plain HTTP answer that ends the exchange.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    pub status: u16,
    pub reason: &'static str,
    pub headers: &'static [(&'static str, &'static str)],
    pub body: &'static str,
}

const NOT_FOUND: Refusal = Refusal { status: 404, reason: "Not Found", headers: &[], body: "not found" };
const METHOD_NOT_ALLOWED: Refusal =
    Refusal { status: 405, reason: "Method Not Allowed", headers: &[("allow", "GET")], body: "method not allowed" };
const POST_ONLY: Refusal =
    Refusal { status: 405, reason: "Method Not Allowed", headers: &[("allow", "POST")], body: "method not allowed" };
const UNAUTHORIZED: Refusal = Refusal {
    status: 401,
    reason: "Unauthorized",
    headers: &[("www-authenticate", "Bearer")],
    body: "relay token required",
};
const BAD_CODE: Refusal =
    Refusal { status: 400, reason: "Bad Request", headers: &[], body: "code must be 32 lowercase hex characters" };
const BAD_KEY: Refusal = Refusal { status: 400, reason: "Bad Request", headers: &[], body: "bad sec-websocket-key" };
/// An agent that speaks no relay framing this relay knows.
const OLD_AGENT: Refusal = Refusal {
    status: 426,
    reason: "Upgrade Required",
    headers: &[("upgrade", "websocket"), ("sec-websocket-protocol", AGENT_SUBPROTOCOLS)],
    body: OLD_AGENT_REFUSAL,
};
const UPGRADE_REQUIRED: Refusal = Refusal {
    status: 426,
    reason: "Upgrade Required",
    headers: &[("upgrade", "websocket"), ("sec-websocket-version", "13")],
    body: "websocket upgrade required",
};

/// Decides a request from its head alone: path, method, relay token, code, then the upgrade. The
/// service's path takes the service's own token when it has one, else the relay token.
pub(super) fn route(head: &RequestHead, token: Option<&Secret>, service: Option<&dyn PhoneService>) -> Route {
    let role = match head.path.as_str() {
        "/healthz" if head.method == "GET" => return Route::Health,
        "/healthz" => return Route::Refuse(METHOD_NOT_ALLOWED),
        // Never behind the relay token: a service worker has none, and the code is the capability.
        "/ack" if head.method != "POST" => return Route::Refuse(POST_ONLY),
        "/ack" => {
            return match head.query_param("code").and_then(parse_code) {
                Some(code) => Route::Receipt { code },
                None => Route::Refuse(BAD_CODE),
            }
        }
        path if WebApp::serves(path) => return Route::Web,
        "/agent" => PeerRole::Agent,
        "/ws" => PeerRole::Phone,
        path => match service.filter(|service| service.path() == path) {
            Some(service) => {
                return match join_route(head, PeerRole::Phone, service.token().or(token)) {
                    Route::Phone { code } => Route::Service { code },
                    other => other,
                }
            }
            None => return Route::Refuse(NOT_FOUND),
        },
    };
    join_route(head, role, token)
}

/// True when the request offers the WebSocket subprotocol `protocol`.
pub(super) fn offers(head: &RequestHead, protocol: &str) -> bool {
    offered_protocols(head).any(|offered| offered == protocol)
}

fn offered_protocols(head: &RequestHead) -> impl Iterator<Item = &str> {
    head.header("sec-websocket-protocol").unwrap_or_default().split(',').map(str::trim)
}

/// True when the request presents `token`, as `Authorization: Bearer` or in a
/// [`TOKEN_PROTOCOL_PREFIX`] subprotocol; both compared in constant time.
fn presents(head: &RequestHead, token: &Secret) -> bool {
    use base64::Engine as _;
    if head.bearer().is_some_and(|presented| token.matches(presented)) {
        return true;
    }
    offered_protocols(head).filter_map(|offered| offered.strip_prefix(TOKEN_PROTOCOL_PREFIX)).any(|encoded| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .is_some_and(|presented| token.matches(&presented))
    })
}

/// Decides a socket request for `role` from the rest of its head: method, token, code, upgrade.
pub(super) fn join_route(head: &RequestHead, role: PeerRole, token: Option<&Secret>) -> Route {
    if head.method != "GET" {
        return Route::Refuse(METHOD_NOT_ALLOWED);
    }
    if let Some(token) = token {
        if !presents(head, token) {
            return Route::Refuse(UNAUTHORIZED);
        }
    }
    let Some(code) = head.query_param("code").and_then(parse_code) else {
        return Route::Refuse(BAD_CODE);
    };
    if !head.is_websocket_upgrade() {
        return Route::Refuse(UPGRADE_REQUIRED);
    }
    // The key is 16 random bytes in base64: always 24 characters.
    if head.header("sec-websocket-key").map(str::trim).map(str::len) != Some(24) {
        return Route::Refuse(BAD_KEY);
    }
    match role {
        PeerRole::Agent => match Framing::pick(offered_protocols(head)) {
            Some(framing) => Route::Agent { code, framing },
            None => Route::Refuse(OLD_AGENT),
        },
        PeerRole::Phone => Route::Phone { code },
    }
}

/// A relay code: exactly 32 lowercase hex characters, nothing around them.
fn parse_code(text: &str) -> Option<u128> {
    if text.len() != SECRET_HEX_LEN || !is_lower_hex(text) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::relay::PHONE_SUBPROTOCOL;

    const CODE: &str = "0123456789abcdef0123456789abcdef";

    fn head(request: &str) -> RequestHead {
        RequestHead::parse(request.as_bytes()).unwrap().0
    }

    fn route_of(head: &RequestHead, token: Option<&Secret>) -> Route {
        route(head, token, None)
    }

    fn upgrade(path: &str, extra: &str) -> RequestHead {
        head(&format!(
            "GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ))
    }

    #[test]
    fn codes_are_exactly_32_lowercase_hex() {
        assert_eq!(parse_code(CODE), Some(0x0123456789abcdef0123456789abcdef));
        for bad in ["", "0123", &CODE.to_uppercase(), &format!("{CODE}0"), &CODE[1..], &format!("+{}", &CODE[1..])] {
            assert_eq!(parse_code(bad), None, "{bad:?}");
        }
        assert_eq!(parse_code(&format!(" {}", &CODE[1..])), None);
        assert_eq!(parse_code(&CODE.replace('a', "g")), None);
    }

    #[test]
    fn routes_paths_codes_and_upgrades() {
        let code = parse_code(CODE).unwrap();
        let agent = upgrade(&format!("/agent?code={CODE}"), "Sec-WebSocket-Protocol: voxa-relay.2\r\n");
        assert_eq!(route_of(&agent, None), Route::Agent { code, framing: Framing::V2 });
        let offered = upgrade(&format!("/agent?code={CODE}"), "Sec-WebSocket-Protocol: other, voxa-relay.2\r\n");
        assert_eq!(route_of(&offered, None), Route::Agent { code, framing: Framing::V2 });
        let newer = upgrade(&format!("/agent?code={CODE}"), "Sec-WebSocket-Protocol: voxa-relay.3, voxa-relay.2\r\n");
        assert_eq!(route_of(&newer, None), Route::Agent { code, framing: Framing::V3 }, "the newest it offers");
        let only_3 = upgrade(&format!("/agent?code={CODE}"), "Sec-WebSocket-Protocol: voxa-relay.3\r\n");
        assert_eq!(route_of(&only_3, None), Route::Agent { code, framing: Framing::V3 });
        let old = upgrade(&format!("/agent?code={CODE}"), "");
        assert_eq!(route_of(&old, None), Route::Refuse(OLD_AGENT), "an agent without the relay framing");
        assert!(OLD_AGENT.body.contains("newer voxa agent"));
        let older = upgrade(&format!("/agent?code={CODE}"), "Sec-WebSocket-Protocol: voxa-relay.1\r\n");
        assert_eq!(route_of(&older, None), Route::Refuse(OLD_AGENT));
        let phone = upgrade(&format!("/ws?v=1&code={CODE}"), "");
        assert_eq!(route_of(&phone, None), Route::Phone { code });

        assert_eq!(route_of(&head("GET /healthz HTTP/1.1\r\n\r\n"), None), Route::Health);
        assert_eq!(route_of(&head("POST /healthz HTTP/1.1\r\n\r\n"), None), Route::Refuse(METHOD_NOT_ALLOWED));
        assert_eq!(route_of(&upgrade("/nope", ""), None), Route::Refuse(NOT_FOUND));
        let ack = head(&format!("POST /ack?code={CODE} HTTP/1.1\r\nContent-Length: 2\r\n\r\n"));
        assert_eq!(route_of(&ack, Some(&Secret::from_string("t".into()))), Route::Receipt { code }, "no relay token");
        assert_eq!(route_of(&head(&format!("GET /ack?code={CODE} HTTP/1.1\r\n\r\n")), None), Route::Refuse(POST_ONLY));
        assert_eq!(route_of(&head("POST /ack?code=XYZ HTTP/1.1\r\n\r\n"), None), Route::Refuse(BAD_CODE));
        assert_eq!(route_of(&head("GET /?code=abc&token=def HTTP/1.1\r\n\r\n"), None), Route::Web);
        assert_eq!(route_of(&head("GET /js/main.js HTTP/1.1\r\n\r\n"), None), Route::Web);
        assert_eq!(route_of(&head("GET /config HTTP/1.1\r\n\r\n"), Some(&Secret::from_string("t".into()))), Route::Web);
        assert_eq!(route_of(&upgrade("/agent?code=XYZ", ""), None), Route::Refuse(BAD_CODE));
        assert_eq!(route_of(&upgrade("/agent", ""), None), Route::Refuse(BAD_CODE));
        let plain = head(&format!("GET /ws?code={CODE} HTTP/1.1\r\nHost: relay\r\n\r\n"));
        assert_eq!(route_of(&plain, None), Route::Refuse(UPGRADE_REQUIRED));
        let post = head(&format!("POST /ws?code={CODE} HTTP/1.1\r\n\r\n"));
        assert_eq!(route_of(&post, None), Route::Refuse(METHOD_NOT_ALLOWED));
        let short_key = head(&format!(
            "GET /ws?code={CODE} HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ));
        assert_eq!(route_of(&short_key, None), Route::Refuse(BAD_KEY));
    }

    #[test]
    fn relay_token_is_checked_before_anything_about_the_code() {
        let token = Secret::from_string("relay-secret".into());
        let path = format!("/agent?code={CODE}");
        assert_eq!(route_of(&upgrade(&path, ""), Some(&token)), Route::Refuse(UNAUTHORIZED));
        let wrong = upgrade(&path, "Authorization: Bearer relay-secreT\r\n");
        assert_eq!(route_of(&wrong, Some(&token)), Route::Refuse(UNAUTHORIZED));
        let basic = upgrade(&path, "Authorization: Basic relay-secret\r\n");
        assert_eq!(route_of(&basic, Some(&token)), Route::Refuse(UNAUTHORIZED));
        let right = upgrade(&path, "Authorization: Bearer relay-secret\r\nSec-WebSocket-Protocol: voxa-relay.2\r\n");
        assert!(matches!(route_of(&right, Some(&token)), Route::Agent { .. }));
        let no_code = upgrade("/agent", "");
        assert_eq!(route_of(&no_code, Some(&token)), Route::Refuse(UNAUTHORIZED));
    }

    #[test]
    fn a_browser_presents_the_relay_token_as_a_subprotocol() {
        let token = Secret::from_string("relay-secret".into());
        let phone = format!("/ws?code={CODE}");
        // base64url of "relay-secret", beside the subprotocol the relay names back.
        let offered = |value: &str| upgrade(&phone, &format!("Sec-WebSocket-Protocol: {value}\r\n"));
        let right = offered("voxa.1, voxa-relay-token.cmVsYXktc2VjcmV0");
        assert!(matches!(route_of(&right, Some(&token)), Route::Phone { .. }));
        assert!(offers(&right, PHONE_SUBPROTOCOL));
        for wrong in [
            "voxa.1, voxa-relay-token.cmVsYXktc2VjcmVU",
            "voxa.1, voxa-relay-token.cmVsYXktc2VjcmV0=",
            "voxa.1, voxa-relay-token.!!",
            "voxa.1, relay-secret",
            "voxa.1",
        ] {
            assert_eq!(route_of(&offered(wrong), Some(&token)), Route::Refuse(UNAUTHORIZED), "{wrong}");
        }
    }
}
