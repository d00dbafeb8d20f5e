//! `voxa approvals` and `voxa approve`: the open approvals of the running agent, and an answer to
//! one, over its loopback socket (the `approvals` and `approve` tools); `voxa approvals grants`
//! and `voxa approvals revoke ID`: the grants "Allow for session" made (the `grants` and
//! `revoke` frames).

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::call::connect_local;
use super::Settings;
use crate::cli::{ApprovalsArgs, ApprovalsCommand, ApproveArgs, ApproveDecision};
use crate::error::Exit;
use crate::net::client;
use crate::protocol::{AgentMessage, ApprovalFrame, ClientMessage, ToolCall, ToolResult};

/// `voxa approvals [grants | revoke ID]`.
pub async fn run(settings: &Settings, args: ApprovalsArgs) -> Result<Exit> {
    match args.command {
        None => run_approvals(settings).await,
        Some(ApprovalsCommand::Grants) => run_grants(settings, ClientMessage::Grants).await,
        Some(ApprovalsCommand::Revoke { grant }) => run_grants(settings, ClientMessage::Revoke { grant }).await,
    }
}

/// `voxa approvals grants` (one line per grant: its id, session, tool and what it lets through)
/// and `voxa approvals revoke ID`.
async fn run_grants(settings: &Settings, frame: ClientMessage) -> Result<Exit> {
    let revoking = match &frame {
        ClientMessage::Revoke { grant } => Some(grant.clone()),
        _ => None,
    };
    let (mut socket, _) = connect_local(&settings.home).await?;
    socket.send(Message::text(frame.to_json())).await.context("could not send the request")?;
    let answer = loop {
        let Some(frame) = socket.next().await else { bail!("the agent closed the connection before it answered") };
        match frame.context("agent connection failed")? {
            Message::Text(text) => match serde_json::from_str::<AgentMessage>(&text) {
                Ok(AgentMessage::Grants { grants, revoked }) => break Ok((grants, revoked)),
                Ok(AgentMessage::Error { code, message }) => break Err((code, message.unwrap_or_default())),
                _ => {}
            },
            Message::Close(frame) => return Err(client::close_error(frame)),
            _ => {}
        }
    };
    let _ = socket.close(None).await;
    let (grants, revoked) = match answer {
        Ok(answer) => answer,
        Err((code, message)) => {
            if settings.printer.is_json() {
                println!("{}", json!({"error": {"code": code, "message": message}}));
            } else {
                eprintln!("voxa: {message} ({code})");
            }
            return Ok(if code.is_refusal() { Exit::Refused } else { Exit::ToolFailed });
        }
    };
    if settings.printer.is_json() {
        println!("{}", json!({"grants": grants, "revoked": revoked}));
        return Ok(Exit::Ok);
    }
    if let Some(grant) = revoking {
        println!("{grant} revoked: what it let through asks again");
        return Ok(Exit::Ok);
    }
    if grants.is_empty() {
        println!("no grants: every prompt is asked");
    }
    for grant in grants {
        println!("{}  session {}  {:<10}  lets through {}", grant.grant, grant.session, grant.tool, grant.allows);
    }
    Ok(Exit::Ok)
}

/// `voxa approvals`: one line per open approval (its id, risk, time left, summary).
async fn run_approvals(settings: &Settings) -> Result<Exit> {
    let result = call(settings, "approvals", json!({})).await?;
    let body = result.result.clone().unwrap_or(Value::Null);
    if settings.printer.is_json() {
        println!("{body}");
        return Ok(Exit::Ok);
    }
    let open: Vec<ApprovalFrame> =
        serde_json::from_value(body["approvals"].clone()).context("the agent sent an unreadable list")?;
    if open.is_empty() {
        println!("no approvals are waiting");
    }
    let now = crate::approvals::unix_ms(std::time::SystemTime::now());
    for approval in open {
        let left = approval.expires_at.saturating_sub(now) / 1000;
        let source = match &approval.source {
            crate::protocol::ApprovalSource::Session(session) => format!("session {session}"),
            crate::protocol::ApprovalSource::Call(call) => format!("call {call}"),
        };
        println!(
            "{}  {:<7}  {:>2}m{:02}s left  {}  ({}, {source})",
            approval.approval,
            approval.risk.as_str(),
            left / 60,
            left % 60,
            approval.summary,
            approval.tool
        );
    }
    Ok(Exit::Ok)
}

/// `voxa approve ID allow|allow-session|deny [--message M]`.
pub async fn run_approve(settings: &Settings, args: ApproveArgs) -> Result<Exit> {
    let decision = match args.decision {
        ApproveDecision::Allow => "allow",
        ApproveDecision::AllowSession => "allow_session",
        ApproveDecision::Deny => "deny",
    };
    let mut call_args = json!({ "approval": args.approval, "decision": decision });
    if let Some(message) = &args.message {
        call_args["message"] = Value::from(message.as_str());
    }
    let result = call(settings, "approve", call_args).await?;
    if settings.printer.is_json() {
        println!("{}", serde_json::to_value(&result).unwrap_or(Value::Null));
    }
    match &result.error {
        Some(error) => {
            if !settings.printer.is_json() {
                eprintln!("voxa: could not answer {}: {} ({})", args.approval, error.message, error.code);
            }
            Ok(if error.code.is_refusal() { Exit::Refused } else { Exit::ToolFailed })
        }
        None => {
            if !settings.printer.is_json() {
                println!("{} {}", args.approval, if decision == "deny" { "denied" } else { "allowed" });
            }
            Ok(Exit::Ok)
        }
    }
}

/// One tool call through the running agent; its result.
async fn call(settings: &Settings, tool: &str, args: Value) -> Result<ToolResult> {
    let (mut socket, _) = connect_local(&settings.home).await?;
    let call = ToolCall { id: super::call::call_id("approvals")?, name: tool.into(), args, env: None, caller: None };
    socket
        .send(Message::text(ClientMessage::ToolCall(call.clone()).to_json()))
        .await
        .context("could not send the call")?;
    let result = loop {
        let Some(frame) = socket.next().await else { bail!("the agent closed the connection before the result") };
        match frame.context("agent connection failed")? {
            Message::Text(text) => {
                if let Ok(AgentMessage::ToolResult(result)) = serde_json::from_str::<AgentMessage>(&text) {
                    if result.id == call.id {
                        break result;
                    }
                }
            }
            Message::Close(frame) => return Err(client::close_error(frame)),
            _ => {}
        }
    };
    let _ = socket.close(None).await;
    Ok(result)
}
