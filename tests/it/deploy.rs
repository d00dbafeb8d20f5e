//! The committed deployment (deploy/): nginx, started with `deploy/nginx/voxa-relay.conf` (ports
//! and paths substituted, 127.0.0.1 only), in front of three real `voxa relay` processes, with real
//! `voxa run` agents where reconnecting is the point; and the systemd unit checked by systemd.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{raise_open_file_limit, voxa_cmd};

/// Longest any single step may take.
const WAIT: Duration = Duration::from_secs(10);
/// Pairs sent through nginx.
const PAIRS: usize = 1000;
/// Real agent processes (each with a phone of the test's own).
const AGENTS: usize = 4;
/// Pause between two rounds of one pair.
const ROUND_GAP: Duration = Duration::from_millis(250);
/// Frames each side sends per round.
const BURST: usize = 3;

const COMMITTED_CONF: &str = include_str!("../../deploy/nginx/voxa-relay.conf");
const COMMITTED_UNIT: &str = include_str!("../../deploy/systemd/voxa-relay@.service");

type Socket = voxa::net::dial::ClientSocket;

/// Finds a program on PATH or in the sbin directories, where Debian puts nginx.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The program, or `None` with a note where it is not installed outside CI; under CI (`CI` set,
/// as `.ci/run` runs after installing it) a missing program fails the test.
fn required_program(name: &str, package: &str) -> Option<PathBuf> {
    let found = find_program(name);
    if found.is_none() {
        let advice = format!("{name} is not installed: install {package} (apt-get install {package}) to run this test");
        assert!(std::env::var_os("CI").is_none(), "{advice}");
        eprintln!("skipped: {advice}");
    }
    found
}

/// A `voxa relay` process on 127.0.0.1:0 with its metrics on another port.
struct RelayProcess {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
}

impl RelayProcess {
    async fn spawn(home: &Path) -> RelayProcess {
        let mut command = Command::from(voxa_cmd(home));
        command
            .args(["relay", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--json"])
            .args(["--max-connections-per-ip", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = timeout(WAIT, lines.next_line()).await.unwrap().unwrap().expect("relay_listening");
        let event: Value = serde_json::from_str(&line).unwrap();
        let addr = event["listen"].as_str().unwrap().parse().unwrap();
        let metrics = event["metrics"].as_str().unwrap();
        let metrics = metrics.trim_start_matches("http://").trim_end_matches("/metrics").parse().unwrap();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        RelayProcess { child, addr, metrics }
    }

    /// Agent sockets this relay holds, from its metrics.
    async fn agents(&self) -> u64 {
        let mut tcp = TcpStream::connect(self.metrics).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n").await.unwrap();
        let mut text = String::new();
        timeout(WAIT, tcp.read_to_string(&mut text)).await.unwrap().unwrap();
        let line = text.lines().find_map(|line| line.strip_prefix(r#"voxa_relay_sockets{role="agent"} "#));
        line.and_then(|value| value.parse().ok()).unwrap_or_else(|| panic!("no agent gauge in {text}"))
    }

    fn kill(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }
}

/// The committed nginx configuration with this test's ports and paths, and nothing else changed.
fn substituted_conf(port: u16, relays: &[SocketAddr], dir: &Path) -> String {
    let mut conf = COMMITTED_CONF.to_owned();
    let mut replace = |from: &str, to: &str| {
        assert!(conf.contains(from), "deploy/nginx/voxa-relay.conf no longer contains {from:?}");
        conf = conf.replace(from, to);
    };
    replace("listen 443 ssl http2;", &format!("listen 127.0.0.1:{port} ssl http2;"));
    replace("    listen [::]:443 ssl http2;\n", "");
    replace("/etc/letsencrypt/live/relay.example.com/fullchain.pem", &dir.join("relay.crt").display().to_string());
    replace("/etc/letsencrypt/live/relay.example.com/privkey.pem", &dir.join("relay.key").display().to_string());
    replace("/var/log/nginx/voxa-relay.access.log", &dir.join("access.log").display().to_string());
    for (n, relay) in relays.iter().enumerate() {
        replace(&format!("server 127.0.0.1:{} ", 8701 + n), &format!("server {relay} "));
    }
    assert!(!conf.contains(":870"), "the committed upstream has more servers than this test runs");
    conf
}

/// nginx as a child process, with a generated main configuration that includes the committed one.
struct Nginx {
    child: std::process::Child,
    port: u16,
    dir: PathBuf,
}

impl Nginx {
    async fn start(program: &Path, dir: &Path, relays: &[SocketAddr]) -> Nginx {
        // nginx cannot report a port it chose: take a free one, and take another if it is gone.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            std::fs::write(dir.join("voxa-relay.conf"), substituted_conf(port, relays, dir)).unwrap();
            let temp = dir.join("temp");
            std::fs::create_dir_all(&temp).unwrap();
            let main = format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\nworker_rlimit_nofile 16384;\npid {dir}/nginx.pid;\n\
                 error_log {dir}/error.log warn;\nevents {{ worker_connections 8192; }}\nhttp {{\n\
                 client_body_temp_path {temp}/body;\nproxy_temp_path {temp}/proxy;\n\
                 fastcgi_temp_path {temp}/fastcgi;\nuwsgi_temp_path {temp}/uwsgi;\nscgi_temp_path {temp}/scgi;\n\
                 include {dir}/voxa-relay.conf;\n}}\n",
                dir = dir.display(),
                temp = temp.display()
            );
            std::fs::write(dir.join("nginx.conf"), main).unwrap();
            let mut child = std::process::Command::new(program)
                .arg("-p")
                .arg(dir)
                .arg("-c")
                .arg(dir.join("nginx.conf"))
                .arg("-e")
                .arg(dir.join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + WAIT;
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                    assert!(log.contains("Address already in use"), "nginx exited ({status}):\n{log}");
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                    return Nginx { child, port, dir: dir.to_owned() };
                }
                assert!(Instant::now() < deadline, "nginx did not start listening");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("no free port for nginx");
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: nginx closes its sockets and exits; SIGKILL only if it does not.
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + WAIT;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.join("nginx.pid"));
    }
}

/// Connects through nginx over TLS, trusting only the test's certificate.
#[derive(Clone)]
struct Dialer {
    connector: tokio_rustls::TlsConnector,
    port: u16,
}

impl Dialer {
    async fn open(&self, path: &str) -> Result<Socket, String> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await.map_err(|err| format!("connect: {err}"))?;
        tcp.set_nodelay(true).ok();
        let name = ServerName::try_from("localhost").unwrap();
        let tls = timeout(WAIT, self.connector.connect(name, tcp))
            .await
            .map_err(|_| "TLS handshake timed out".to_owned())?
            .map_err(|err| format!("TLS: {err}"))?;
        let url = format!("wss://localhost:{}{path}", self.port);
        let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .map_err(|err| format!("request: {err}"))?;
        let agent = path.starts_with("/agent");
        if agent {
            let offer = voxa::protocol::relay::SUBPROTOCOL.parse().unwrap();
            request.headers_mut().insert("sec-websocket-protocol", offer);
        }
        let tls: Box<dyn voxa::net::dial::Io> = Box::new(tls);
        let (ws, _) = timeout(WAIT, tokio_tungstenite::client_async(request, tls))
            .await
            .map_err(|_| "upgrade timed out".to_owned())?
            .map_err(|err| format!("upgrade: {err}"))?;
        // The simulated agent plays one phone's agent; the relay framing is the harness's to speak.
        let ws = voxa::seal::Socket::plain(ws);
        Ok(if agent { crate::support::harness::agent_view_of(ws).await } else { ws })
    }
}

/// A browser offering `h2` gets the page over HTTP/2 from nginx: its modules come over one
/// connection at once, not in turns of six (docs/PERFORMANCE.md, the first load).
async fn page_over_http2(tls: &rustls::ClientConfig, port: u16) {
    let mut tls = tls.clone();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream =
        timeout(WAIT, tokio_rustls::TlsConnector::from(Arc::new(tls)).connect(name, tcp)).await.unwrap().unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "nginx offers HTTP/2");
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(format!("https://localhost:{port}/")).body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = timeout(WAIT, response).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut page = Vec::new();
    while let Some(chunk) = timeout(WAIT, body.data()).await.unwrap() {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        page.extend_from_slice(&chunk);
    }
    assert!(String::from_utf8_lossy(&page).contains("<title>voxa</title>"), "the page, over HTTP/2");
}

/// The next text frame (pings are answered by the client while it reads).
async fn next_text<S>(socket: &mut S) -> Result<String, String>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match timeout(WAIT, socket.next()).await.map_err(|_| "nothing arrived in time".to_owned())? {
            Some(Ok(Message::Text(text))) => return Ok(text.as_str().to_owned()),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(other)) => return Err(format!("unexpected {other:?}")),
            Some(Err(err)) => return Err(format!("socket failed: {err}")),
            None => return Err("socket ended".into()),
        }
    }
}

async fn expect_joined(socket: &mut Socket, peer: &str) -> Result<(), String> {
    let text = next_text(socket).await?;
    // What the relay tells a phone starts with U+0001; the agent's view of the relay framing
    // shows the same notice as plain JSON.
    let json = match peer {
        "agent" => text.strip_prefix('\u{1}').ok_or_else(|| format!("expected a relay notice, got {text}"))?,
        _ => text.as_str(),
    };
    let notice: serde_json::Value =
        serde_json::from_str(json).map_err(|_| format!("expected {peer} joined, got {text}"))?;
    match notice == serde_json::json!({"type": "presence", "peer": peer, "state": "joined"}) {
        true => Ok(()),
        false => Err(format!("expected {peer} joined, got {text}")),
    }
}

async fn send_text<S>(socket: &mut S, text: String) -> Result<(), String>
where
    S: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
{
    socket.send(Message::text(text)).await.map_err(|err| format!("send failed: {err}"))
}

/// What happened to one pair over the run.
#[derive(Debug)]
struct PairReport {
    /// Time from the kill to the first good round after re-pairing, if the pair was on the
    /// killed relay.
    recovered_in: Option<Duration>,
    rounds: usize,
    /// What the pair saw when its relay went away.
    lost: Option<String>,
    /// The real agent this pair is the phone of, if any.
    real_agent: Option<usize>,
}

/// Shared run state: when the relay was killed, and when to stop.
#[derive(Clone)]
struct Run {
    killed_at: watch::Receiver<Option<Instant>>,
    stop: watch::Receiver<bool>,
}

impl Run {
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// A disruption is allowed once, after the kill; anything else fails the pair.
    fn disruption(&self, what: &str, err: &str, recovered: bool) -> Result<Instant, String> {
        match *self.killed_at.borrow() {
            None => Err(format!("{what} disrupted before any relay was killed: {err}")),
            Some(_) if recovered => Err(format!("{what} disrupted a second time: {err}")),
            Some(at) => Ok(at),
        }
    }
}

/// A simulated pair: its agent and phone sockets exchange numbered bursts through nginx, each
/// frame naming its pair, until told to stop. Loss of the connection after the kill is met with
/// one reconnect of both sides.
async fn simulated_pair(
    pair: usize,
    dialer: Dialer,
    run: Run,
    gate: Arc<tokio::sync::Semaphore>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Result<PairReport, String> {
    let code = format!("{:032x}", 0x7e57_0000_0000_0000_0000_0000_0000_0000u128 + pair as u128);
    let connect = || async {
        let mut agent = dialer.open(&format!("/agent?code={code}")).await?;
        let mut phone = dialer.open(&format!("/ws?code={code}")).await?;
        // Both sides connected: if they do not meet now, they sit on different processes.
        expect_joined(&mut phone, "agent").await.map_err(|err| format!("split: {err}"))?;
        expect_joined(&mut agent, "phone").await.map_err(|err| format!("split: {err}"))?;
        Ok::<_, String>((agent, phone))
    };
    // Pairs open a few at a time.
    let permit = gate.acquire_owned().await.unwrap();
    let (mut agent, mut phone) = connect().await.map_err(|err| format!("pair {pair}: {err}"))?;
    drop(permit);
    let _ = ready.send(()).await;
    let mut report = PairReport { recovered_in: None, rounds: 0, lost: None, real_agent: None };
    let mut seq = 0usize;
    let mut lost_since: Option<Instant> = None;
    loop {
        let round = async {
            for i in 0..BURST {
                send_text(&mut phone, format!("p{pair}:{}", seq + i)).await?;
            }
            for i in 0..BURST {
                let got = next_text(&mut agent).await?;
                if got != format!("p{pair}:{}", seq + i) {
                    return Err(format!("agent of pair {pair} got {got:?}, expected p{pair}:{}", seq + i));
                }
                send_text(&mut agent, format!("a{pair}:{}", seq + i)).await?;
            }
            for i in 0..BURST {
                let got = next_text(&mut phone).await?;
                if got != format!("a{pair}:{}", seq + i) {
                    return Err(format!("phone of pair {pair} got {got:?}, expected a{pair}:{}", seq + i));
                }
            }
            Ok(())
        };
        match round.await {
            Ok(()) => {
                seq += BURST;
                report.rounds += 1;
                if let Some(killed_at) = lost_since.take() {
                    report.recovered_in = Some(killed_at.elapsed());
                }
            }
            Err(err) if err.contains(" got ") => return Err(err),
            Err(err) => {
                let killed_at = run.disruption(&format!("pair {pair}"), &err, report.recovered_in.is_some())?;
                lost_since = Some(killed_at);
                report.lost = Some(err);
                // Reconnect at once, as an agent's first backoff step and a phone would; a
                // refused attempt (nginx has not yet seen the relay die) is tried again.
                let split = |err: &str| err.starts_with("split");
                (agent, phone) = retry(WAIT, connect, split).await.map_err(|err| format!("pair {pair}: {err}"))?;
                continue;
            }
        }
        if run.stopping() && lost_since.is_none() {
            return Ok(report);
        }
        tokio::time::sleep(ROUND_GAP).await;
    }
}

/// Calls `attempt` until it succeeds, fails in a way `fatal` recognises, or `within` has passed.
async fn retry<T, F>(within: Duration, attempt: impl Fn() -> F, fatal: impl Fn(&str) -> bool) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(err) if fatal(&err) || Instant::now() >= deadline => return Err(err),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A real `voxa run` agent dialling the relays through nginx.
struct AgentProcess {
    /// Killed when the test ends.
    _child: Child,
    token: String,
    code: String,
    _dir: tempfile::TempDir,
}

impl AgentProcess {
    async fn start(port: u16, ca: &Path) -> AgentProcess {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut command = Command::from(voxa_cmd(&dir.path().join("home")));
        command
            .args(["--relay", &format!("https://localhost:{port}"), "run", "--json"])
            .arg("--ca-cert")
            .arg(ca)
            .arg("--workspace")
            .arg(&workspace)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        loop {
            let line = timeout(WAIT, lines.next_line()).await.unwrap().unwrap().expect("agent events");
            if serde_json::from_str::<Value>(&line).unwrap()["event"] == "relay_connected" {
                break;
            }
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let read = |name: &str| std::fs::read_to_string(dir.path().join("home").join(name)).unwrap().trim().to_owned();
        AgentProcess { token: read("auth_token"), code: read("relay_code"), _child: child, _dir: dir }
    }
}

/// The phone of a real agent: the protocol-2 hello (each side proves the token), then a tool call
/// per round; after the kill it reconnects and waits for the agent to come back through a survivor.
async fn real_agent_phone(
    n: usize,
    agent: (String, String),
    port: u16,
    ca: PathBuf,
    run: Run,
) -> Result<PairReport, String> {
    let (code, token) = agent;
    let token = voxa::secret::Secret::from_string(token);
    let session = || async {
        let options = voxa::net::dial::DialOptions::default().trust_pem_file(&ca).map_err(|err| format!("{err:#}"))?;
        let url = format!("wss://localhost:{port}/ws?code={code}");
        let mut phone = voxa::net::dial::connect(&url, &options).await.map_err(|err| format!("{err:#}"))?;
        // The agent's challenge comes once both sides are on the same relay.
        timeout(WAIT, voxa::net::client::hello(&mut phone, &token, "deploy-test/1"))
            .await
            .map_err(|_| "no challenge in time".to_owned())?
            .map_err(|err| format!("agent {n} refused or failed the hello: {err:#}"))?;
        Ok::<_, String>(phone)
    };
    let mut phone = session().await.map_err(|err| format!("agent {n}: {err}"))?;
    let mut report = PairReport { recovered_in: None, rounds: 0, lost: None, real_agent: Some(n) };
    let mut lost_since: Option<Instant> = None;
    loop {
        let id = format!("r{}", report.rounds);
        let round = async {
            let call = json!({"type":"tool_call","id": id,"name":"list_dir","args":{}});
            send_text(&mut phone, call.to_string()).await?;
            let result: Value = serde_json::from_str(&next_text(&mut phone).await?).map_err(|err| err.to_string())?;
            if result["type"] != "tool_result" || result["id"] != id.as_str() || result["ok"] != true {
                return Err(format!("agent {n}: unexpected answer {result}"));
            }
            Ok(())
        };
        match round.await {
            Ok(()) => {
                report.rounds += 1;
                if let Some(killed_at) = lost_since.take() {
                    report.recovered_in = Some(killed_at.elapsed());
                }
            }
            Err(err) if err.contains("unexpected answer") => return Err(err),
            Err(err) => {
                lost_since = Some(run.disruption(&format!("agent {n}"), &err, report.recovered_in.is_some())?);
                report.lost = Some(err);
                // The agent reconnects on its own backoff; the phone waits for it at the survivor.
                phone = retry(WAIT * 2, session, |_| false).await.map_err(|err| format!("agent {n}: {err}"))?;
                continue;
            }
        }
        if run.stopping() && lost_since.is_none() {
            return Ok(report);
        }
        tokio::time::sleep(ROUND_GAP).await;
    }
}

fn median_and_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_spreads_pairs_over_three_relays_and_a_killed_relay_costs_only_its_pairs_a_reconnect() {
    let Some(nginx_program) = required_program("nginx", "nginx") else { return };
    raise_open_file_limit(PAIRS as u64 * 3 + 512);
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.path().join("relay.crt"), certified.cert.pem()).unwrap();
    std::fs::write(dir.path().join("relay.key"), certified.signing_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(certified.cert.der().to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();

    let mut relays = Vec::new();
    for _ in 0..3 {
        relays.push(RelayProcess::spawn(dir.path()).await);
    }
    let addrs: Vec<SocketAddr> = relays.iter().map(|relay| relay.addr).collect();
    let nginx = Nginx::start(&nginx_program, dir.path(), &addrs).await;
    page_over_http2(&tls, nginx.port).await;
    let dialer = Dialer { connector: tokio_rustls::TlsConnector::from(Arc::new(tls)), port: nginx.port };

    // Real agents, one at a time, so each relay's metrics tell where each one landed.
    let mut agents = Vec::new();
    let mut hosted = vec![Vec::new(); relays.len()];
    for n in 0..AGENTS {
        let before: Vec<u64> = futures_util::future::join_all(relays.iter().map(RelayProcess::agents)).await;
        agents.push(AgentProcess::start(nginx.port, &dir.path().join("relay.crt")).await);
        // The agent hears the upgrade a moment before its relay counts the socket.
        let deadline = Instant::now() + WAIT;
        let landed = loop {
            let after: Vec<u64> = futures_util::future::join_all(relays.iter().map(RelayProcess::agents)).await;
            if let Some(landed) = (0..relays.len()).find(|&r| after[r] == before[r] + 1) {
                break landed;
            }
            assert!(Instant::now() < deadline, "agent {n} never showed up at a relay");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        hosted[landed].push(n);
    }
    // The relay to kill hosts at least one real agent.
    let victim = (0..relays.len()).max_by_key(|&r| hosted[r].len()).unwrap();

    let (kill_tx, killed_at) = watch::channel(None);
    let (stop_tx, stop) = watch::channel(false);
    let run = Run { killed_at, stop };
    let connecting = Instant::now();
    let mut pairs = tokio::task::JoinSet::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    let (ready_tx, mut ready) = tokio::sync::mpsc::channel::<()>(PAIRS);
    for pair in 0..PAIRS {
        pairs.spawn(simulated_pair(pair, dialer.clone(), run.clone(), gate.clone(), ready_tx.clone()));
    }
    for (n, agent) in agents.iter().enumerate() {
        let (who, ca) = ((agent.code.clone(), agent.token.clone()), dir.path().join("relay.crt"));
        pairs.spawn(real_agent_phone(n, who, nginx.port, ca, run.clone()));
    }
    for _ in 0..PAIRS {
        timeout(WAIT * 3, ready.recv()).await.expect("pairs connect in time");
    }
    println!("nginx: {PAIRS} pairs connected through nginx in {:?}", connecting.elapsed());

    // A second of traffic, then SIGKILL one relay while every pair keeps going.
    tokio::time::sleep(Duration::from_secs(1)).await;
    relays[victim].kill();
    kill_tx.send(Some(Instant::now())).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send(true).unwrap();

    let reports = timeout(WAIT * 4, pairs.join_all()).await.expect("pairs finish");
    let failures: Vec<&String> = reports.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failures.is_empty(), "{} pairs failed; first: {:?}", failures.len(), failures.first());
    let reports: Vec<PairReport> = reports.into_iter().map(Result::unwrap).collect();
    let (real, simulated): (Vec<PairReport>, Vec<PairReport>) =
        reports.into_iter().partition(|report| report.real_agent.is_some());
    let moved: Vec<Duration> = simulated.iter().filter_map(|r| r.recovered_in).collect();
    let real_moved: Vec<Duration> = real.iter().filter_map(|r| r.recovered_in).collect();
    assert!(simulated.iter().chain(&real).all(|r| r.rounds >= 2), "every pair kept exchanging frames");
    assert!(!moved.is_empty() && moved.len() < PAIRS, "{} of {PAIRS} pairs moved", moved.len());
    let mut real_lost: Vec<(usize, &String)> =
        real.iter().filter_map(|r| Some((r.real_agent?, r.lost.as_ref()?))).collect();
    real_lost.sort();
    assert_eq!(
        real_lost.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        hosted[victim],
        "exactly the real agents on the killed relay reconnected: {real_lost:?} (hosted: {hosted:?})"
    );
    let (median, max) = median_and_max(moved.clone());
    let (real_median, real_max) = median_and_max(real_moved.clone());
    println!(
        "nginx: relay {victim} killed; {} of {PAIRS} pairs paired again through the survivors \
         (kill → first good round: median {median:?}, max {max:?}); {} pairs never noticed; \
         {} real agent(s) back (median {real_median:?}, max {real_max:?})",
        moved.len(),
        PAIRS - moved.len(),
        real_moved.len(),
    );
    drop(agents);
    drop(nginx);
}

#[test]
fn the_systemd_unit_passes_systemds_own_checks() {
    let Some(analyze) = required_program("systemd-analyze", "systemd") else { return };
    let dir = tempfile::tempdir().unwrap();
    // systemd checks that ExecStart's program exists: point it at the built binary.
    let unit = COMMITTED_UNIT.replace("/usr/local/bin/voxa", env!("CARGO_BIN_EXE_voxa"));
    assert_ne!(unit, COMMITTED_UNIT, "the unit no longer runs /usr/local/bin/voxa");
    std::fs::write(dir.path().join("voxa-relay@.service"), unit).unwrap();
    let instance = dir.path().join("voxa-relay@8701.service");
    let verify = std::process::Command::new(&analyze).arg("verify").arg(&instance).output().unwrap();
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && complaints.trim().is_empty(), "systemd-analyze verify:\n{complaints}");
    let security =
        std::process::Command::new(&analyze).args(["security", "--offline=yes"]).arg(&instance).output().unwrap();
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|line| line.split("Overall exposure level for ").nth(1))
        .and_then(|rest| rest.split(": ").nth(1))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    assert!(exposure <= 2.0, "systemd rates the unit's exposure {exposure} (at most 2.0 wanted):\n{text}");
    for directive in ["DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "LimitNOFILE="] {
        assert!(COMMITTED_UNIT.contains(directive), "the unit lacks {directive}");
    }
}
