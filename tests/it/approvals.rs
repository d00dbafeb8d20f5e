//! Approvals end to end: a tool under the policy's `ask` waits for the user, over the real relay
//! and agent, answered by phones (real WebSocket clients), by the voice model, by `voxa approve`;
//! denied with the user's words or at the expiry; never stranded by a dropped phone, a relay
//! restart or a crashed agent; every request and decision in the audit trail.

use std::path::Path;
use voxa::net::dial::ClientSocket;

use serde_json::{json, Value};

use crate::support::audit::audit_lines_in;
use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind};
use crate::support::harness::*;

/// An agent config where every `run_command` asks, except `echo hello`.
fn asking(timeout_secs: u64) -> voxa::config::Config {
    let mut config = voxa::config::Config::default();
    config.policy.ask = vec!["run_command".into(), "write_file".into()];
    config.approvals.timeout_secs = timeout_secs;
    config.approvals.allow_commands = vec!["echo hello".into()];
    config
}

async fn asking_agent(relay: Option<&TestRelay>, timeout_secs: u64) -> TestAgent {
    TestAgent::start_with(relay.map(TestRelay::url), |options| options.config = asking(timeout_secs)).await
}

/// A client that follows: it is sent every open approval and every change.
async fn follow(socket: &mut ClientSocket) {
    send(socket, json!({"type":"follow"})).await;
}

fn run_command(id: &str, command: &str) -> Value {
    json!({"type":"tool_call","id":id,"name":"run_command","args":{"command":command}})
}

/// The audit lines of `agent`'s home, oldest first.
fn audit_lines(agent: &TestAgent) -> Vec<Value> {
    audit_lines_in(&agent.home.path().join("voxa"))
}

/// The `approval_resolved` notice and the `tool_result` of `id`, in whichever order they come.
async fn resolved_and_result(socket: &mut ClientSocket, id: &str) -> (Value, Value) {
    let (mut resolved, mut result) = (None, None);
    while resolved.is_none() || result.is_none() {
        let value = recv_json(socket).await;
        match value["type"].as_str() {
            Some("approval_resolved") => resolved = Some(value),
            Some("tool_result") if value["id"] == id => result = Some(value),
            _ => {}
        }
    }
    (resolved.unwrap_or_default(), result.unwrap_or_default())
}

fn approval_lines(lines: &[Value], id: &str) -> Vec<Value> {
    lines.iter().filter(|line| line["approval"] == id).cloned().collect()
}

#[tokio::test]
async fn a_command_under_ask_waits_until_a_phone_allows_it_and_every_follower_sees_it_resolved() {
    let relay = TestRelay::start().await;
    let agent = asking_agent(Some(&relay), 600).await;
    let mut phone = agent.phone(&relay).await;
    let mut laptop = agent.local_client().await;
    follow(&mut phone).await;
    follow(&mut laptop).await;

    send(&mut phone, run_command("c1", "touch ran.txt && echo approved-run")).await;
    let shown = recv_type(&mut phone, "approval").await;
    let also = recv_type(&mut laptop, "approval").await;
    assert_eq!(shown, also, "every follower sees the same approval");
    let id = shown["approval"].as_str().unwrap().to_owned();
    assert!(id.starts_with("a-"), "{shown}");
    assert_eq!(shown["source"], json!({"call":"c1"}));
    assert_eq!(shown["tool"], "run_command");
    assert_eq!(shown["input"]["command"], "touch ran.txt && echo approved-run");
    assert_eq!(shown["summary"], "Run: touch ran.txt && echo approved-run");
    assert_eq!(shown["risk"], "exec");
    assert!(shown["expires_at"].as_u64().unwrap() > 0);
    // Nothing ran while it waited.
    assert!(!agent.workspace.path().join("ran.txt").exists());

    send(&mut phone, json!({"type":"approve","approval":id,"decision":"allow"})).await;
    let (resolved, result) = resolved_and_result(&mut phone, "c1").await;
    assert_eq!(result["ok"], true, "{result}");
    assert!(result["result"]["output"].as_str().unwrap().contains("approved-run"), "{result}");
    assert!(agent.workspace.path().join("ran.txt").exists());
    let seen_too = recv_type(&mut laptop, "approval_resolved").await;
    for resolved in [resolved, seen_too] {
        assert_eq!(resolved, json!({"type":"approval_resolved","approval":id,"decision":"allow","by":"phone"}));
    }
    // The second answer finds nothing to decide.
    // (The agent's note on the relay's copy of the page may reach this follower first.)
    send(&mut laptop, json!({"type":"approve","approval":id,"decision":"deny"})).await;
    let late = recv_type(&mut laptop, "error").await;
    assert_eq!((late["type"].as_str(), late["code"].as_str()), (Some("error"), Some("not-found")), "{late}");

    // Allowed commands run without asking.
    send(&mut phone, run_command("c2", "echo hello")).await;
    assert_eq!(recv_result(&mut phone, "c2").await["ok"], true);

    let lines = audit_lines(&agent);
    let decided = approval_lines(&lines, &id);
    assert_eq!(decided.len(), 2, "{lines:?}");
    assert_eq!((decided[0]["decision"].as_str(), decided[0]["source"].as_str()), (Some("requested"), Some("call:c1")));
    assert_eq!((decided[1]["decision"].as_str(), decided[1]["by"].as_str()), (Some("allow"), Some("phone")));
    assert_eq!(decided[1]["summary"], "Run: touch ran.txt && echo approved-run");
    assert_eq!((decided[1]["tool"].as_str(), decided[1]["risk"].as_str()), (Some("run_command"), Some("exec")));
    assert!(decided.iter().all(|line| line["time"].is_string()));
    let call = lines.iter().find(|line| line["id"] == "c1").unwrap();
    assert_eq!(call["outcome"], "ok");
}

#[tokio::test]
async fn a_denied_command_ends_denied_by_policy_with_the_users_message_and_no_secret_is_audited() {
    let relay = TestRelay::start().await;
    let agent = asking_agent(Some(&relay), 600).await;
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    let mut laptop = agent.local_client().await;
    let secret = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
    send(&mut laptop, run_command("d1", &format!("API_KEY={secret} touch deployed.txt"))).await;
    let shown = recv_type(&mut phone, "approval").await;
    assert_eq!(shown["summary"], "Run: API_KEY=… touch deployed.txt");
    let id = shown["approval"].as_str().unwrap();
    send(&mut phone, json!({"type":"approve","approval":id,"decision":"deny","message":"not on a Friday"})).await;
    let result = recv_result(&mut laptop, "d1").await;
    assert_eq!(result["error"]["code"], "denied-by-policy", "{result}");
    assert!(result["error"]["message"].as_str().unwrap().contains("not on a Friday"), "{result}");
    assert!(!agent.workspace.path().join("deployed.txt").exists());
    let resolved = recv_type(&mut phone, "approval_resolved").await;
    assert_eq!((resolved["decision"].as_str(), resolved["message"].as_str()), (Some("deny"), Some("not on a Friday")));

    let lines = audit_lines(&agent);
    let decided = approval_lines(&lines, id);
    assert_eq!((decided[1]["decision"].as_str(), decided[1]["by"].as_str()), (Some("deny"), Some("phone")));
    let call = lines.iter().find(|line| line["id"] == "d1").unwrap();
    assert_eq!((call["outcome"].as_str(), call["policy"].as_str()), (Some("denied-by-policy"), Some("ask")));
    let trail = lines.iter().map(Value::to_string).collect::<String>();
    assert!(!trail.contains(secret) && !trail.contains("4f9a8b7c"), "a secret reached the audit trail: {trail}");
}

#[tokio::test]
async fn an_approval_nobody_answers_is_denied_at_its_expiry() {
    let agent = asking_agent(None, 1).await;
    let mut watcher = agent.local_client().await;
    follow(&mut watcher).await;
    let mut laptop = agent.local_client().await;
    send(&mut laptop, json!({"type":"tool_call","id":"w1","name":"write_file","args":{"path":"x.txt","content":"hi"}}))
        .await;
    let shown = recv_type(&mut watcher, "approval").await;
    assert_eq!((shown["tool"].as_str(), shown["risk"].as_str()), (Some("write_file"), Some("write")));
    assert_eq!(shown["summary"], "Write 2 bytes to x.txt");
    let result = recv_result(&mut laptop, "w1").await;
    assert_eq!(result["error"]["code"], "denied-by-policy", "{result}");
    assert!(result["error"]["message"].as_str().unwrap().contains("no one approved in time"), "{result}");
    let resolved = recv_type(&mut watcher, "approval_resolved").await;
    assert_eq!((resolved["decision"].as_str(), resolved["by"].as_str()), (Some("deny"), Some("timeout")));
    assert!(!agent.workspace.path().join("x.txt").exists());
    let decided = approval_lines(&audit_lines(&agent), shown["approval"].as_str().unwrap());
    assert_eq!(decided.last().unwrap()["by"], "timeout");
}

#[tokio::test]
async fn a_phone_that_reconnects_mid_approval_gets_it_again_and_answers_it() {
    let relay = TestRelay::start().await;
    let agent = asking_agent(Some(&relay), 600).await;
    let mut laptop = agent.local_client().await;
    send(&mut laptop, run_command("r1", "echo after-reconnect")).await;
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    let first = recv_type(&mut phone, "approval").await;
    // The phone drops (a tunnel, a lock screen); the approval stays open in the agent.
    drop(phone);
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    let again = recv_type(&mut phone, "approval").await;
    assert_eq!(first, again);
    send(&mut phone, json!({"type":"approve","approval":again["approval"],"decision":"allow"})).await;
    let result = recv_result(&mut laptop, "r1").await;
    assert!(result["result"]["output"].as_str().unwrap().contains("after-reconnect"), "{result}");
}

#[tokio::test]
async fn an_approval_outlives_a_relay_restart() {
    let relay = TestRelay::start().await;
    let addr = relay.addr;
    let agent = asking_agent(Some(&relay), 600).await;
    let mut laptop = agent.local_client().await;
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    send(&mut laptop, run_command("x1", "echo after-restart")).await;
    let first = recv_type(&mut phone, "approval").await;
    relay.kill().await;
    let status = agent.agent.ctx.status.clone();
    eventually("relay loss noticed", || !status.relay_connected.load(std::sync::atomic::Ordering::Relaxed)).await;

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let relay = TestRelay::start_with(listener, voxa::relay::RelayConfig::default()).await;
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    let again = recv_type(&mut phone, "approval").await;
    assert_eq!(first["approval"], again["approval"]);
    send(&mut phone, json!({"type":"approve","approval":again["approval"],"decision":"allow"})).await;
    let result = recv_result(&mut laptop, "x1").await;
    assert!(result["result"]["output"].as_str().unwrap().contains("after-restart"), "{result}");
}

#[tokio::test]
async fn hostile_answers_get_a_clear_error_and_leave_the_approval_open() {
    let agent = asking_agent(None, 600).await;
    let mut laptop = agent.local_client().await;
    follow(&mut laptop).await;
    send(&mut laptop, run_command("h0", "echo survived")).await;
    let id = recv_type(&mut laptop, "approval").await["approval"].as_str().unwrap().to_owned();
    let long_id = "a-".to_owned() + &"f".repeat(10_000);
    let huge = "x".repeat(5000);
    for (frame, code) in [
        (json!({"type":"approve","approval":"a-0000000000000000","decision":"allow"}), "not-found"),
        (json!({"type":"approve","approval":long_id,"decision":"allow"}), "invalid-args"),
        (json!({"type":"approve","approval":id,"decision":"deny","message":huge}), "too-large"),
        (json!({"type":"approve","approval":id,"decision":"allow","answers":["not","an","object"]}), "invalid-args"),
        (json!({"type":"approve","approval":id,"decision":"allow_session"}), "invalid-args"),
        (json!({"type":"approve","approval":id,"decision":"yes please"}), "bad-frame"),
    ] {
        send(&mut laptop, frame.clone()).await;
        let answer = recv_json(&mut laptop).await;
        assert_eq!(
            (answer["type"].as_str(), answer["code"].as_str()),
            (Some("error"), Some(code)),
            "{frame}: {answer}"
        );
        assert!(answer.to_string().len() < 1000, "the error does not echo the input back: {answer}");
    }
    // Still open, and the real answer still works.
    send(&mut laptop, json!({"type":"approve","approval":id,"decision":"allow"})).await;
    let (_, result) = resolved_and_result(&mut laptop, "h0").await;
    assert!(result["result"]["output"].as_str().unwrap().contains("survived"), "{result}");
}

#[tokio::test]
async fn a_hosted_voice_call_waits_for_the_phone_and_cannot_answer_itself() {
    let relay = TestRelay::start().await;
    let agent = asking_agent(Some(&relay), 600).await;
    let mut phone = agent.phone(&relay).await;
    follow(&mut phone).await;
    // What a relay hosting the call sends for its model's function call.
    let hosted = json!({"type":"tool_call","id":"h1","name":"run_command","args":{"command":"echo hosted"},"caller":"gemini-hosted"});
    send(&mut phone, hosted).await;
    let shown = recv_type(&mut phone, "approval").await;
    let id = shown["approval"].as_str().unwrap();
    let answer = json!({"type":"tool_call","id":"h2","name":"approve","args":{"approval":id,"decision":"allow"},"caller":"gemini-hosted"});
    send(&mut phone, answer).await;
    let refused = recv_result(&mut phone, "h2").await;
    assert_eq!(refused["error"]["code"], "denied-by-policy", "{refused}");
    // The phone's own answer decides.
    send(&mut phone, json!({"type":"tool_call","id":"p1","name":"approve","args":{"approval":id,"decision":"allow"}}))
        .await;
    let (resolved, result) = resolved_and_result(&mut phone, "h1").await;
    assert_eq!(resolved["by"], "phone");
    assert!(result["result"]["output"].as_str().unwrap().contains("hosted"), "{result}");
}

#[tokio::test]
async fn a_voice_call_is_told_of_the_approval_and_approves_it_by_a_function_call() {
    let mut fake = FakeGemini::start(FakeOptions::new(crate::support::phone::KEY)).await;
    let config = fake.config(crate::support::phone::KEY);
    let agent = TestAgent::start_with(None, |options| {
        options.gemini = Some(config);
        options.config = asking(600);
    })
    .await;
    let mut phone = crate::support::phone::Phone::over(agent.local_client().await);
    phone.send(json!({"type":"follow"})).await;
    phone.send(json!({"type":"call_start"})).await;
    let (conn, setup) = fake.expect_setup().await;
    phone.expect("call_started").await;
    let declared = setup["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert!(declared.iter().any(|d| d["name"] == "approve"), "approve is declared: {declared:?}");

    fake.send(
        conn,
        json!({"toolCall":{"functionCalls":[{"id":"fc-1","name":"run_command","args":{"command":"echo by-voice"}}]}}),
    );
    let shown = phone.expect("approval").await;
    let id = shown["approval"].as_str().unwrap().to_owned();
    let told = fake
        .wait_for("the approval told to the model", |e| matches!(&e.kind, Kind::Text(text) if text.contains(&id)))
        .await;
    let Kind::Text(text) = told.kind else { unreachable!() };
    assert!(text.contains("Run: echo by-voice") && text.contains("explicit yes"), "{text}");

    // The user said yes (voice takes it only from their own words); the model answers with the id.
    fake.send(conn, json!({"serverContent":{"inputTranscription":{"text":"Yes, go ahead."}}}));
    phone.expect("transcript").await;
    fake.send(conn, json!({"toolCall":{"functionCalls":[{"id":"fc-2","name":"approve","args":{"approval":id,"decision":"allow"}}]}}));
    let mut responses = crate::support::phone::expect_tool_responses(&mut fake, 2).await;
    responses.sort_by_key(|r| r["id"].as_str().unwrap().to_owned());
    assert_eq!(responses[0]["id"], "fc-1");
    assert!(responses[0]["response"]["output"]["output"].as_str().unwrap().contains("by-voice"), "{}", responses[0]);
    assert_eq!(responses[1]["id"], "fc-2");
    assert!(responses[1]["response"].get("error").is_none(), "{}", responses[1]);
    let resolved = phone.expect("approval_resolved").await;
    assert_eq!((resolved["decision"].as_str(), resolved["by"].as_str()), (Some("allow"), Some("voice")));
}

#[tokio::test]
async fn by_voice_a_risky_action_cannot_be_allowed_for_the_session() {
    let agent = asking_agent(None, 600).await;
    let broker = agent.agent.ctx.approvals.clone();
    let pending = broker.request(voxa::approvals::Request {
        source: voxa::protocol::ApprovalSource::Session("s-1".into()),
        tool: "Bash".into(),
        input: json!({"command": "git push"}),
        summary: "git push".into(),
        risk: voxa::protocol::Risk::Network,
        diff: None,
        questions: None,
        offers_session: true,
    });
    let id = pending.id().to_owned();
    let err = voxa::approvals::answer(
        &broker,
        voxa::protocol::Approve {
            approval: id.clone(),
            decision: voxa::protocol::Decision::AllowSession,
            message: None,
            answers: None,
            receipt: None,
            env: None,
        },
        "gemini",
    )
    .unwrap_err();
    assert_eq!(err.code, voxa::protocol::ErrorCode::InvalidArgs);
    assert!(broker.get(&id).is_some(), "still open after the refused answer");
    let mut laptop = agent.local_client().await;
    send(
        &mut laptop,
        json!({"type":"tool_call","id":"a1","name":"approve","args":{"approval":id,"decision":"allow_session"}}),
    )
    .await;
    assert_eq!(recv_result(&mut laptop, "a1").await["ok"], true);
    let answer = tokio::time::timeout(STEP, pending.wait(&Default::default())).await.unwrap();
    assert_eq!((answer.decision, answer.by), (voxa::protocol::Decision::AllowSession, voxa::protocol::DecidedBy::Cli));
}

mod cli {
    //! `voxa approvals` and `voxa approve` against a running `voxa run`, and a crash with an
    //! approval open.

    use super::*;
    use crate::support::{voxa, voxa_cmd, RunningVoxa};

    /// `voxa run --json` in a fresh home whose `config.toml` asks for every `run_command`.
    fn start(home: &Path, workspace: &Path) -> RunningVoxa {
        let mut cmd = voxa_cmd(home);
        cmd.args(["run", "--json", "--embedded-relay", "--workspace"]).arg(workspace);
        RunningVoxa::start(cmd)
    }

    fn prepare(home: &Path) {
        crate::support::harness::write_home_config(home, "[policy]\nask = [\"run_command\"]\n");
    }

    async fn client(home: &Path, port: u16) -> ClientSocket {
        let token = std::fs::read_to_string(home.join("auth_token")).unwrap();
        let mut socket = connect(&format!("ws://127.0.0.1:{port}/")).await;
        say_hello(&mut socket, token.trim()).await;
        socket
    }

    async fn cli(home: &Path, args: &[&str]) -> std::process::Output {
        let home = home.to_path_buf();
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        tokio::task::spawn_blocking(move || voxa(&home, &args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn voxa_approvals_lists_and_voxa_approve_answers() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("voxa");
        let workspace = tempfile::tempdir().unwrap();
        prepare(&home);
        let run = start(&home, workspace.path());
        let mut laptop = client(&home, run.port).await;
        follow(&mut laptop).await;
        send(&mut laptop, run_command("k1", "echo from-cli")).await;
        let shown = recv_type(&mut laptop, "approval").await;
        let id = shown["approval"].as_str().unwrap();

        let listed = cli(&home, &["approvals", "--json"]).await;
        assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(listed["approvals"][0]["approval"], id);
        let human = cli(&home, &["approvals"]).await;
        let human = String::from_utf8_lossy(&human.stdout).to_string();
        assert!(human.contains(id) && human.contains("Run: echo from-cli") && human.contains("exec"), "{human}");

        let denied = cli(&home, &["approve", id, "deny", "--message", "use the staging box"]).await;
        assert!(denied.status.success(), "{}", String::from_utf8_lossy(&denied.stderr));
        let (resolved, result) = resolved_and_result(&mut laptop, "k1").await;
        assert!(result["error"]["message"].as_str().unwrap().contains("use the staging box"), "{result}");
        assert_eq!(resolved["by"], "cli");
        let again = cli(&home, &["approve", id, "allow"]).await;
        assert_eq!(again.status.code(), Some(3), "{}", String::from_utf8_lossy(&again.stderr));
        assert!(String::from_utf8_lossy(&again.stderr).contains("not-found"));
        let none = cli(&home, &["approvals"]).await;
        assert!(String::from_utf8_lossy(&none.stdout).contains("no approvals are waiting"));
        run.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_approval_open_when_voxa_dies_is_reported_denied_after_the_restart() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("voxa");
        let workspace = tempfile::tempdir().unwrap();
        prepare(&home);
        let run = start(&home, workspace.path());
        let mut laptop = client(&home, run.port).await;
        follow(&mut laptop).await;
        send(&mut laptop, run_command("k2", "echo never")).await;
        let shown = recv_type(&mut laptop, "approval").await;
        let id = shown["approval"].as_str().unwrap().to_owned();
        {
            use std::os::unix::fs::PermissionsExt;
            let kept = home.join("approvals.json");
            assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o600);
        }
        run.crash();

        let run = start(&home, workspace.path());
        let mut phone = client(&home, run.port).await;
        follow(&mut phone).await;
        let resolved = recv_type(&mut phone, "approval_resolved").await;
        assert_eq!(resolved["approval"], id.as_str());
        assert_eq!((resolved["decision"].as_str(), resolved["by"].as_str()), (Some("deny"), Some("restart")));
        assert!(resolved["message"].as_str().unwrap().contains("stopped before anyone answered"), "{resolved}");
        let decided = approval_lines(&audit_lines_in(&home), &id);
        assert_eq!(decided.last().unwrap()["by"], "restart", "{decided:?}");
        let (_, stderr) = run.stop();
        assert!(stderr.contains("approval") && stderr.contains(&id), "the restart says so: {stderr}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_approval_open_when_voxa_is_stopped_is_denied_and_reported_again_after_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("voxa");
        let workspace = tempfile::tempdir().unwrap();
        prepare(&home);
        let run = start(&home, workspace.path());
        let mut laptop = client(&home, run.port).await;
        follow(&mut laptop).await;
        send(&mut laptop, run_command("k3", "echo never")).await;
        let id = recv_type(&mut laptop, "approval").await["approval"].as_str().unwrap().to_owned();
        run.stop();

        let run = start(&home, workspace.path());
        let mut phone = client(&home, run.port).await;
        follow(&mut phone).await;
        let resolved = recv_type(&mut phone, "approval_resolved").await;
        assert_eq!((resolved["approval"].as_str(), resolved["by"].as_str()), (Some(id.as_str()), Some("restart")));
        assert!(!workspace.path().join("never").exists());
        run.stop();
    }
}

mod cards {
    //! The approval cards of the web client, in headless Chromium at phone size: shown with the
    //! summary, the full command or diff and the time left; answered by Allow, Allow for session and
    //! Deny (by pointer and by keyboard); the badge and the title while one waits; back after a
    //! reload; pictures in light and dark.

    use super::*;
    use crate::support::browser::{Browser, Scheme, VIEWPORT};

    struct Page {
        relay: TestRelay,
        agent: TestAgent,
        browser: Browser,
    }

    impl Page {
        async fn open(scheme: Scheme) -> Option<Page> {
            let browser = Browser::start_with(scheme).await?;
            let relay = TestRelay::start().await;
            let agent = asking_agent(Some(&relay), 600).await;
            let page = Page { relay, agent, browser };
            page.browser
                .pair(&format!("http://{}/#code={}&token={}", page.relay.addr, page.agent.code(), page.agent.token()))
                .await;
            page.browser.wait_connection("online").await;
            Some(page)
        }

        async fn title(&self) -> String {
            self.browser.script("return document.title;", vec![]).await.as_str().unwrap_or_default().to_owned()
        }

        async fn card_text(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
            self.browser.wait_text(".approval-card", what, check).await
        }

        /// Waits until no card is left on the page.
        async fn cards_gone(&self) {
            self.browser
                .wait_script("the card to go", "return document.querySelectorAll('.approval-card').length === 0;")
                .await;
        }
    }

    async fn picture(browser: &Browser, name: &str) {
        let png = browser.screenshot().await;
        let info = png::Decoder::new(std::io::Cursor::new(&png)).read_info().unwrap().info().clone();
        assert_eq!((info.width, info.height), VIEWPORT, "{name}");
        let dir = match std::env::var_os("VOXA_DOCS_SCREENSHOTS") {
            Some(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
            None => std::env::temp_dir(),
        };
        std::fs::write(dir.join(name), png).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_card_shows_the_command_and_time_left_and_allow_runs_it() {
        let Some(page) = Page::open(Scheme::Light).await else { return };
        let title = page.title().await;
        let mut laptop = page.agent.local_client().await;
        send(&mut laptop, run_command("b1", "echo cards-ok && ls -a")).await;
        let shown = page.card_text("the card", |text| text.contains("left")).await;
        assert!(shown.contains("Run: echo cards-ok && ls -a"), "{shown}");
        assert!(shown.to_lowercase().contains("runs a program"), "{shown}");
        assert!(shown.contains("Full command"), "{shown}");
        assert!(shown.contains("10:00 left") || shown.contains("9:5"), "ten minutes left: {shown}");
        let badge = page.browser.wait_text("#approvals-badge", "the badge", |text| !text.is_empty()).await;
        assert_eq!(badge, "1 approval waiting");
        assert!(page.title().await.starts_with("(1) Approval waiting"), "{}", page.title().await);
        // A call of the laptop's own offers no "Allow for session"; the buttons have the contract's
        // names, the textbox its own.
        page.browser.control("button", "Deny").await;
        page.browser.control("textbox", "Message").await;
        let buttons = page
            .browser
            .script("return [...document.querySelectorAll('.approval-card button')].map(b => b.textContent);", vec![])
            .await;
        assert_eq!(buttons, json!(["Allow", "Deny"]));
        picture(&page.browser, "web-approval.png").await;

        page.browser.press("Allow").await;
        let result = recv_result(&mut laptop, "b1").await;
        assert!(result["result"]["output"].as_str().unwrap().contains("cards-ok"), "{result}");
        page.card_text("the verdict", |text| text.contains("Allowed — on a phone")).await;
        page.cards_gone().await;
        assert_eq!(page.title().await, title);
        page.browser.wait_script("the badge hidden", "return document.getElementById('approvals-badge').hidden;").await;
        page.browser.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deny_by_keyboard_carries_the_message_and_a_reload_shows_the_card_again() {
        let Some(page) = Page::open(Scheme::Light).await else { return };
        let mut laptop = page.agent.local_client().await;
        send(&mut laptop, run_command("b2", "rm -rf build")).await;
        page.card_text("the card", |text| text.contains("rm -rf build")).await;
        // The phone reloads (or drops and comes back): the laptop sends the open approval again.
        page.browser.client.refresh().await.unwrap();
        page.browser.wait_connection("online").await;
        page.card_text("the card again", |text| text.contains("rm -rf build")).await;

        page.browser.type_into("Message", "keep the build").await;
        let deny = page.browser.control("button", "Deny").await;
        page.browser.script("arguments[0].focus();", vec![serde_json::to_value(&deny).unwrap()]).await;
        let focused = page.browser.script("return document.activeElement.textContent;", vec![]).await;
        assert_eq!(focused, "Deny");
        deny.send_keys("\u{E007}").await.unwrap();
        let result = recv_result(&mut laptop, "b2").await;
        assert_eq!(result["error"]["code"], "denied-by-policy", "{result}");
        assert!(result["error"]["message"].as_str().unwrap().contains("keep the build"), "{result}");
        page.card_text("the verdict", |text| text.contains("Denied — on a phone: keep the build")).await;
        page.browser.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_coding_agents_edit_shows_its_diff_and_can_be_allowed_for_the_session_in_dark_mode() {
        let Some(page) = Page::open(Scheme::Dark).await else { return };
        let broker = page.agent.agent.ctx.approvals.clone();
        let diff = "--- a/src/app.rs\n+++ b/src/app.rs\n@@ -1,3 +1,3 @@\n fn main() {\n-    println!(\"hi\");\n+    println!(\"hello\");\n }\n";
        let pending = broker.request(voxa::approvals::Request {
            source: voxa::protocol::ApprovalSource::Session("s-7".into()),
            tool: "Edit".into(),
            input: json!({"file_path": "src/app.rs", "old_string": "hi", "new_string": "hello"}),
            summary: "Edit src/app.rs".into(),
            risk: voxa::protocol::Risk::Write,
            diff: Some(diff.into()),
            questions: None,
            offers_session: true,
        });
        let shown = page.card_text("the card", |text| text.contains("Edit src/app.rs")).await;
        assert!(shown.contains("Diff") && shown.contains("+    println!(\"hello\");"), "{shown}");
        assert!(shown.contains("coding agent session s-7"), "{shown}");
        assert_eq!(
            page.browser.script("return matchMedia('(prefers-color-scheme: dark)').matches;", vec![]).await,
            json!(true)
        );
        picture(&page.browser, "web-approval-dark.png").await;
        page.browser.press("Allow for session").await;
        let answer = tokio::time::timeout(STEP, pending.wait(&Default::default())).await.unwrap();
        assert_eq!(
            (answer.decision, answer.by),
            (voxa::protocol::Decision::AllowSession, voxa::protocol::DecidedBy::Phone)
        );
        page.cards_gone().await;
        page.browser.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_question_is_answered_by_the_button_of_its_option() {
        let Some(page) = Page::open(Scheme::Light).await else { return };
        let broker = page.agent.agent.ctx.approvals.clone();
        let questions = json!([{"question": "Which database?", "header": "DB", "multiSelect": false,
            "options": [{"label": "Postgres", "description": "the server"}, {"label": "SQLite", "description": "a file"}]}]);
        let pending = broker.request(voxa::approvals::Request {
            source: voxa::protocol::ApprovalSource::Session("s-8".into()),
            tool: "AskUserQuestion".into(),
            input: json!({"questions": questions}),
            summary: "Which database?".into(),
            risk: voxa::protocol::Risk::Read,
            diff: None,
            questions: Some(questions),
            offers_session: false,
        });
        page.card_text("the question", |text| text.contains("Which database?")).await;
        page.browser.press("SQLite").await;
        let answer = tokio::time::timeout(STEP, pending.wait(&Default::default())).await.unwrap();
        assert_eq!(answer.decision, voxa::protocol::Decision::Allow);
        assert_eq!(answer.answers, Some(json!({"Which database?": "SQLite"})));
        page.browser.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn similar_approvals_of_a_session_are_one_card_allowed_reviewed_or_denied_together() {
        let Some(page) = Page::open(Scheme::Light).await else { return };
        let broker = page.agent.agent.ctx.approvals.clone();
        let ask = |command: &str| {
            broker.request(voxa::approvals::Request {
                source: voxa::protocol::ApprovalSource::Session("s-9".into()),
                tool: "Bash".into(),
                input: json!({"command": command}),
                summary: format!("Run: {command}"),
                risk: voxa::protocol::Risk::Exec,
                diff: None,
                questions: None,
                offers_session: true,
            })
        };
        let (first, second, third) = (ask("make a"), ask("make b"), ask("make c"));
        let batch = page
            .browser
            .wait_text(".approval-card.batch", "the batch", |t| t.to_lowercase().contains("3 similar"))
            .await;
        assert!(batch.contains("Run: make a") && batch.contains("Run: make c"), "{batch}");
        page.browser
            .wait_script(
                "one card for three",
                "return [...document.querySelectorAll('#approval-list > li')].filter((n) => !n.hidden).length === 1;",
            )
            .await;
        // Review each: the three cards, one by one; one denied there, the batch of the other two allowed.
        page.browser.press("Review each").await;
        page.browser
            .wait_script(
                "three cards",
                "return [...document.querySelectorAll('#approval-list > li')].filter((n) => !n.hidden).length === 3;",
            )
            .await;
        let third_card =
            format!("document.querySelector('[data-approval=\"{}\"] button.danger').click(); return true;", third.id());
        page.browser.script(&third_card, vec![]).await;
        let denied = tokio::time::timeout(STEP, third.wait(&Default::default())).await.unwrap();
        assert_eq!(denied.decision, voxa::protocol::Decision::Deny);
        let (fourth, fifth) = (ask("make d"), ask("make e"));
        page.browser
            .wait_text(".approval-card.batch", "the batch again", |t| t.to_lowercase().contains("4 similar"))
            .await;
        page.browser.press("Allow all").await;
        for pending in [first, second, fourth, fifth] {
            let answer = tokio::time::timeout(STEP, pending.wait(&Default::default())).await.unwrap();
            assert_eq!(answer.decision, voxa::protocol::Decision::Allow);
        }
        page.cards_gone().await;
        page.browser.close().await;
    }
}
