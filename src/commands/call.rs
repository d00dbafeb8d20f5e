//! `voxa call`: one tool through the running agent's loopback socket, for scripts and CI.

use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use super::Settings;
use crate::cli::CallArgs;
use crate::error::{ConfigError, Exit, Refused};
use crate::net::client;
use crate::net::dial::{self, ClientSocket, DialOptions};
use crate::protocol::{self, AgentMessage, ClientMessage, HelloOk, ToolCall, ToolResult};
use crate::state::Home;

/// Connects to the running agent of `home` and completes the hello, checking the agent's proof
/// before anything else is sent.
pub async fn connect_local(home: &Home) -> Result<(ClientSocket, HelloOk)> {
    let secrets = home.require_secrets()?;
    let agent = home
        .running_agent()?
        .ok_or_else(|| anyhow!("no voxa agent is running for {}; start one with `voxa run`", home.dir().display()))?;
    let url = format!("ws://127.0.0.1:{}/", agent.port);
    let mut socket = dial::connect(&url, &DialOptions::default()).await.context("could not reach the running agent")?;
    let client_name = format!("voxa-cli/{}", crate::VERSION);
    let hello_ok = tokio::time::timeout(
        protocol::HELLO_TIMEOUT * 2,
        client::hello(&mut socket, &secrets.auth_token, &client_name),
    )
    .await
    .map_err(|_| anyhow!("the agent did not answer"))??;
    Ok((socket, hello_ok))
}

/// `voxa call TOOL [ARGS]`.
pub async fn run_call(settings: &Settings, args: CallArgs) -> Result<Exit> {
    let tool_args = parse_call_args(&args.args)?;
    let (mut socket, _) = connect_local(&settings.home).await?;
    let call =
        ToolCall { id: "call-1".into(), name: args.tool.clone(), args: tool_args, env: args.env.clone(), caller: None };
    socket
        .send(Message::text(ClientMessage::ToolCall(call.clone()).to_json()))
        .await
        .context("could not send the call")?;
    let json_out = settings.printer.is_json();
    let mut streamed = false;
    let result = loop {
        let Some(frame) = socket.next().await else { bail!("the agent closed the connection before the result") };
        match frame.context("agent connection failed")? {
            Message::Text(text) => match serde_json::from_str::<AgentMessage>(&text) {
                Ok(AgentMessage::ToolProgress { chunk, .. }) if !json_out => {
                    streamed = true;
                    let mut out = std::io::stdout().lock();
                    out.write_all(chunk.as_bytes())?;
                    out.flush()?;
                }
                Ok(AgentMessage::ToolResult(result)) if result.id == call.id => break result,
                Ok(AgentMessage::Error { code, message }) => {
                    return Err(Refused { code, message: message.unwrap_or_default() }.into())
                }
                _ => {}
            },
            Message::Close(frame) => return Err(client::close_error(frame)),
            _ => {}
        }
    };
    let _ = socket.close(None).await;
    report(settings, &args.tool, &result, streamed)
}

fn report(settings: &Settings, tool: &str, result: &ToolResult, streamed: bool) -> Result<Exit> {
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    if let Some(error) = &result.error {
        if settings.printer.is_json() {
            println!("{value}");
        } else {
            eprintln!("voxa: {tool} failed: {} ({})", error.message, error.code);
        }
        if error.code.is_refusal() {
            return Ok(Exit::Refused);
        }
        return Ok(Exit::ToolFailed);
    }
    let body = result.result.clone().unwrap_or(Value::Null);
    let exit_code = body.get("exit_code").and_then(Value::as_i64);
    if settings.printer.is_json() {
        println!("{value}");
    } else {
        print!("{}", human(tool, &body, streamed));
    }
    Ok(match exit_code {
        Some(code) if code != 0 => Exit::CommandFailed,
        _ if body.get("timed_out").and_then(Value::as_bool) == Some(true) => Exit::CommandFailed,
        _ => Exit::Ok,
    })
}

/// The human form of a result: what a person would want on the terminal.
fn human(tool: &str, body: &Value, streamed: bool) -> String {
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let with_newline = |mut s: String| {
        if !s.is_empty() && !s.ends_with('\n') {
            s.push('\n');
        }
        s
    };
    match tool {
        "run_command" if streamed => String::new(),
        "run_command" => with_newline(text("output")),
        "read_file" => with_newline(text("content")),
        "coding_agent" => with_newline(text("text")),
        "write_file" => format!("wrote {} bytes to {}\n", body["bytes_written"], text("path")),
        "list_dir" => body
            .get("entries")
            .and_then(Value::as_array)
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        let name = e["name"].as_str().unwrap_or_default();
                        match e["kind"].as_str() {
                            Some("dir") => format!("{name}/\n"),
                            Some("symlink") => format!("{name}@\n"),
                            _ => format!("{name}\t{}\n", e["size"]),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
        "screenshot" => format!(
            "screenshot {}x{} {} ({} bytes)\n",
            body["width"],
            body["height"],
            body["mime"].as_str().unwrap_or_default(),
            body["bytes"]
        ),
        _ => format!("{}\n", serde_json::to_string_pretty(body).unwrap_or_default()),
    }
}

/// Turns `voxa call` arguments into a JSON object.
pub fn parse_call_args(args: &[String]) -> Result<serde_json::Value, ConfigError> {
    use serde_json::{Map, Value};
    if let [single] = args {
        if single.trim_start().starts_with('{') {
            return match serde_json::from_str::<Value>(single) {
                Ok(Value::Object(map)) => Ok(Value::Object(map)),
                Ok(_) => Err(ConfigError::new("tool arguments must be a JSON object")),
                Err(err) => Err(ConfigError::new(format!("tool arguments are not valid JSON: {err}"))),
            };
        }
    }
    let mut map = Map::new();
    for pair in args {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(ConfigError::new(format!("argument {pair:?} is not key=value (or pass one JSON object)")));
        };
        if key.is_empty() {
            return Err(ConfigError::new(format!("argument {pair:?} has an empty key")));
        }
        // Numbers, booleans, objects and arrays are taken as JSON; anything else is a string.
        let parsed = match serde_json::from_str::<Value>(value) {
            Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_) | Value::Null)) => v,
            _ => Value::String(value.to_owned()),
        };
        map.insert(key.to_owned(), parsed);
    }
    Ok(Value::Object(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_args_accept_json_or_pairs() {
        let json = parse_call_args(&[r#"{"command":"ls"}"#.into()]).unwrap();
        assert_eq!(json, serde_json::json!({"command":"ls"}));
        let pairs = parse_call_args(&["command=echo hi".into(), "timeout_ms=500".into(), "x=true".into()]).unwrap();
        assert_eq!(pairs, serde_json::json!({"command":"echo hi","timeout_ms":500,"x":true}));
        assert!(parse_call_args(&["oops".into()]).is_err());
        assert!(parse_call_args(&["[1]".into()]).is_err());
        assert!(parse_call_args(&["{bad".into()]).is_err());
    }
}
