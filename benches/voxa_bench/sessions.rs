//! Coding-agent sessions: the time from an agent's stdout line to the phone's `agent_event`
//! through the relay (beside the same line read straight from the agent's pipe), the replay of a
//! long session to a phone that comes back, and the agent's memory with idle sessions.
//!
//! The agent is a configured stream-json agent (a shell loop), so the figures are voxa's: no
//! model is involved.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::net::dial::{ClientSocket, DialOptions};

use crate::agent::rss_kib;
use crate::child::{say_hello, start_agent_configured, start_agent_in, Agent};
use crate::report::{percentiles, Report};

/// Lines of the latency turn, one every 5 ms, each carrying the time it was written.
const TICK_SCRIPT: &str = r#"N=${0#N=}; i=0; while [ $i -lt "$N" ]; do printf '{"type":"stream_event","event":{"delta":{"type":"text_delta","text":"t%s "}}}\n' "$(date +%s%N)"; i=$((i+1)); sleep 0.005; done; echo '{"type":"result","subtype":"success","is_error":false,"result":"done"}'"#;

/// A turn of `N` events as fast as the agent can write them.
const BURST_SCRIPT: &str = r#"N=${0#N=}; i=0; while [ $i -lt "$N" ]; do echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"u'$i'","name":"Read","input":{"file_path":"f'$i'"}}]}}'; i=$((i+1)); done; echo '{"type":"result","subtype":"success","is_error":false,"result":"done"}'"#;

fn config() -> String {
    let agent = |name: &str, script: &str| {
        format!(
            "[agents.{name}]\nprogram = \"/bin/sh\"\nargs = [\"-c\", {}, \"{{prompt}}\"]\nformat = \"stream-json\"\n",
            toml::Value::String(script.to_owned())
        )
    };
    format!("{}{}", agent("ticker", TICK_SCRIPT), agent("burst", BURST_SCRIPT))
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// Microseconds since each `t<ns>` stamp in `text`.
fn ages_us(text: &str, now: u128, into: &mut Vec<f64>) {
    for stamp in text.split_whitespace().filter_map(|word| word.strip_prefix('t')?.parse::<u128>().ok()) {
        into.push(now.saturating_sub(stamp) as f64 / 1e3);
    }
}

pub async fn phone(agent: &Agent) -> ClientSocket {
    let relay = agent.embedded_relay.as_deref().unwrap();
    let url = format!("ws://{relay}/ws?code={}", agent.code);
    let mut socket = voxa::net::dial::connect(&url, &DialOptions::default()).await.unwrap();
    say_hello(&mut socket, &agent.token).await;
    socket
}

pub async fn next_json(socket: &mut ClientSocket) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), socket.next()).await.unwrap().unwrap().unwrap();
        if let Message::Text(text) = frame {
            if let Ok(value) = serde_json::from_str::<Value>(text.strip_prefix('\u{1}').unwrap_or(&text)) {
                return value;
            }
        }
    }
}

async fn call(socket: &mut ClientSocket, id: &str, name: &str, args: Value, env: Option<&str>) -> Value {
    let mut frame = json!({"type":"tool_call","id": id,"name": name,"args": args});
    if let Some(env) = env {
        frame["env"] = json!(env);
    }
    socket.send(Message::text(frame.to_string())).await.unwrap();
    loop {
        let value = next_json(socket).await;
        if value["type"] == "tool_result" && value["id"] == id {
            assert_eq!(value["ok"], true, "{value}");
            return value;
        }
    }
}

/// Starts a session of `agent` with `lines` and returns its id.
async fn start(socket: &mut ClientSocket, id: &str, agent: &str, lines: usize) -> String {
    start_on(socket, id, agent, lines, None).await
}

/// [`start`] on the environment `env` (`None`: the agent the socket reaches).
async fn start_on(socket: &mut ClientSocket, id: &str, agent: &str, lines: usize, env: Option<&str>) -> String {
    let prompt = format!("N={lines}");
    let result = call(socket, id, "agent_start", json!({"agent": agent, "prompt": prompt}), env).await;
    result["result"]["session"].as_str().or(result["session"].as_str()).unwrap().to_owned()
}

/// Runs a ticker turn of `lines` (on `env`) and returns each line's age on arrival, in µs.
async fn ticker_ages(socket: &mut ClientSocket, id: &str, lines: usize, env: Option<&str>) -> Vec<f64> {
    let session = start_on(socket, id, "ticker", lines, env).await;
    let mut ages = Vec::new();
    until_turn_end(socket, &session, |event| {
        if let Some(text) = event["event"]["text"].as_str() {
            ages_us(text, now_ns(), &mut ages);
        }
    })
    .await;
    ages
}

/// Reads `agent_event`s of `session` until its turn ends; returns the highest seq seen.
async fn until_turn_end(socket: &mut ClientSocket, session: &str, mut each: impl FnMut(&Value)) -> u64 {
    let mut last = 0;
    loop {
        let value = next_json(socket).await;
        if value["type"] != "agent_event" || value["session"] != session {
            continue;
        }
        last = last.max(value["seq"].as_u64().unwrap_or(0));
        each(&value);
        if value["event"]["kind"] == "turn_end" {
            return last;
        }
    }
}

pub fn run(report: &mut Report, measuring: bool) {
    let ticks = if measuring { 400 } else { 20 };
    let burst = if measuring { 10_000 } else { 200 };
    let idle = if measuring { 10 } else { 2 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    // The floor: the same loop's lines read straight from its pipe.
    let mut floor = Vec::new();
    let mut child = Command::new("/bin/sh")
        .args(["-c", TICK_SCRIPT, &format!("N={ticks}")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        ages_us(&line.unwrap().replace('"', " "), now_ns(), &mut floor);
    }
    child.wait().unwrap();

    let agent = start_agent_configured(
        Some(&config()),
        &[],
        &["--embedded-relay"],
        &[],
        &["embedded_relay", "started", "relay_connected"],
    );
    runtime.block_on(async {
        let mut socket = phone(&agent).await;
        socket.send(Message::text(json!({"type":"follow"}).to_string())).await.unwrap();
        let mut ages = ticker_ages(&mut socket, "t1", ticks, None).await;
        let (p50, p99) = percentiles(&mut ages);
        let (f50, f99) = percentiles(&mut floor);
        report.add(
            "sessions",
            format!("agent stdout line → phone's agent_event via relay ({} lines)", ages.len()),
            format!("median {p50:.0} µs, p99 {p99:.0} µs"),
            "",
        );
        report.add(
            "sessions",
            format!("floor: the same lines read straight from the agent's pipe ({} lines)", floor.len()),
            format!("median {f50:.0} µs, p99 {f99:.0} µs"),
            "",
        );

        // A long session, then a phone that comes back and asks for all of it.
        let session = start(&mut socket, "b1", "burst", burst).await;
        let last = until_turn_end(&mut socket, &session, |_| {}).await;
        drop(socket);
        let mut back = phone(&agent).await;
        let asked = Instant::now();
        back.send(Message::text(json!({"type":"follow"}).to_string())).await.unwrap();
        loop {
            let value = next_json(&mut back).await;
            if value["type"] == "agent_event" && value["session"] == session.as_str() && value["seq"] == last {
                break;
            }
        }
        let replay = asked.elapsed();
        report.add(
            "sessions",
            format!("replay of a {last}-event session to a phone that comes back"),
            format!(
                "{:.0} ms ({:.1} µs per event)",
                replay.as_secs_f64() * 1e3,
                replay.as_secs_f64() * 1e6 / last as f64
            ),
            "",
        );
        drop(back);

        // Memory: the agent and every process under it, before and after `idle` sessions that ran
        // a turn and wait.
        let before = tree_rss_kib(agent.child.id());
        let mut socket = phone(&agent).await;
        socket.send(Message::text(json!({"type":"follow"}).to_string())).await.unwrap();
        for n in 0..idle {
            let session = start(&mut socket, &format!("i{n}"), "ticker", 1).await;
            until_turn_end(&mut socket, &session, |_| {}).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = tree_rss_kib(agent.child.id());
        report.add(
            "sessions",
            format!("RSS of the agent and its processes with {idle} idle sessions"),
            format!("{after} KiB ({} KiB more than before them)", after as i64 - before as i64),
            "≤ 20 MiB more",
        );
    });
}

/// Resident memory of a process and all its descendants (from `/proc`), in KiB.
fn tree_rss_kib(root: u32) -> u64 {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    // The parent is the second field after the command's closing parenthesis.
                    let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
                    Some((pid, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        tree.extend(parents.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        next += 1;
    }
    tree.into_iter().map(rss_kib).sum()
}

/// An environment's session seen from the phone: a line its agent writes → the phone's
/// `agent_event`, through the host's relay, the host and the host's link to the environment —
/// beside the same agent's line in a session of the host itself, in the same run.
pub fn run_env(report: &mut Report, measuring: bool) {
    let ticks = if measuring { 400 } else { 20 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = start_agent_configured(
        Some(&config()),
        &[],
        &["--embedded-relay"],
        &[],
        &["embedded_relay", "started", "relay_connected"],
    );
    let relay_url = format!("http://{}", host.embedded_relay.as_deref().unwrap());
    let relay = voxa::config::RelayUrl::parse(&relay_url).unwrap();
    // The environment: a home of its own that issues a pairing the host adds as "box".
    let dir = tempfile::tempdir().unwrap();
    crate::hosted::harness::write_home_config(&dir.path().join("home"), &config());
    let env_home = voxa::state::Home::at(dir.path().join("home"));
    let env_token = voxa::environments::store::load_or_create_host_token(&env_home).unwrap();
    let issued = voxa::environments::issue(&env_home, &relay, env_token.expose()).unwrap();
    let host_home = voxa::state::Home::at(host.home());
    let host_token = voxa::environments::store::load_or_create_host_token(&host_home).unwrap();
    voxa::environments::add(&host_home, &issued.line.encode(), Some("box"), host_token.expose()).unwrap();
    let _env = start_agent_in(dir, &[], &["--relay", &relay_url], &[], &["started", "relay_connected"]);
    runtime.block_on(async {
        let mut socket = phone(&host).await;
        socket.send(Message::text(json!({"type":"follow"}).to_string())).await.unwrap();
        loop {
            let value = next_json(&mut socket).await;
            if value["type"] == "environment" && value["state"] == "reachable" {
                break;
            }
        }
        for (n, (env, whose)) in
            [(None, "the host's own session"), (Some("box"), "an environment's session, through the host")]
                .into_iter()
                .enumerate()
        {
            let mut ages = ticker_ages(&mut socket, &format!("e{n}"), ticks, env).await;
            let (p50, p99) = percentiles(&mut ages);
            report.add(
                "sessions",
                format!("agent stdout line → phone's agent_event, {whose} ({} lines)", ages.len()),
                format!("median {:.1} ms, p99 {:.1} ms", p50 / 1e3, p99 / 1e3),
                "",
            );
        }
    });
}
