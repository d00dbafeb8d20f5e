//! One policy, every door (docs/SECURITY.md, "One policy, every door"): a tool the policy refuses
//! is refused whichever way it comes — a phone's sealed session through the real relay, the
//! loopback socket, the self-hosted voice model, a relay-hosted call carried by the page, the
//! session frames that act, and the CLI — and what it holds under `ask` waits for the user there
//! too. Each test names the door it holds shut.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use voxa::config::AgentCommand;
use voxa::net::dial::ClientSocket;

use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;

/// A configured coding agent that runs `script` (it leaves a mark in the workspace, so a test can
/// tell whether it ran).
fn script_agent(script: &str) -> AgentCommand {
    AgentCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into(), "{prompt}".into()],
        format: "text".into(),
    }
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"type":"tool_call","id":id,"name":name,"args":args})
}

fn hosted(id: &str, name: &str, args: Value) -> Value {
    json!({"type":"tool_call","id":id,"name":name,"args":args,"caller":"gemini-hosted"})
}

/// Sends a call and returns its result, skipping whatever else arrives.
async fn result_of(socket: &mut ClientSocket, frame: Value) -> Value {
    let id = frame["id"].as_str().unwrap().to_owned();
    send(socket, frame).await;
    recv_result(socket, &id).await
}

fn refused(result: &Value) -> bool {
    result["error"]["code"] == "denied-by-policy"
}

/// The next `approval` or `tool_result` of `id`, whichever comes first.
async fn approval_or_result(socket: &mut ClientSocket, id: &str) -> Value {
    loop {
        let value = recv_json(socket).await;
        match value["type"].as_str() {
            Some("approval") => return value,
            Some("tool_result") if value["id"] == id => return value,
            _ => {}
        }
    }
}

/// The audit lines of `home`.
fn audit(home: &Path) -> Vec<Value> {
    crate::support::audit::audit_lines_in(home)
}

#[tokio::test]
async fn at_the_tool_door_a_family_refuses_every_tool_that_runs_programs() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.deny = strings(&["@exec"]);
        options.config.agents.insert("marker".into(), script_agent("touch agent-ran"));
    })
    .await;
    let mut phone = phone_socket(&relay, agent.code()).await;
    let hello = say_hello(&mut phone, agent.token()).await;
    let offered: Vec<&str> = hello["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for name in ["run_command", "coding_agent", "term_open", "term_input", "agent_start", "agent_send", "agent_log"] {
        assert!(!offered.contains(&name), "{name} is offered: {offered:?}");
    }
    assert!(offered.contains(&"read_file") && offered.contains(&"write_file"), "{offered:?}");
    let calls = [
        call("c1", "run_command", json!({"command": "touch command-ran"})),
        call("c2", "term_open", json!({"cols": 80, "rows": 24, "command": "touch term-ran"})),
        call("c3", "term_input", json!({"term": "t-0000000000000000", "data": "touch typed\r"})),
        call("c4", "agent_start", json!({"prompt": "go", "agent": "marker"})),
        call("c5", "coding_agent", json!({"prompt": "go", "agent": "marker"})),
    ];
    for frame in calls {
        let name = frame["name"].clone();
        let result = result_of(&mut phone, frame).await;
        assert!(refused(&result), "{name}: {result}");
    }
    // The loopback socket is the same door.
    let mut laptop = agent.local_client().await;
    let result = result_of(&mut laptop, call("l1", "agent_start", json!({"prompt": "go", "agent": "marker"}))).await;
    assert!(refused(&result), "{result}");
    // Frames of a terminal are refused with it.
    send(&mut phone, json!({"type":"term_ack","term":"t-0000000000000000","offset":0})).await;
    let answer = recv_type_or_error(&mut phone).await;
    assert_eq!(answer["code"], "denied-by-policy", "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for mark in ["command-ran", "term-ran", "agent-ran", "typed"] {
        assert!(!agent.workspace.path().join(mark).exists(), "{mark}: something ran");
    }
    let lines = audit(&agent.home.path().join("voxa"));
    let denied = lines.iter().filter(|line| line["outcome"] == "denied-by-policy" && line["policy"] == "deny").count();
    assert_eq!(denied, 6, "{lines:#?}");
    assert!(lines.iter().any(|line| line["event"] == "term_ack" && line["rule"] == "deny"), "{lines:#?}");
    agent.agent.stop().await;
}

/// The next frame that is an error.
async fn recv_type_or_error(socket: &mut ClientSocket) -> Value {
    loop {
        let value = recv_json(socket).await;
        if value["type"] == "error" {
            return value;
        }
    }
}

#[tokio::test]
async fn session_tools_wait_under_ask_and_an_agent_that_skips_its_prompts_asks() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.ask = strings(&["agent_start", "agent_send"]);
        options.config.agents.insert("marker".into(), script_agent("touch \"agent-$0\""));
        // An agent that would act without its permission prompts (never run here: it is denied).
        options.config.agents.insert(
            "claude".into(),
            AgentCommand {
                program: "/bin/true".into(),
                args: strings(&["-p", "--dangerously-skip-permissions", "{prompt}"]),
                format: "stream-json".into(),
            },
        );
    })
    .await;
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"follow"})).await;

    send(&mut phone, call("s1", "agent_start", json!({"prompt": "fix it"}))).await;
    let shown = approval_or_result(&mut phone, "s1").await;
    assert_eq!(shown["type"], "approval", "an agent that skips its prompts asks first: {shown}");
    assert!(shown["summary"].as_str().unwrap().contains("without its permission prompts"), "{shown}");
    send(&mut phone, json!({"type":"approve","approval":shown["approval"],"decision":"deny"})).await;
    assert!(refused(&recv_result(&mut phone, "s1").await));

    send(&mut phone, call("s2", "agent_start", json!({"prompt": "first", "agent": "marker"}))).await;
    let shown = approval_or_result(&mut phone, "s2").await;
    assert_eq!(shown["type"], "approval", "{shown}");
    assert!(!agent.workspace.path().join("agent-first").exists(), "nothing runs before the answer");
    send(&mut phone, json!({"type":"approve","approval":shown["approval"],"decision":"allow"})).await;
    let started = recv_result(&mut phone, "s2").await;
    let session = started["result"]["session"].as_str().expect("the session started").to_owned();
    eventually("the first turn", || agent.workspace.path().join("agent-first").exists()).await;

    send(&mut phone, call("s3", "agent_send", json!({"session": session, "text": "second"}))).await;
    let shown = approval_or_result(&mut phone, "s3").await;
    assert_eq!(shown["type"], "approval", "a listed agent_send asks: {shown}");
    assert_eq!(shown["summary"], format!("Tell {session}: second"));
    send(&mut phone, json!({"type":"approve","approval":shown["approval"],"decision":"deny"})).await;
    assert!(refused(&recv_result(&mut phone, "s3").await));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!agent.workspace.path().join("agent-second").exists(), "the denied follow-up never reached the agent");
    agent.agent.stop().await;
}

#[tokio::test]
async fn at_the_frame_door_a_denied_approve_answers_nothing_and_follow_shows_no_approvals() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        options.config.policy.ask = strings(&["write_file"]);
        options.config.policy.deny = strings(&["approve"]);
        options.config.approvals.timeout_secs = 600;
    })
    .await;
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"follow"})).await;
    // A follower hears what the laptop found of the relay's page, and nothing of the approvals.
    assert_eq!(recv_json(&mut phone).await["type"], "relay_page");
    let mut laptop = agent.local_client().await;
    send(&mut laptop, call("w1", "write_file", json!({"path": "planted.sh", "content": "echo hi"}))).await;
    let broker = agent.agent.ctx.approvals.clone();
    eventually("the approval opens", || !broker.open().is_empty()).await;
    let id = broker.open()[0].approval.clone();
    // Followed or not, the phone is shown no approval and no input.
    assert_silent(&mut phone, Duration::from_millis(500)).await;
    send(&mut phone, json!({"type":"approve","approval":id,"decision":"allow"})).await;
    let answer = recv_json(&mut phone).await;
    assert_eq!((answer["type"].as_str(), answer["code"].as_str()), (Some("error"), Some("denied-by-policy")));
    assert_eq!(broker.open().len(), 1, "the approval is still open");
    // The tool is refused the same (the CLI's `voxa approve` is this call on the loopback socket).
    let result = result_of(&mut laptop, call("a1", "approve", json!({"approval": id, "decision": "allow"}))).await;
    assert!(refused(&result), "{result}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!agent.workspace.path().join("planted.sh").exists());
    let lines = audit(&agent.home.path().join("voxa"));
    assert!(lines.iter().any(|line| line["event"] == "approve" && line["rule"] == "deny"), "{lines:#?}");
    assert!(lines.iter().any(|line| line["event"] == "follow" && line["rule"] == "deny"), "{lines:#?}");
    agent.agent.stop().await;
}

#[tokio::test]
async fn at_the_hosted_door_reads_run_everything_else_asks_the_phone_and_the_call_never_approves() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start_with(Some(relay.url()), |options| {
        // The phone's own commands need no approval at all; the relay's model's do.
        options.config.approvals.allow_commands = strings(&["touch hosted-ran"]);
    })
    .await;
    std::fs::write(agent.workspace.path().join("notes.txt"), "read me").unwrap();
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, json!({"type":"follow"})).await;
    let read =
        result_of(&mut phone, hosted("gemini-hosted-0badc0de-1", "read_file", json!({"path": "notes.txt"}))).await;
    assert_eq!(read["result"]["content"], "read me", "{read}");

    send(&mut phone, hosted("gemini-hosted-0badc0de-2", "run_command", json!({"command": "touch hosted-ran"}))).await;
    let shown = approval_or_result(&mut phone, "gemini-hosted-0badc0de-2").await;
    assert_eq!(shown["type"], "approval", "a hosted command asks the phone: {shown}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!agent.workspace.path().join("hosted-ran").exists(), "nothing ran before the phone's answer");
    let id = shown["approval"].clone();
    let own = result_of(
        &mut phone,
        hosted("gemini-hosted-0badc0de-3", "approve", json!({"approval": id, "decision": "allow"})),
    )
    .await;
    assert!(refused(&own), "a hosted call cannot answer its own approval: {own}");
    assert!(own["error"]["message"].as_str().unwrap().contains("hosted by the relay"), "{own}");
    send(&mut phone, json!({"type":"approve","approval":id,"decision":"deny","message":"not by voice"})).await;
    let result = recv_result(&mut phone, "gemini-hosted-0badc0de-2").await;
    assert!(refused(&result) && result["error"]["message"].as_str().unwrap().contains("not by voice"), "{result}");
    assert!(!agent.workspace.path().join("hosted-ran").exists());
    // The phone's own call of the same command runs at once.
    let own = result_of(&mut phone, call("p1", "run_command", json!({"command": "touch hosted-ran"}))).await;
    assert_eq!(own["result"]["exit_code"], 0, "{own}");
    let lines = audit(&agent.home.path().join("voxa"));
    let by = |id: &str| lines.iter().find(|line| line["id"] == id).cloned().unwrap_or_default();
    assert_eq!(
        (by("gemini-hosted-0badc0de-1")["caller"].as_str(), by("gemini-hosted-0badc0de-1")["outcome"].as_str()),
        (Some("gemini-hosted"), Some("ok"))
    );
    assert_eq!(by("gemini-hosted-0badc0de-3")["policy"], "hosted");
    assert_eq!(by("gemini-hosted-0badc0de-2")["policy"], "ask");
    agent.agent.stop().await;
}

#[tokio::test]
async fn at_the_voice_door_the_model_is_refused_what_the_policy_refuses() {
    let mut fake = FakeGemini::start(FakeOptions::new(crate::support::phone::KEY)).await;
    let config = fake.config(crate::support::phone::KEY);
    let agent = TestAgent::start_with(None, |options| {
        options.gemini = Some(config);
        options.config.policy.deny = strings(&["@exec", "approve"]);
        options.config.policy.ask = strings(&["write_file"]);
        options.config.approvals.timeout_secs = 1;
    })
    .await;
    let mut phone = crate::support::phone::Phone::over(agent.local_client().await);
    phone.send(json!({"type":"call_start"})).await;
    let (conn, setup) = fake.expect_setup().await;
    phone.expect("call_started").await;
    let declared: Vec<&str> = setup["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    for name in ["run_command", "term_open", "agent_start", "approve"] {
        assert!(!declared.contains(&name), "{name} is declared: {declared:?}");
    }
    let calls = json!({"toolCall":{"functionCalls":[
        {"id":"v1","name":"term_open","args":{"cols":80,"rows":24,"command":"touch voice-ran"}},
        {"id":"v2","name":"write_file","args":{"path":"voice.txt","content":"hi"}}
    ]}});
    fake.send(conn, calls);
    let mut responses = crate::support::phone::expect_tool_responses(&mut fake, 2).await;
    responses.sort_by_key(|r| r["id"].as_str().unwrap().to_owned());
    for response in &responses {
        assert!(response["response"]["error"].to_string().contains("denied-by-policy"), "{response}");
    }
    // The write waited for an approval nobody may give; the model was never told of it.
    assert!(!fake.received().iter().any(|e| matches!(&e.kind, Kind::Text(text) if text.contains("Approval needed"))));
    assert!(!agent.workspace.path().join("voice-ran").exists() && !agent.workspace.path().join("voice.txt").exists());
    agent.agent.stop().await;
}

#[tokio::test]
async fn push_subscribe_is_refused_by_the_notify_family_and_waits_under_ask() {
    let agent = TestAgent::start_with(None, |options| options.config.policy.deny = strings(&["@notify"])).await;
    let mut client = agent.local_client().await;
    let subscription = json!({"endpoint":"https://push.example/x","keys":{"p256dh":"BOr0","auth":"AAAA"}});
    send(&mut client, json!({"type":"push_subscribe","subscription":subscription})).await;
    let answer = recv_json(&mut client).await;
    assert_eq!((answer["type"].as_str(), answer["code"].as_str()), (Some("error"), Some("denied-by-policy")));
    agent.agent.stop().await;

    let agent = TestAgent::start_with(None, |options| {
        options.config.policy.ask = strings(&["@notify"]);
        options.config.push.allow_private_endpoints = true;
    })
    .await;
    let mut client = agent.local_client().await;
    send(&mut client, json!({"type":"follow"})).await;
    let subscription = crate::support::push::sample_subscription("http://127.0.0.1:9/push/held");
    send(&mut client, json!({"type":"push_subscribe","subscription":subscription})).await;
    let shown = recv_type(&mut client, "approval").await;
    assert_eq!(shown["summary"], "Send notifications to 127.0.0.1");
    let kept = || voxa::push::Subscriptions::new(voxa::state::Home::at(agent.home.path().join("voxa"))).load().unwrap();
    assert!(kept().is_empty(), "nothing is kept before the answer");
    send(&mut client, json!({"type":"approve","approval":shown["approval"],"decision":"allow"})).await;
    recv_type(&mut client, "push_subscribed").await;
    assert_eq!(kept().len(), 1);
    agent.agent.stop().await;
}

#[tokio::test]
async fn allow_commands_let_through_the_whole_command_only() {
    let agent = TestAgent::start_with(None, |options| {
        options.config.policy.ask = strings(&["run_command"]);
        options.config.approvals.allow_commands = strings(&["git status", "git diff", "cargo test", "echo listed *"]);
    })
    .await;
    let mut laptop = agent.local_client().await;
    send(&mut laptop, json!({"type":"follow"})).await;
    let outside = agent.home.path().join("written-outside");
    let asked = [
        "cargo test --config 'target.x86_64-unknown-linux-gnu.runner=\"touch ran\"'".to_owned(),
        "git diff --no-index /etc/passwd /dev/null".to_owned(),
        format!("git diff --output={} HEAD", outside.display()),
        "git status --porcelain".to_owned(),
    ];
    for (n, command) in asked.iter().enumerate() {
        let id = format!("c{n}");
        send(&mut laptop, call(&id, "run_command", json!({ "command": command }))).await;
        let shown = approval_or_result(&mut laptop, &id).await;
        assert_eq!(shown["type"], "approval", "{command} must ask: {shown}");
        send(&mut laptop, json!({"type":"approve","approval":shown["approval"],"decision":"deny"})).await;
        assert!(refused(&recv_result(&mut laptop, &id).await));
    }
    for (n, command) in ["git status", "echo listed with more words"].into_iter().enumerate() {
        let id = format!("ok{n}");
        send(&mut laptop, call(&id, "run_command", json!({ "command": command }))).await;
        let ran = approval_or_result(&mut laptop, &id).await;
        assert_eq!(ran["type"], "tool_result", "{command} runs without asking: {ran}");
    }
    assert!(!outside.exists());
    agent.agent.stop().await;
}

#[test]
fn at_the_cli_door_the_running_agent_refuses_what_config_toml_refuses() {
    use crate::support::{voxa, voxa_cmd, wait_with_deadline, RunningVoxa};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("voxa");
    let workspace = tempfile::tempdir().unwrap();
    // A misspelt family would deny nothing: voxa refuses to start on it.
    write_home_config(&home, "[policy]\ndeny = [\"@exce\"]\n");
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--workspace"])
        .arg(workspace.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let status = wait_with_deadline(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success() && stderr.contains("\"@exce\", which is no family"), "{status:?} {stderr}");

    std::fs::write(home.join("config.toml"), "[policy]\ndeny = [\"@exec\", \"@write\"]\n").unwrap();
    let mut cmd = voxa_cmd(&home);
    cmd.args(["run", "--json", "--embedded-relay", "--workspace"]).arg(workspace.path());
    let run = RunningVoxa::start(cmd);
    for args in [
        &["call", "run_command", "command=touch cli-ran"][..],
        &["call", "term_open", "cols=80", "rows=24", "command=touch cli-ran"],
        &["call", "write_file", "path=cli-ran", "content=x"],
    ] {
        let output = voxa(&home, args);
        assert_eq!(output.status.code(), Some(4), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(String::from_utf8_lossy(&output.stderr).contains("denied-by-policy"), "{args:?}");
    }
    let listed = voxa(&home, &["call", "list_dir"]);
    assert!(listed.status.success(), "reads still run: {}", String::from_utf8_lossy(&listed.stderr));
    assert!(!workspace.path().join("cli-ran").exists());
    run.stop();
}
