//! What a pairing link is good for, said beside the link wherever it is printed (`pair`, `run`):
//! a relay on loopback reaches this machine's browser only; a phone needs a relay it can reach,
//! over https — `voxa run --lan` on this network, a tailnet, or a relay of one's own. There is no
//! app: the web page the relay serves is the client.

use crate::config::{is_loopback_host, RelayUrl, DEFAULT_RELAY};

/// Who can open a pairing link of a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A relay on a loopback address: a browser on this machine, nothing else.
    ThisMachine,
    /// The relay inside `voxa run --lan`, with its own certificate: phones on this network.
    ThisNetwork,
    /// A relay elsewhere: any phone that can reach it.
    Phones,
}

impl Reach {
    /// Who can open a link of `relay`; `lan` is the fingerprint of the certificate of a
    /// `--lan` relay ([`super::lan::fingerprint_of`]), which serves this network whatever its address.
    pub fn of_link(relay: &RelayUrl, lan: Option<&str>) -> Reach {
        match lan {
            Some(_) => Reach::ThisNetwork,
            None => Reach::of(relay),
        }
    }

    pub fn of(relay: &RelayUrl) -> Reach {
        let loopback =
            url::Url::parse(relay.as_str()).ok().and_then(|url| url.host_str().map(is_loopback_host)).unwrap_or(false);
        if loopback {
            Reach::ThisMachine
        } else {
            Reach::Phones
        }
    }

    /// The word `--json` output uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::ThisMachine => "this-machine",
            Reach::ThisNetwork => "this-network",
            Reach::Phones => "phones",
        }
    }

    /// A QR code is for a phone's camera: none for a link no phone can open.
    pub fn wants_qr(self) -> bool {
        self != Reach::ThisMachine
    }

    /// The line above the link (`qr`: a QR code is printed above it).
    pub fn intro(self, qr: bool) -> &'static str {
        match (self, qr) {
            (Reach::ThisMachine, _) => {
                "Open this link in a browser on this machine (the web page is the client; there is no app to install):"
            }
            (Reach::ThisNetwork, true) => {
                "Scan the code with the camera of a phone on this network, or open this link in its browser (the \
                 web page is the client; there is no app to install):"
            }
            (Reach::ThisNetwork, false) => {
                "Open this link in the browser of a phone on this network (the web page is the client; there is \
                 no app to install):"
            }
            (Reach::Phones, true) => {
                "Scan the code with the phone's camera, or open this link in its browser (the web page is the \
                 client; there is no app to install):"
            }
            (Reach::Phones, false) => {
                "Open this link in the phone's browser (the web page is the client; there is no app to install):"
            }
        }
    }
}

/// The lines below the link: the relay, who runs it, for a `--lan` relay its certificate (`lan`,
/// its fingerprint) and what accepting it means, and for a loopback relay how to reach a phone.
pub fn note(relay: &RelayUrl, lan: Option<&str>) -> String {
    let mut text = match (Reach::of(relay), lan) {
        (_, Some(fingerprint)) => super::lan::note(relay, fingerprint),
        (reach, None) => note_without_certificate(relay, reach),
    };
    text.push_str("Anyone with this link can drive this machine; keep it private.\n");
    text
}

fn note_without_certificate(relay: &RelayUrl, reach: Reach) -> String {
    match reach {
        Reach::ThisMachine | Reach::ThisNetwork => format!(
            "Relay: {relay}, on loopback: this link works in this machine's browser only. To reach a phone, \
             use a relay the phone can reach over https:\n\
             \x20 - a phone on this Wi-Fi: `voxa run --lan` serves this relay on this machine's address on the \
             network, with a certificate of its own (docs/GUIDE.md);\n\
             \x20 - your tailnet: `voxa relay` and `tailscale serve --bg 8787` on this machine, then \
             `voxa --relay https://<machine>.<tailnet>.ts.net run`;\n\
             \x20 - your own relay on a server with a name: `voxa relay --domain <its name> --listen [::]:443` \
             (it gets its own certificate), then `voxa --relay https://<its name> run` (docs/OPERATIONS.md);\n\
             \x20 - the default relay: `voxa run` dials {DEFAULT_RELAY}, run by voxa's publisher, not by you: it \
             carries your sessions sealed end to end (it cannot read them), never your token.\n"
        ),
        Reach::Phones if relay.as_str() == DEFAULT_RELAY => format!(
            "Relay: {relay}, the default relay, run by voxa's publisher, not by you: it carries your sessions \
             sealed end to end (it cannot read them), never your token. Your own relay: docs/OPERATIONS.md.\n"
        ),
        Reach::Phones => format!("Relay: {relay}; the phone must be able to reach it.\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(url: &str) -> RelayUrl {
        RelayUrl::parse(url).unwrap()
    }

    #[test]
    fn a_loopback_relay_reaches_this_machine_and_says_how_to_reach_a_phone() {
        for url in ["http://127.0.0.1:8787", "http://localhost:1", "http://[::1]:9", "https://127.0.0.1:8443"] {
            assert_eq!(Reach::of(&relay(url)), Reach::ThisMachine, "{url}");
        }
        let text = note(&relay("http://127.0.0.1:8787"), None);
        assert!(text.contains("this machine's browser only"), "{text}");
        // The three paths to a phone, in the order of the effort they take.
        let at = |words: &str| text.find(words).unwrap_or_else(|| panic!("{words:?} missing: {text}"));
        assert!(
            at("voxa run --lan") < at("tailscale serve") && at("tailscale serve") < at("voxa relay --domain"),
            "{text}"
        );
        assert!(!text.contains("--tls-cert"), "the relay gets its own certificate: {text}");
        assert!(text.contains(DEFAULT_RELAY) && text.contains("run by voxa's publisher"), "{text}");
        assert!(!Reach::ThisMachine.wants_qr());
    }

    #[test]
    fn the_default_relay_says_who_runs_it_and_another_says_nothing_it_cannot_know() {
        let default = note(&relay(DEFAULT_RELAY), None);
        assert!(default.contains("run by voxa's publisher, not by you"), "{default}");
        assert!(default.contains("sealed end to end") && default.contains("never your token"), "{default}");
        let own = note(&relay("https://relay.example.com"), None);
        assert!(own.contains("the phone must be able to reach it") && !own.contains("publisher"), "{own}");
        assert_eq!(Reach::of(&relay("https://relay.example.com")), Reach::Phones);
        assert!(Reach::Phones.wants_qr());
    }

    #[test]
    fn a_lan_relay_reaches_this_network_and_says_what_accepting_its_certificate_means() {
        let lan = relay("https://127.0.0.2:8443");
        let fingerprint = "AB:CD";
        assert_eq!(Reach::of_link(&lan, Some(fingerprint)), Reach::ThisNetwork);
        assert_eq!(Reach::of_link(&lan, None), Reach::ThisMachine);
        assert!(Reach::ThisNetwork.wants_qr());
        let text = note(&lan, Some(fingerprint));
        for words in [
            "  AB:CD\n",
            "warns once",
            "WebCrypto and the service worker work only on a secure page",
            "compare the fingerprint",
            "Status → Certificate",
            "another machine could answer first and serve a different page",
            "on a network you trust",
            "keep it private",
        ] {
            assert!(text.contains(words), "{words:?} missing: {text}");
        }
    }

    #[test]
    fn no_words_promise_an_app() {
        for (reach, qr) in [
            (Reach::ThisMachine, false),
            (Reach::ThisNetwork, true),
            (Reach::ThisNetwork, false),
            (Reach::Phones, true),
            (Reach::Phones, false),
        ] {
            assert!(reach.intro(qr).contains("there is no app to install"));
            assert!(!reach.intro(qr).to_lowercase().contains("voxa app"));
        }
        assert!(!Reach::Phones.intro(false).contains("Scan"), "no code to scan without one");
        assert!(!Reach::ThisNetwork.intro(false).contains("Scan"), "no code to scan without one");
    }
}
