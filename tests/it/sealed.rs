//! Sealed sessions (docs/PROTOCOL.md, "Sealed sessions (protocol 3)") against a malicious relay:
//! a proxy on the phone's side of a real relay sees every frame the relay sees and flips, injects,
//! replays, drops and reorders them. Each closes the session and runs nothing (the workspace and
//! the audit trail say so); a passive capture of a whole session holds none of its plaintext; a
//! protocol-2 client is refused through the relay unless `config.toml` allows it, and served on
//! the loopback socket.

use std::sync::{Arc, Mutex};

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use voxa::agent::LinkEvent;
use voxa::protocol::ErrorCode;

use crate::support::audit::audit_lines;
use crate::support::harness::*;
use crate::support::mitm::{flip_one_bit, Hook, Mitm, Way};

/// A hook that hands the `way` direction's binary frames (the sealed ones), numbered from 0, to
/// `tamper`, and passes everything else on.
pub fn on_sealed(way: Way, mut tamper: impl FnMut(usize, Message) -> Vec<Message> + Send + 'static) -> Hook {
    let mut seen = 0;
    Box::new(move |through, message| {
        if through != way || !message.is_binary() {
            return vec![message];
        }
        seen += 1;
        tamper(seen - 1, message)
    })
}

fn audited(agent: &TestAgent, id: &str) -> usize {
    audit_lines(agent).iter().filter(|line| line["id"] == id).count()
}

fn write_call(id: &str, path: &str) -> Value {
    json!({"type":"tool_call","id": id,"name":"write_file","args":{"path": path,"content":"x"}})
}

/// The phone's session ended because its seal broke, and the agent says it closed it.
async fn assert_broken(phone: &mut voxa::net::dial::ClientSocket, agent: &mut TestAgent) {
    let (code, reason) = recv_close(phone).await;
    assert_eq!((code, reason.as_str()), (1008, "sealed-session-broken"));
    agent
        .wait_event("the agent ends the broken session", |event| {
            matches!(event, LinkEvent::PeerRefused { code: ErrorCode::SealedSessionBroken })
        })
        .await;
}

#[tokio::test]
async fn a_relay_that_flips_injects_replays_drops_or_reorders_ends_the_session_and_nothing_runs() {
    let relay = TestRelay::start().await;
    let mut agent = TestAgent::start(Some(relay.url())).await;
    let workspace = agent.workspace.path().to_path_buf();

    // One bit flipped in the phone's sealed tool call.
    let mitm = Mitm::start(relay.addr, agent.code(), on_sealed(Way::Up, |_, m| vec![flip_one_bit(m)])).await;
    let mut phone = mitm.phone(&agent).await;
    send(&mut phone, write_call("flip", "flipped.txt")).await;
    assert_broken(&mut phone, &mut agent).await;
    assert!(!workspace.join("flipped.txt").exists());
    assert_eq!(audited(&agent, "flip"), 0);

    // A well-formed tool call injected in the clear after a sealed frame. (The first frame passes
    // alone, so that its answer shows the seal carried it; an answer to the frame the injection
    // follows may or may not leave before the session ends.)
    let injected = write_call("inject", "injected.txt").to_string();
    let inject = move |n, m| if n == 0 { vec![m] } else { vec![m, Message::text(injected.clone())] };
    let mitm = Mitm::start(relay.addr, agent.code(), on_sealed(Way::Up, inject)).await;
    let mut phone = mitm.phone(&agent).await;
    send(&mut phone, json!({"type":"status"})).await;
    assert_eq!(recv_type(&mut phone, "status").await["type"], "status", "the phone's own frame went through");
    send(&mut phone, json!({"type":"status"})).await;
    assert_broken(&mut phone, &mut agent).await;
    assert!(!workspace.join("injected.txt").exists());
    assert_eq!(audited(&agent, "inject"), 0);

    // A captured frame replayed in place of the next one.
    let first = Arc::new(Mutex::new(None));
    let mitm = Mitm::start(
        relay.addr,
        agent.code(),
        on_sealed(Way::Up, move |n, m| {
            let mut first = first.lock().unwrap();
            if n == 0 {
                *first = Some(m.clone());
                vec![m]
            } else {
                vec![first.clone().unwrap()]
            }
        }),
    )
    .await;
    let mut phone = mitm.phone(&agent).await;
    let once =
        json!({"type":"tool_call","id":"once","name":"run_command","args":{"command":"echo ran >> replayed.txt"}});
    send(&mut phone, once).await;
    assert_eq!(recv_result(&mut phone, "once").await["ok"], true);
    send(&mut phone, json!({"type":"status"})).await;
    assert_broken(&mut phone, &mut agent).await;
    assert_eq!(std::fs::read_to_string(workspace.join("replayed.txt")).unwrap(), "ran\n", "the replay ran nothing");
    assert_eq!(audited(&agent, "once"), 1);

    // A frame dropped: the next one does not open.
    let mitm =
        Mitm::start(relay.addr, agent.code(), on_sealed(Way::Up, |n, m| if n == 0 { vec![] } else { vec![m] })).await;
    let mut phone = mitm.phone(&agent).await;
    send(&mut phone, write_call("dropped", "dropped.txt")).await;
    send(&mut phone, write_call("after-drop", "after-drop.txt")).await;
    assert_broken(&mut phone, &mut agent).await;
    assert!(!workspace.join("dropped.txt").exists() && !workspace.join("after-drop.txt").exists());
    assert_eq!(audited(&agent, "after-drop"), 0);

    // Two frames swapped.
    let held = Arc::new(Mutex::new(None));
    let mitm = Mitm::start(
        relay.addr,
        agent.code(),
        on_sealed(Way::Up, move |n, m| {
            let mut held = held.lock().unwrap();
            match n {
                0 => {
                    *held = Some(m);
                    vec![]
                }
                1 => vec![m, held.take().unwrap()],
                _ => vec![m],
            }
        }),
    )
    .await;
    let mut phone = mitm.phone(&agent).await;
    send(&mut phone, write_call("first", "first.txt")).await;
    send(&mut phone, write_call("second", "second.txt")).await;
    assert_broken(&mut phone, &mut agent).await;
    assert!(!workspace.join("first.txt").exists() && !workspace.join("second.txt").exists());
    assert_eq!(audited(&agent, "first") + audited(&agent, "second"), 0);

    // The other way: one bit flipped in the agent's answer ends the session at the phone.
    let mitm = Mitm::start(relay.addr, agent.code(), on_sealed(Way::Down, |_, m| vec![flip_one_bit(m)])).await;
    let mut phone = mitm.phone(&agent).await;
    send(&mut phone, json!({"type":"status"})).await;
    let (code, reason) = recv_close(&mut phone).await;
    assert_eq!((code, reason.as_str()), (1008, "sealed-session-broken"));

    // Through the relay itself, untouched, the same agent still serves a sealed phone.
    let mut phone = agent.phone(&relay).await;
    send(&mut phone, write_call("clean", "clean.txt")).await;
    assert_eq!(recv_result(&mut phone, "clean").await["ok"], true);
    assert_eq!(audited(&agent, "clean"), 1);
}

#[tokio::test]
async fn a_passive_capture_of_a_sealed_session_holds_none_of_its_plaintext() {
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    let secret_file = "the-content-of-a-private-file-7f3a";
    std::fs::write(agent.workspace.path().join("private.txt"), secret_file).unwrap();
    let mitm = Mitm::start(relay.addr, agent.code(), Box::new(|_, m| vec![m])).await;
    let mut phone = mitm.phone(&agent).await;

    let command = "echo output-of-a-private-command-91c2";
    send(&mut phone, json!({"type":"tool_call","id":"c1","name":"run_command","args":{"command": command}})).await;
    let result = recv_result(&mut phone, "c1").await;
    assert!(result["result"]["output"].as_str().unwrap().contains("output-of-a-private-command-91c2"));
    send(&mut phone, json!({"type":"tool_call","id":"c2","name":"read_file","args":{"path":"private.txt"}})).await;
    assert_eq!(recv_result(&mut phone, "c2").await["result"]["content"], secret_file);
    let written = "words-written-to-the-laptop-55de";
    let write = json!({"type":"tool_call","id":"c3","name":"write_file","args":{"path":"new.txt","content": written}});
    send(&mut phone, write).await;
    assert_eq!(recv_result(&mut phone, "c3").await["ok"], true);
    // Microphone audio: sealed like everything else (this agent hosts no call, so it is dropped).
    let audio: Vec<u8> = std::iter::once(0x01).chain(b"pcm-audio-of-the-user-speaking-0b7e".repeat(20)).collect();
    phone.send(Message::binary(audio)).await.unwrap();
    let mut plaintexts: Vec<Vec<u8>> = vec![
        command.into(),
        b"output-of-a-private-command-91c2".to_vec(),
        secret_file.into(),
        written.into(),
        b"pcm-audio-of-the-user-speaking-0b7e".to_vec(),
        b"run_command".to_vec(),
        b"tool_result".to_vec(),
        agent.token().as_bytes().to_vec(),
    ];
    if let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x200x24") {
        let shot = json!({"type":"tool_call","id":"c4","name":"screenshot","args":{"display": xvfb.display}});
        send(&mut phone, shot).await;
        let image = recv_type(&mut phone, "image").await;
        let data = image["data"].as_str().unwrap();
        plaintexts.push(data.as_bytes()[..64].to_vec());
        plaintexts.push(b"image/png".to_vec());
        assert_eq!(recv_result(&mut phone, "c4").await["ok"], true);
    }
    send(&mut phone, json!({"type":"status"})).await;
    recv_type(&mut phone, "status").await;

    let capture = mitm.capture.lock().unwrap().clone();
    assert!(capture.len() > 8, "the capture holds the session: {} frames", capture.len());
    let mut hello_ok_seen = false;
    for (way, message) in &capture {
        let bytes = message.clone().into_data();
        for plain in &plaintexts {
            assert!(
                !bytes.windows(plain.len()).any(|w| w == plain.as_slice()),
                "{way:?} frame shows {:?}",
                String::from_utf8_lossy(plain)
            );
        }
        match message {
            Message::Text(text) if hello_ok_seen => {
                assert!(voxa::seal::socket::relay_notice(text).is_some(), "unsealed after the hello: {text}")
            }
            Message::Text(text) => hello_ok_seen = text.contains("\"hello_ok\""),
            _ => {}
        }
    }
    assert!(hello_ok_seen);
    assert!(capture.iter().filter(|(_, m)| m.is_binary()).count() >= 8);
}

#[tokio::test]
async fn protocol_2_is_refused_through_the_relay_unless_the_config_allows_it_and_kept_on_the_loopback_socket() {
    let refused_plain = |err: anyhow::Error| err.downcast_ref::<voxa::error::Refused>().map(|refused| refused.code);
    let relay = TestRelay::start().await;
    let agent = TestAgent::start(Some(relay.url())).await;
    assert!(voxa::config::Config::default().security.require_sealed, "sealed only is the default");
    // Through the relay a protocol-2 hello is refused: only a sealed session is served there.
    let mut plain = phone_socket(&relay, agent.code()).await;
    let token = voxa::secret::Secret::from_string(agent.token().to_owned());
    let err = voxa::net::client::hello_plain(&mut plain, &token, "old-client/1").await.unwrap_err();
    assert_eq!(refused_plain(err), Some(ErrorCode::SealedSessionRequired));
    let mut sealed = agent.phone(&relay).await;
    assert!(sealed.is_sealed());
    send(&mut sealed, json!({"type":"tool_call","id":"s1","name":"list_dir","args":{}})).await;
    assert_eq!(recv_result(&mut sealed, "s1").await["ok"], true);
    // The loopback socket keeps protocol 2 for local scripts; status counts both kinds.
    let mut script = connect(&agent.loopback_url()).await;
    assert_eq!(say_hello_plain(&mut script, agent.token()).await["protocol"], 2);
    send(&mut script, json!({"type":"tool_call","id":"p1","name":"list_dir","args":{}})).await;
    assert_eq!(recv_result(&mut script, "p1").await["ok"], true);
    let mut local = agent.local_client().await;
    send(&mut local, json!({"type":"status"})).await;
    let status = recv_type(&mut local, "status").await;
    assert_eq!((status["sealed_sessions"].as_u64(), status["plain_sessions"].as_u64()), (Some(2), Some(1)));

    // An operator of old clients turns it off in config.toml: protocol 2 is served through the relay.
    let config = voxa::config::Config::from_toml("[security]\nrequire_sealed = false\n").unwrap();
    assert!(!config.security.require_sealed);
    let open = TestAgent::start_with(Some(relay.url()), |options| options.config = config).await;
    let mut old = phone_socket(&relay, open.code()).await;
    assert_eq!(say_hello_plain(&mut old, open.token()).await["protocol"], 2);
    send(&mut old, json!({"type":"tool_call","id":"o1","name":"list_dir","args":{}})).await;
    assert_eq!(recv_result(&mut old, "o1").await["ok"], true);
}

#[tokio::test]
async fn a_large_frame_crosses_a_sealed_session_in_parts() {
    let agent = TestAgent::start(None).await;
    let content = "0123456789abcdef".repeat(12_500);
    std::fs::write(agent.workspace.path().join("big.txt"), &content).unwrap();
    let mut client = agent.local_client().await;
    let write = json!({"type":"tool_call","id":"w","name":"write_file","args":{"path":"copy.txt","content": content}});
    send(&mut client, write).await;
    assert_eq!(recv_result(&mut client, "w").await["ok"], true);
    assert_eq!(std::fs::read_to_string(agent.workspace.path().join("copy.txt")).unwrap(), content);
    let read = json!({"type":"tool_call","id":"r","name":"read_file","args":{"path":"big.txt","max_bytes": 1_000_000}});
    send(&mut client, read).await;
    assert_eq!(recv_result(&mut client, "r").await["result"]["content"], content);
}
