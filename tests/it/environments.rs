//! Multi-environment pairing (docs/PROTOCOL.md, "Environments") end to end: two or three voxa homes in one process, a real
//! relay, a phone driving the host, and hosts or impostors played by raw WebSockets.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxa::agent::RunningAgent;
use voxa::config::RelayUrl;
use voxa::environments::{self, store, Identity, Issued};
use voxa::net::dial::ClientSocket;
use voxa::secret::Secret;
use voxa::state::{Home, Secrets};

use crate::support::fake_gemini::{FakeGemini, FakeOptions};
use crate::support::harness::*;
use crate::support::voxa;

/// One machine: a voxa home, a workspace and, while started, its agent.
struct Machine {
    dir: TempDir,
    workspace: TempDir,
    home: Home,
    secrets: Secrets,
    agent: Option<RunningAgent>,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("voxa"));
        let (secrets, _) = home.load_or_create_secrets().unwrap();
        Machine { dir, workspace, home, secrets, agent: None }
    }

    /// Starts `voxa run` for this home (again, after a stop) against `relay`.
    async fn start(&mut self, relay: &TestRelay) {
        self.start_with(relay, |_| {}).await;
    }

    /// Like [`Machine::start`], with `tweak`ed options.
    async fn start_with(&mut self, relay: &TestRelay, tweak: impl FnOnce(&mut voxa::agent::AgentOptions)) {
        let (mut options, _) = options(&self.dir, &self.workspace, Some(relay.url()));
        tweak(&mut options);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.agent = Some(voxa::agent::start(options, listener, CancellationToken::new()).await.unwrap());
    }

    async fn stop(&mut self) {
        if let Some(agent) = self.agent.take() {
            tokio::time::timeout(STEP, agent.stop()).await.expect("agent stops");
        }
    }

    fn host_token(&self) -> String {
        store::load_or_create_host_token(&self.home).unwrap().expose().to_owned()
    }

    fn env_key(&self) -> String {
        Identity::load_or_create(&self.home).unwrap().env_key()
    }

    fn issue(&self, relay: &RelayUrl) -> Issued {
        environments::issue(&self.home, relay, &self.host_token()).unwrap()
    }

    fn add(&self, issued: &Issued, name: &str) {
        environments::add(&self.home, &issued.line.encode(), Some(name), &self.host_token()).unwrap();
    }

    fn revoke(&self, target: &str) -> environments::Revoked {
        environments::revoke(&self.home, target, &self.host_token(), "test").unwrap()
    }

    /// The phone of this machine, through the relay, after its hello.
    async fn phone(&self, relay: &TestRelay) -> Phone {
        let mut socket = phone_socket(relay, self.secrets.relay_code.expose()).await;
        say_hello(&mut socket, self.secrets.auth_token.expose()).await;
        Phone { socket, seen: String::new() }
    }

    /// A local client on the loopback socket (holds the auth token, like a script).
    async fn local(&self) -> Phone {
        let agent = self.agent.as_ref().unwrap();
        let mut socket = connect(&format!("ws://{}/", agent.loopback)).await;
        say_hello(&mut socket, self.secrets.auth_token.expose()).await;
        Phone { socket, seen: String::new() }
    }
}

/// A session client that remembers every frame it saw, to prove no credential ever reached it.
struct Phone {
    socket: ClientSocket,
    seen: String,
}

impl Phone {
    async fn call(&mut self, id: &str, name: &str, args: Value, env: Option<&str>) -> Value {
        let mut frame = json!({"type":"tool_call","id": id,"name": name,"args": args});
        if let Some(env) = env {
            frame["env"] = json!(env);
        }
        send(&mut self.socket, frame).await;
        loop {
            let value = recv_json(&mut self.socket).await;
            self.seen.push_str(&value.to_string());
            if value["type"] == "tool_result" && value["id"] == id {
                return value;
            }
        }
    }

    fn assert_never_saw(&self, secrets: &[&str]) {
        for secret in secrets {
            assert!(!self.seen.contains(secret), "a credential reached the phone: {}", self.seen);
        }
    }
}

/// Waits until an environment dials `code` (the relay reports the agent side), then leaves.
async fn wait_dialing(relay: &TestRelay, code: &Secret) {
    let mut probe = phone_socket(relay, code.expose()).await;
    wait_agent_joined(&mut probe).await;
    let _ = futures_util::SinkExt::close(&mut probe).await;
}

/// Plays a host by hand: joins `code`, waits for the environment, sends the host hello.
async fn host_hello(relay: &TestRelay, code: &Secret, env_key: &str) -> (ClientSocket, String) {
    let mut socket = phone_socket(relay, code.expose()).await;
    wait_agent_joined(&mut socket).await;
    let nonce = hex::encode(rand::random::<[u8; 16]>());
    send(&mut socket, json!({"type":"hello","protocol":2,"role":"host","envKey": env_key,"nonce": nonce})).await;
    (socket, nonce)
}

/// The rest of a host's part: checks the environment's signature over `nonce`, and only then
/// presents `bearer`.
async fn present_bearer(socket: &mut ClientSocket, code: &Secret, env_key: &str, nonce: &str, bearer: &str) {
    let identity = recv_type(socket, "identity").await;
    assert_eq!(identity["envKey"], env_key);
    assert!(signed_for(&identity, code, env_key, nonce));
    send(socket, json!({"type":"bearer","bearer": bearer})).await;
}

/// True when an identity frame is `env_key`'s signature for a host hello with `nonce` on `code`.
fn signed_for(identity: &Value, code: &Secret, env_key: &str, nonce: &str) -> bool {
    use voxa::environments::identity::{code_hash, verify_hello, HelloBinding};
    let code = code_hash(code.expose());
    let env_nonce = identity["nonce"].as_str().unwrap_or_default();
    let binding = HelloBinding { code_hash: &code, host_nonce: nonce, env_nonce, handshake: None };
    verify_hello(env_key, &binding, identity["signature"].as_str().unwrap_or_default())
}

fn code_of(result: &Value) -> &str {
    result["error"]["code"].as_str().unwrap_or("")
}

/// An environment and a host, both running, paired as `devbox`.
async fn paired() -> (TestRelay, Machine, Machine, Issued) {
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    let mut host = Machine::new();
    let issued = env.issue(&relay.url());
    host.add(&issued, "devbox");
    env.start(&relay).await;
    host.start(&relay).await;
    wait_dialing(&relay, &issued.line.code).await;
    (relay, env, host, issued)
}

#[tokio::test]
async fn a_call_named_for_an_environment_runs_there_and_returns_with_env() {
    let (relay, env, host, issued) = paired().await;
    std::fs::write(env.workspace.path().join("only-on-the-environment.txt"), "x").unwrap();
    let mut phone = host.phone(&relay).await;
    for (id, target) in [("c1", "devbox"), ("c2", issued.line.env_key.as_str())] {
        let result = phone.call(id, "list_dir", json!({}), Some(target)).await;
        assert_eq!(result["ok"], true, "{result}");
        assert_eq!(result["env"], target);
        let names: Vec<_> = result["result"]["entries"].as_array().unwrap().iter().map(|e| e["name"].clone()).collect();
        assert!(names.contains(&json!("only-on-the-environment.txt")), "{result}");
    }
    // The same call without env runs on the host, whose workspace lacks the file.
    let local = phone.call("c3", "list_dir", json!({}), None).await;
    assert_eq!(local["ok"], true, "{local}");
    assert!(local.get("env").is_none());
    assert!(!local.to_string().contains("only-on-the-environment.txt"));

    // Output streams back as progress tagged with the environment.
    send(&mut phone.socket, json!({"type":"tool_call","id":"c4","name":"run_command","args":{"command":"echo streamed-from-env"},"env":"devbox"})).await;
    let mut progress = String::new();
    let result = loop {
        let frame = recv_json(&mut phone.socket).await;
        phone.seen.push_str(&frame.to_string());
        match frame["type"].as_str() {
            Some("tool_progress") => {
                assert_eq!((frame["id"].as_str(), frame["env"].as_str()), (Some("c4"), Some("devbox")), "{frame}");
                progress.push_str(frame["chunk"].as_str().unwrap());
            }
            Some("tool_result") if frame["id"] == "c4" => break frame,
            _ => {}
        }
    };
    assert_eq!(result["env"], "devbox");
    assert_eq!(result["result"]["exit_code"], 0, "{result}");
    assert!(result["result"]["output"].as_str().unwrap().contains("streamed-from-env"), "{result}");
    assert!(progress.contains("streamed-from-env"), "progress: {progress:?}");

    // Cancelling reaches the environment, whose command ends as cancelled.
    send(
        &mut phone.socket,
        json!({"type":"tool_call","id":"c5","name":"run_command","args":{"command":"sleep 30"},"env":"devbox"}),
    )
    .await;
    send(&mut phone.socket, json!({"type":"cancel","id":"c5"})).await;
    let started = Instant::now();
    let cancelled = recv_result(&mut phone.socket, "c5").await;
    assert_eq!(code_of(&cancelled), "cancelled", "{cancelled}");
    assert_eq!(cancelled["env"], "devbox");
    assert!(started.elapsed() < Duration::from_secs(10));

    // The environment's audit names the host's pairing as the caller.
    let audit: String = std::fs::read_dir(env.home.audit_dir().unwrap())
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    let caller = format!("host:{}:{}", &issued.line.env_key[..16], issued.pairing);
    assert!(audit.lines().any(|line| line.contains(&caller) && line.contains("run_command")), "{audit}");
    phone.assert_never_saw(&[issued.line.bearer.expose(), issued.line.code.expose(), &host.host_token()]);
}

/// An environment and its host running against `relay`, their pairing's code reached through
/// `pairing_relay` (a proxy in front of it).
async fn paired_through(relay: &TestRelay, pairing_relay: &RelayUrl) -> (Machine, Machine, Issued) {
    let (mut env, mut host) = (Machine::new(), Machine::new());
    let issued = env.issue(pairing_relay);
    host.add(&issued, "devbox");
    env.start(relay).await;
    host.start(relay).await;
    wait_dialing(relay, &issued.line.code).await;
    (env, host, issued)
}

/// A TCP proxy that counts the connections it carries.
async fn counting_proxy(target: SocketAddr) -> (RelayUrl, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (RelayUrl::parse(&format!("http://{addr}")).unwrap(), count)
}

/// A TCP proxy in front of the relay that keeps every byte the relay sends on each connection:
/// the frames it passes from one side of a pairing to the other, as a relay's operator sees them
/// (server frames are not masked).
async fn tapping_proxy(target: SocketAddr) -> (RelayUrl, Arc<std::sync::Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tapped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = tapped.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else { return };
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let up = async move {
                    let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
                };
                let down = async move {
                    let mut buf = vec![0u8; 16 << 10];
                    while let Ok(n) = server_rx.read(&mut buf).await {
                        if n == 0 || client_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        kept.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                };
                tokio::join!(up, down);
            });
        }
    });
    (RelayUrl::parse(&format!("http://{addr}")).unwrap(), tapped)
}

#[tokio::test]
async fn the_relay_sees_neither_the_hosts_bearer_nor_the_calls_it_runs_on_an_environment() {
    let relay = TestRelay::start().await;
    let (pairing_relay, tapped) = tapping_proxy(relay.addr).await;
    let (_env, host, issued) = paired_through(&relay, &pairing_relay).await;
    let mut phone = host.phone(&relay).await;
    let command = "echo output-only-the-host-may-read-4c1d";
    let result = phone.call("s1", "run_command", json!({"command": command}), Some("devbox")).await;
    assert!(succeeded(&result), "{result}");
    assert!(result["result"]["output"].as_str().unwrap().contains("output-only-the-host-may-read-4c1d"));

    let seen = tapped.lock().unwrap().clone();
    let shows = |needle: &str| seen.windows(needle.len()).any(|w| w == needle.as_bytes());
    // The tap is real: the host's hello crossed it in the clear, as the handshake's first step.
    assert!(shows(r#""role":"host""#), "the tap saw the host's hello");
    for secret in [issued.line.bearer.expose(), command, "output-only-the-host-may-read-4c1d", "run_command"] {
        assert!(!shows(secret), "the relay saw {secret:?}");
    }
    phone.assert_never_saw(&[issued.line.bearer.expose()]);
}

#[tokio::test]
async fn sessions_to_an_environment_are_pooled_not_opened_per_call() {
    let relay = TestRelay::start().await;
    let (pairing_relay, connections) = counting_proxy(relay.addr).await;
    let (_env, host, _issued) = paired_through(&relay, &pairing_relay).await;
    let before = connections.load(Ordering::SeqCst);
    let mut phone = host.phone(&relay).await;
    for index in 0..4 {
        let result = phone.call(&format!("c{index}"), "list_dir", json!({}), Some("devbox")).await;
        assert!(succeeded(&result), "{result}");
    }
    assert_eq!(connections.load(Ordering::SeqCst) - before, 1, "one session carried every call");
}

fn succeeded(result: &Value) -> bool {
    result["ok"] == true
}

#[tokio::test]
async fn unknown_environments_are_refused_by_the_host_and_by_the_environment() {
    let (relay, env, host, issued) = paired().await;
    let mut phone = host.phone(&relay).await;
    let stranger = Identity::generate().unwrap().env_key();
    let result = phone.call("u1", "list_dir", json!({}), Some(&stranger)).await;
    assert_eq!(code_of(&result), "unknown-environment");
    assert_eq!(result["env"], stranger.as_str());
    assert_eq!(code_of(&phone.call("u2", "list_dir", json!({}), Some("nosuch")).await), "unknown-environment");

    // At the environment the envKey is checked before the bearer: a wrong key with a wrong
    // bearer is unknown-environment, not bearer-refused.
    drop(phone);
    let (mut socket, _) = host_hello(&relay, &issued.line.code, &stranger).await;
    assert_eq!(recv_json(&mut socket).await, json!({"type":"error","code":"unknown-environment"}));
    drop(env);
}

#[tokio::test]
async fn a_re_keyed_environment_is_unknown_under_its_old_key() {
    let (relay, mut env, host, issued) = paired().await;
    let mut phone = host.phone(&relay).await;
    assert!(succeeded(&phone.call("k1", "list_dir", json!({}), Some("devbox")).await));
    env.stop().await;
    std::fs::remove_file(env.home.path(voxa::environments::identity::IDENTITY_FILE)).unwrap();
    env.start(&relay).await;
    assert_ne!(env.env_key(), issued.line.env_key, "the environment has a new identity");
    wait_dialing(&relay, &issued.line.code).await;
    let result = phone.call("k2", "list_dir", json!({}), Some("devbox")).await;
    assert_eq!(code_of(&result), "unknown-environment", "{result}");
}

#[tokio::test]
async fn a_host_without_a_bearer_is_not_paired() {
    let (relay, _env, host, issued) = paired().await;
    let key = issued.line.env_key.clone();
    store::update(&host.home, |_, pairings| {
        pairings.outbound.remove(&key);
        Ok(())
    })
    .unwrap();
    let mut phone = host.phone(&relay).await;
    assert_eq!(code_of(&phone.call("n1", "list_dir", json!({}), Some("devbox")).await), "environment-not-paired");
}

#[tokio::test]
async fn a_wrong_bearer_is_refused_and_never_echoed() {
    let (relay, _env, host, issued) = paired().await;
    let forged = format!("vbx_{}", "5".repeat(32));
    let key = issued.line.env_key.clone();
    let forged_secret = Secret::from_string(forged.clone());
    store::update(&host.home, |_, pairings| {
        pairings.outbound.get_mut(&key).unwrap().bearer = forged_secret;
        Ok(())
    })
    .unwrap();
    let mut phone = host.phone(&relay).await;
    let result = phone.call("b1", "list_dir", json!({}), Some("devbox")).await;
    assert_eq!(code_of(&result), "bearer-refused");
    phone.assert_never_saw(&[&forged, issued.line.bearer.expose(), issued.line.code.expose()]);

    drop(phone);
    let (mut socket, nonce) = host_hello(&relay, &issued.line.code, &issued.line.env_key).await;
    present_bearer(&mut socket, &issued.line.code, &issued.line.env_key, &nonce, &forged).await;
    let refusal = recv_json(&mut socket).await;
    assert_eq!(refusal, json!({"type":"error","code":"bearer-refused"}));
}

#[tokio::test]
async fn a_peer_that_does_not_complete_the_exchange_is_closed_executor_unauthenticated() {
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    let issued = env.issue(&relay.url());
    env.start(&relay).await;
    let mut socket = phone_socket(&relay, issued.line.code.expose()).await;
    wait_agent_joined(&mut socket).await;
    let started = Instant::now();
    assert_eq!(recv_json(&mut socket).await["code"], "executor-unauthenticated");
    assert!(started.elapsed() >= Duration::from_secs(4), "refused too early: {:?}", started.elapsed());
    // The environment has the relay close this peer (1008); the next host starts afresh.
    assert_eq!(recv_close(&mut socket).await, (1008, "executor-unauthenticated".into()));
    // A hello that is answered but never followed by a bearer is no better than silence.
    let (mut socket, nonce) = host_hello(&relay, &issued.line.code, &issued.line.env_key).await;
    let identity = recv_type(&mut socket, "identity").await;
    assert!(signed_for(&identity, &issued.line.code, &issued.line.env_key, &nonce));
    assert_eq!(recv_json(&mut socket).await["code"], "executor-unauthenticated");
}

#[tokio::test]
async fn an_environment_that_is_not_running_is_unreachable() {
    let relay = TestRelay::start().await;
    let env = Machine::new();
    let mut host = Machine::new();
    let issued = env.issue(&relay.url());
    host.add(&issued, "devbox");
    // A second environment whose relay is not listening at all.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let gone = Machine::new().issue(&RelayUrl::parse(&format!("http://{closed}")).unwrap());
    host.add(&gone, "gone");
    host.start(&relay).await;
    let mut phone = host.phone(&relay).await;
    let started = Instant::now();
    let result = phone.call("r1", "list_dir", json!({}), Some("devbox")).await;
    assert_eq!(code_of(&result), "environment-unreachable", "{result}");
    assert!(started.elapsed() < Duration::from_secs(8), "the wait is bounded: {:?}", started.elapsed());
    assert_eq!(code_of(&phone.call("r2", "list_dir", json!({}), Some("gone")).await), "environment-unreachable");
}

#[tokio::test]
async fn an_impostor_holding_the_code_but_not_the_key_is_caught() {
    let relay = TestRelay::start().await;
    let env = Machine::new();
    let mut host = Machine::new();
    let issued = env.issue(&relay.url());
    host.add(&issued, "devbox");
    host.start(&relay).await;
    let impostor_key = Identity::generate().unwrap();
    let mut phone = host.phone(&relay).await;
    for round in 0..2 {
        let url = format!("ws://{}/agent?code={}", relay.addr, issued.line.code.expose());
        let mut impostor = connect(&url).await;
        let id = format!("i{round}");
        let call = phone.call(&id, "list_dir", json!({}), Some("devbox"));
        let act = async {
            let hello = loop {
                let value = recv_json(&mut impostor).await;
                if value["type"] == "hello" {
                    break value;
                }
            };
            assert_eq!(hello["role"], "host");
            assert_eq!(hello["envKey"], issued.line.env_key.as_str());
            assert!(!hello.to_string().contains(issued.line.bearer.expose()), "the hello carries the bearer");
            let nonce = hello["nonce"].as_str().unwrap().to_owned();
            assert_eq!(nonce.len(), 32);
            // Round 0 claims the real key with a forged signature; round 1 signs with its own key.
            let (key, signature) = if round == 0 {
                (issued.line.env_key.clone(), "0".repeat(128))
            } else {
                let code = voxa::environments::identity::code_hash(issued.line.code.expose());
                let env_nonce = "e".repeat(32);
                let binding = voxa::environments::identity::HelloBinding {
                    code_hash: &code,
                    host_nonce: &nonce,
                    env_nonce: &env_nonce,
                    handshake: None,
                };
                (impostor_key.env_key(), impostor_key.sign_hello(&binding))
            };
            let identity = json!({"type":"identity","envKey": key,"nonce": "e".repeat(32),"signature": signature});
            send(&mut impostor, identity).await;
            // Nothing but the hello may reach an unproven environment: no bearer.
            loop {
                match next_frame(&mut impostor).await {
                    Some(tokio_tungstenite::tungstenite::Message::Text(text)) => {
                        let value: Value = serde_json::from_str(&text).unwrap();
                        assert_eq!(value["type"], "presence", "the impostor received {value}");
                        if value["state"] == "left" {
                            break;
                        }
                    }
                    None | Some(tokio_tungstenite::tungstenite::Message::Close(_)) => break,
                    Some(_) => {}
                }
            }
        };
        let (result, ()) = tokio::join!(call, act);
        assert_eq!(code_of(&result), "environment-identity-mismatch", "{result}");
    }
    phone.assert_never_saw(&[issued.line.bearer.expose(), issued.line.code.expose()]);
}

/// Someone holding two pairing codes of one environment (a second host it paired, say) takes the
/// first host's code as the agent, passes that host's hello to the real environment on its own
/// code and hands the signed answer back. The signature names the pairing it was made on, so the
/// host refuses it and never presents its bearer.
#[tokio::test]
async fn a_hello_relayed_to_another_pairing_of_the_environment_gets_no_signature_and_no_bearer() {
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    let mut host = Machine::new();
    let for_host = env.issue(&relay.url());
    let theirs = env.issue(&relay.url());
    host.add(&for_host, "devbox");
    // Once the attacker took the host's code, the environment does not come back to it meanwhile.
    let slow = voxa::agent::link::BackoffPolicy {
        base: Duration::from_secs(120),
        cap: Duration::from_secs(120),
        healthy_after: Duration::from_millis(200),
    };
    env.start_with(&relay, |options| options.backoff = slow).await;
    host.start(&relay).await;
    for issued in [&for_host, &theirs] {
        wait_dialing(&relay, &issued.line.code).await;
    }
    let mut phone = host.phone(&relay).await;
    let mut as_agent = connect(&format!("ws://{}/agent?code={}", relay.addr, for_host.line.code.expose())).await;
    let call = phone.call("x1", "list_dir", json!({}), Some("devbox"));
    let attack = async {
        let hello = loop {
            let value = recv_json(&mut as_agent).await;
            if value["type"] == "hello" {
                break value;
            }
        };
        let mut as_host = phone_socket(&relay, theirs.line.code.expose()).await;
        wait_agent_joined(&mut as_host).await;
        send(&mut as_host, hello).await;
        // The host's sealed hello is keyed by its own pairing's bearer: on the other pairing's
        // code the environment cannot open it, so it signs nothing.
        let answer = recv_json(&mut as_host).await;
        assert_eq!(answer, json!({"type":"error","code":"bearer-refused"}), "the environment answered {answer}");
        send(&mut as_agent, answer).await;
        until_left(&mut as_agent).await
    };
    let (result, heard) = tokio::join!(call, attack);
    assert_eq!(code_of(&result), "bearer-refused", "{result}");
    let bearer = for_host.line.bearer.expose();
    assert!(!heard.iter().any(|frame| frame["type"] == "bearer" || frame.to_string().contains(bearer)), "{heard:?}");
    phone.assert_never_saw(&[bearer]);
}

#[tokio::test]
async fn revocation_closes_live_sessions_at_once_and_for_good() {
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    let mut host = Machine::new();
    let for_host = env.issue(&relay.url());
    let for_hand = env.issue(&relay.url());
    let spare = env.issue(&relay.url());
    host.add(&for_host, "devbox");
    env.start(&relay).await;
    host.start(&relay).await;
    for issued in [&for_host, &for_hand, &spare] {
        wait_dialing(&relay, &issued.line.code).await;
    }
    let mut phone = host.phone(&relay).await;
    assert!(succeeded(&phone.call("v1", "list_dir", json!({}), Some("devbox")).await));

    // A live session opened by hand, then revoked while it is open.
    let (mut session, nonce) = host_hello(&relay, &for_hand.line.code, &for_hand.line.env_key).await;
    present_bearer(&mut session, &for_hand.line.code, &for_hand.line.env_key, &nonce, for_hand.line.bearer.expose())
        .await;
    recv_type(&mut session, "hello_ok").await;
    let started = Instant::now();
    assert_eq!(env.revoke(&for_hand.pairing).pairings, vec![for_hand.pairing.clone()]);
    assert_eq!(recv_json(&mut session).await, json!({"type":"error","code":"pairing-revoked"}));
    let latency = started.elapsed();
    eprintln!("revocation reached the live session in {latency:?}");
    assert!(latency < Duration::from_secs(1), "revocation took {latency:?}");
    let left = recv_json(&mut session).await;
    assert_eq!((left["peer"].as_str(), left["state"].as_str()), (Some("agent"), Some("left")), "{left}");

    // The environment stops dialing the revoked code.
    let mut later = phone_socket(&relay, for_hand.line.code.expose()).await;
    assert_silent(&mut later, Duration::from_millis(700)).await;
    // The revoked bearer is refused as revoked wherever it is presented, before the right one.
    let (mut socket, nonce) = host_hello(&relay, &spare.line.code, &spare.line.env_key).await;
    present_bearer(&mut socket, &spare.line.code, &spare.line.env_key, &nonce, for_hand.line.bearer.expose()).await;
    assert_eq!(recv_json(&mut socket).await, json!({"type":"error","code":"pairing-revoked"}));

    // Revoking the host's pairing ends its pooled session; the host remembers, so later calls
    // are refused without dialing.
    env.revoke(for_host.line.bearer.expose());
    let key = for_host.line.env_key.clone();
    eventually("the host to hear of the revocation", || {
        store::load_pairings(&host.home).unwrap().revoked_bearers.contains_key(&key)
    })
    .await;
    assert!(!store::load_pairings(&host.home).unwrap().outbound.contains_key(&key), "the bearer is gone");
    for id in ["v2", "v3"] {
        let result = phone.call(id, "list_dir", json!({}), Some("devbox")).await;
        assert_eq!(code_of(&result), "pairing-revoked", "{result}");
    }
    phone.assert_never_saw(&[for_host.line.bearer.expose()]);

    let audit: String = std::fs::read_dir(env.home.audit_dir().unwrap())
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    let revoked: Vec<Value> = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["rule"] == "pairing-revoked")
        .collect();
    assert_eq!(revoked.len(), 2, "{audit}");
    assert!(!audit.contains("vbx_"), "{audit}");
}

/// No window after `revoke`: a call sent right after it, on a session the bearer opened, never
/// runs, and the bearer presented right after it is refused — every time, not at the next poll.
#[tokio::test]
async fn a_call_or_bearer_right_after_revoke_is_refused_every_time() {
    const ROUNDS: usize = 30;
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    env.start(&relay).await;
    for round in 0..ROUNDS {
        let open = env.issue(&relay.url());
        let fresh = env.issue(&relay.url());
        for issued in [&open, &fresh] {
            wait_dialing(&relay, &issued.line.code).await;
        }
        let (mut session, nonce) = host_hello(&relay, &open.line.code, &open.line.env_key).await;
        present_bearer(&mut session, &open.line.code, &open.line.env_key, &nonce, open.line.bearer.expose()).await;
        recv_type(&mut session, "hello_ok").await;
        let (mut late, late_nonce) = host_hello(&relay, &fresh.line.code, &fresh.line.env_key).await;
        let identity = recv_type(&mut late, "identity").await;
        assert!(signed_for(&identity, &fresh.line.code, &fresh.line.env_key, &late_nonce));

        // One write revokes both (every pairing of this environment).
        env.revoke(&open.line.env_key);
        let marker = env.workspace.path().join(format!("ran-{round}"));
        let command = format!("touch {}", marker.display());
        let id = format!("late{round}");
        send(&mut session, json!({"type":"tool_call","id": id,"name":"run_command","args":{"command": command}})).await;
        send(&mut late, json!({"type":"bearer","bearer": fresh.line.bearer.expose()})).await;

        // Refused, or the environment already left the revoked code: never admitted.
        for frame in until_left(&mut late).await {
            assert_ne!(frame["type"], "hello_ok", "round {round}: a bearer revoked a moment ago was admitted");
        }
        for frame in until_left(&mut session).await {
            assert_ne!(frame["id"], id.as_str(), "round {round}: the call ran after revoke: {frame}");
        }
        assert!(!marker.exists(), "round {round}: the command ran after revoke");
    }
}

/// Every JSON frame until the environment leaves the code or the socket closes.
async fn until_left(socket: &mut ClientSocket) -> Vec<Value> {
    let mut heard = Vec::new();
    loop {
        match next_frame(socket).await {
            Some(tokio_tungstenite::tungstenite::Message::Text(text)) => {
                // A relay notice is U+0001 and a JSON object.
                let value: Value = serde_json::from_str(text.trim_start_matches('\u{1}')).unwrap();
                let left = value["type"] == "presence" && value["state"] == "left";
                heard.push(value);
                if left {
                    return heard;
                }
            }
            None | Some(tokio_tungstenite::tungstenite::Message::Close(_)) => return heard,
            Some(_) => {}
        }
    }
}

#[tokio::test]
async fn pairings_issued_while_running_are_dialed_without_a_restart() {
    let relay = TestRelay::start().await;
    let mut env = Machine::new();
    env.start(&relay).await;
    let issued = env.issue(&relay.url());
    wait_dialing(&relay, &issued.line.code).await;
    let (mut socket, nonce) = host_hello(&relay, &issued.line.code, &issued.line.env_key).await;
    present_bearer(&mut socket, &issued.line.code, &issued.line.env_key, &nonce, issued.line.bearer.expose()).await;
    let ok = recv_type(&mut socket, "hello_ok").await;
    assert_eq!(ok["envKey"], issued.line.env_key.as_str());
    assert!(!ok.to_string().contains("vbx_"));
}

#[tokio::test]
async fn a_restart_of_either_side_keeps_the_pairing() {
    let (relay, mut env, mut host, issued) = paired().await;
    let mut phone = host.phone(&relay).await;
    assert!(succeeded(&phone.call("s1", "list_dir", json!({}), Some("devbox")).await));

    env.stop().await;
    env.start(&relay).await;
    wait_dialing(&relay, &issued.line.code).await;
    let result = phone.call("s2", "list_dir", json!({}), Some("devbox")).await;
    assert!(succeeded(&result), "{result}");

    drop(phone);
    host.stop().await;
    host.start(&relay).await;
    let mut phone = host.phone(&relay).await;
    let result = phone.call("s3", "list_dir", json!({}), Some("devbox")).await;
    assert!(succeeded(&result), "{result}");
    assert_eq!(result["env"], "devbox");
}

#[tokio::test]
async fn fleet_lists_environments_without_credentials_and_guards_pairing_actions() {
    let (relay, _env, host, issued) = paired().await;
    let mut phone = host.phone(&relay).await;
    let fleet = phone.call("f1", "fleet", json!({}), None).await;
    assert_eq!(fleet["ok"], true, "{fleet}");
    let rows = fleet["result"]["environments"].as_array().unwrap();
    let local = rows.iter().find(|r| r["self"] == true).unwrap();
    assert_eq!(local["envKey"], host.env_key().as_str());
    let devbox = rows.iter().find(|r| r["name"] == "devbox").unwrap();
    assert_eq!(devbox["envKey"], issued.line.env_key.as_str());
    assert_eq!(devbox["state"], "connected", "{devbox}");
    assert_eq!(devbox["reachable"], true);
    assert!(devbox["tools"].is_array());

    // Pairing actions over a socket need the host token, which the phone never has.
    let refused = phone.call("f2", "fleet", json!({"action":"remove","target":"devbox"}), None).await;
    assert_eq!(code_of(&refused), "host-token-required");
    let wrong = json!({"action":"remove","target":"devbox","host_token":"00000000000000000000000000000000"});
    assert_eq!(code_of(&phone.call("f3", "fleet", wrong, None).await), "host-token-required");
    phone.assert_never_saw(&[issued.line.bearer.expose(), issued.line.code.expose(), &host.host_token()]);

    let mut script = host.local().await;
    let args = json!({"action":"remove","target":"devbox","host_token": host.host_token()});
    let removed = script.call("f4", "fleet", args, None).await;
    assert_eq!(removed["result"]["removed"]["name"], "devbox", "{removed}");
    assert!(!removed.to_string().contains(&host.host_token()));
    assert_eq!(code_of(&phone.call("f5", "list_dir", json!({}), Some("devbox")).await), "unknown-environment");
}

#[tokio::test]
async fn the_env_commands_work_as_a_user_runs_them() {
    let env = TempDir::new().unwrap();
    let host = TempDir::new().unwrap();
    let (env_home, host_home) = (env.path().join("voxa"), host.path().join("voxa"));
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let relay = format!("http://{closed}");

    let out = voxa(&env_home, &["env", "issue", "--json", "--relay", &relay]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = issued["line"].as_str().unwrap().to_owned();
    let bearer = issued["bearer"].as_str().unwrap().to_owned();
    assert!(bearer.starts_with("vbx_") && line.contains(&bearer));
    let human = voxa(&env_home, &["env", "issue", "--relay", &relay]);
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(human.contains("voxa env add - --name NAME") && human.contains("\n  voxa-env:1:"), "{human}");

    let out = voxa(&host_home, &["env", "add", &line, "--name", "devbox", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let added: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((added["name"].as_str(), added["envKey"].as_str()), (Some("devbox"), issued["envKey"].as_str()));

    // A cut line is a usage error that does not repeat the bearer.
    let out = voxa(&host_home, &["env", "add", &line[..line.len() - 30]]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&bearer[..12]));

    let out = voxa(&host_home, &["env", "list", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let listed: Value = serde_json::from_str(&text).unwrap();
    let devbox = listed["environments"].as_array().unwrap().iter().find(|r| r["name"] == "devbox").unwrap().clone();
    assert_eq!(devbox["state"], "environment-unreachable");
    assert!(!text.contains(&bearer) && !text.contains(issued["code"].as_str().unwrap()), "{text}");

    let out = voxa(&env_home, &["env", "revoke", &bearer, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let revoked: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(revoked["revoked"], json!([issued["pairing"]]));
    let out = voxa(&env_home, &["env", "revoke", &format!("vbx_{}", "e".repeat(32))]);
    assert_eq!(out.status.code(), Some(4), "an unknown bearer is a refusal");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("eeee"));

    let out = voxa(&host_home, &["env", "remove", "devbox", "--json"]);
    assert!(out.status.success());
    let out = voxa(&host_home, &["env", "remove", "devbox"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown-environment"));

    use std::os::unix::fs::PermissionsExt;
    for home in [&env_home, &host_home] {
        for name in ["identity.key", "environments.json", ".pairings.json", ".host-token"] {
            let mode = std::fs::metadata(home.join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
    }
    std::fs::set_permissions(env_home.join(".pairings.json"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = voxa(&env_home, &["env", "issue", "--relay", &relay]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
}

#[tokio::test]
async fn a_pairing_dialer_replaced_on_its_code_keeps_dialing_and_the_host_gets_through() {
    let (relay, _env, host, issued) = paired().await;
    // Someone holding the pairing's code takes the environment's place at the relay ...
    let mut impostor = connect(&format!("ws://{}/agent?code={}", relay.addr, issued.line.code.expose())).await;
    // ... and the environment takes it back instead of giving up for good.
    assert_eq!(recv_close(&mut impostor).await, (4001, "replaced".into()));
    let mut phone = host.phone(&relay).await;
    let result = phone.call("back", "list_dir", json!({}), Some("devbox")).await;
    assert!(succeeded(&result), "{result}");
}

#[tokio::test]
async fn a_host_declares_fleet_and_env_within_the_schema_gemini_accepts() {
    const KEY: &str = "AIzaSy-host-test-key";
    let (relay, _env, mut host, _issued) = paired().await;
    let mut fake = FakeGemini::start(FakeOptions::new(KEY)).await;
    let config = fake.config(KEY);
    host.stop().await;
    host.start_with(&relay, |options| options.gemini = Some(config)).await;
    let mut phone = host.phone(&relay).await;
    send(&mut phone.socket, json!({"type":"call_start"})).await;
    let (_, setup) = fake.expect_setup().await;
    // The fake closes 1007 on a schema the service refuses: the call starting proves there was none.
    recv_type(&mut phone.socket, "call_started").await;
    let declarations = setup["tools"][0]["functionDeclarations"].as_array().unwrap();
    let fleet = declarations.iter().find(|d| d["name"] == "fleet").expect("fleet is declared on a host");
    assert!(fleet.get("parameters").is_none(), "fleet takes no arguments: {fleet}");
    // Every tool an environment can run takes `env`; the router's and the session host's run here.
    let on_environments =
        |name: &serde_json::Value| voxa::tools::TOOLS.iter().any(|spec| spec.name == name && spec.runs.routable());
    for declaration in declarations.iter().filter(|d| on_environments(&d["name"])) {
        assert_eq!(declaration.pointer("/parameters/properties/env/type"), Some(&json!("STRING")), "{declaration}");
    }
    assert!(declarations.iter().filter(|d| on_environments(&d["name"])).count() >= 5, "{declarations:?}");
}
