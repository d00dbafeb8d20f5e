//! `voxa call`: one tool through the running agent's loopback socket, for scripts and CI.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use super::Settings;
use crate::cli::CallArgs;
use crate::error::{ConfigError, Exit, Refused};
use crate::net::client;
use crate::net::dial::{self, ClientSocket, DialOptions};
use crate::protocol::{self, AgentMessage, ClientMessage, HelloOk, Image, ToolCall, ToolResult};
use crate::state::Home;
use crate::tools::ParamType;

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

/// A call id no other client of this pairing uses: calls belong to the pairing and outlive their
/// connection, so two CLI runs at once (or one after an interrupted one) must not share ids.
pub fn call_id(prefix: &str) -> Result<String> {
    Ok(format!("{prefix}-{}", &protocol::new_nonce()?[..16]))
}

/// `voxa call TOOL [ARGS]`.
pub async fn run_call(settings: &Settings, args: CallArgs) -> Result<Exit> {
    let tool_args = parse_call_args(&args.tool, &args.args)?;
    let (mut socket, _) = connect_local(&settings.home).await?;
    let call =
        ToolCall { id: call_id("cli")?, name: args.tool.clone(), args: tool_args, env: args.env.clone(), caller: None };
    socket
        .send(Message::text(ClientMessage::ToolCall(call.clone()).to_json()))
        .await
        .context("could not send the call")?;
    let json_out = settings.printer.is_json();
    let mut streamed = false;
    // A screenshot's image comes in its own frame, before the result.
    let mut image = None;
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
                Ok(AgentMessage::Image(frame)) if frame.id == call.id => image = Some(frame),
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
    let saved = match image {
        Some(image) if result.error.is_none() => Some(save_image(&image, args.out.as_deref())?),
        _ => None,
    };
    report(settings, &args.tool, &result, streamed, saved.as_deref())
}

fn report(settings: &Settings, tool: &str, result: &ToolResult, streamed: bool, saved: Option<&Path>) -> Result<Exit> {
    let mut value = serde_json::to_value(result).unwrap_or(Value::Null);
    if let (Some(path), Some(object)) = (saved, value.as_object_mut()) {
        object.insert("saved".into(), Value::String(path.display().to_string()));
    }
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
        print!("{}", human(tool, &body, streamed, saved));
    }
    Ok(match exit_code {
        Some(code) if code != 0 => Exit::CommandFailed,
        _ if body.get("timed_out").and_then(Value::as_bool) == Some(true) => Exit::CommandFailed,
        _ => Exit::Ok,
    })
}

/// The human form of a result: what a person would want on the terminal.
fn human(tool: &str, body: &Value, streamed: bool, saved: Option<&Path>) -> String {
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
            "screenshot {}x{} {} ({} bytes) {}\n",
            body["width"],
            body["height"],
            body["mime"].as_str().unwrap_or_default(),
            body["bytes"],
            match saved {
                Some(path) => format!("saved to {}", path.display()),
                // An environment keeps its screenshots: only the result fields come back.
                None => "not saved: the image stayed where it was taken".to_owned(),
            }
        ),
        _ => format!("{}\n", serde_json::to_string_pretty(body).unwrap_or_default()),
    }
}

/// Saves a screenshot's image to `out`, else to `screenshot-<UTC time>.<ext>` in the current
/// directory (never over an existing file), created 0600: a screen can show anything.
fn save_image(image: &Image, out: Option<&Path>) -> Result<PathBuf> {
    use base64::Engine as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&image.data)
        .map_err(|_| anyhow!("the agent sent a screenshot that is not base64"))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(0o600);
    let (path, mut file) = match out {
        Some(path) => {
            let file = options.create(true).truncate(true).open(path);
            (path.to_path_buf(), file.with_context(|| format!("could not write {}", path.display()))?)
        }
        None => {
            let ext = image.mime.strip_prefix("image/").filter(|ext| ext.bytes().all(|b| b.is_ascii_alphanumeric()));
            let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
            let name = |n: u32| match n {
                1 => format!("screenshot-{stamp}.{}", ext.unwrap_or("img")),
                n => format!("screenshot-{stamp}-{n}.{}", ext.unwrap_or("img")),
            };
            let mut n = 1;
            loop {
                let path = PathBuf::from(name(n));
                match options.clone().create_new(true).open(&path) {
                    Ok(file) => break (path, file),
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                    Err(err) => return Err(err).with_context(|| format!("could not write {}", path.display())),
                }
            }
        }
    };
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("could not write {}", path.display()))?;
    Ok(path)
}

/// Turns `voxa call` arguments into a JSON object. A `key=value` pair takes the type `tool`
/// declares for `key` (`command=false` is the string "false"); a key the table does not declare
/// (a tool of another version, a router tool) is taken as JSON when it parses as JSON.
pub fn parse_call_args(tool: &str, args: &[String]) -> Result<serde_json::Value, ConfigError> {
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
        map.insert(key.to_owned(), typed_value(declared_type(tool, key), value));
    }
    Ok(Value::Object(map))
}

/// The type `tool` declares for its argument `key`, if it declares one.
fn declared_type(tool: &str, key: &str) -> Option<ParamType> {
    let spec = crate::tools::ToolKind::parse(tool)?.spec();
    spec.params.iter().find(|param| param.name == key).map(|param| param.kind)
}

/// `value` as the declared type; what does not parse as that type stays a string, for the tool's
/// own argument check to refuse in its words. Undeclared: numbers, booleans, objects, arrays and
/// `null` are taken as JSON, anything else is a string.
fn typed_value(kind: Option<ParamType>, value: &str) -> Value {
    let parsed = serde_json::from_str::<Value>(value).ok();
    match (kind, parsed) {
        (Some(ParamType::String), _) => Value::String(value.to_owned()),
        (Some(ParamType::Integer), Some(number @ Value::Number(_))) => number,
        (Some(ParamType::Boolean), Some(boolean @ Value::Bool(_))) => boolean,
        (Some(_), _) => Value::String(value.to_owned()),
        (None, Some(v @ (Value::Number(_) | Value::Bool(_) | Value::Object(_) | Value::Array(_) | Value::Null))) => v,
        (None, _) => Value::String(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    #[test]
    fn call_args_accept_json_or_pairs() {
        let json = parse_call_args("run_command", &args(&[r#"{"command":"ls"}"#])).unwrap();
        assert_eq!(json, serde_json::json!({"command":"ls"}));
        let pairs = parse_call_args("run_command", &args(&["command=echo hi", "timeout_ms=500", "x=true"])).unwrap();
        assert_eq!(pairs, serde_json::json!({"command":"echo hi","timeout_ms":500,"x":true}));
        assert!(parse_call_args("run_command", &args(&["oops"])).is_err());
        assert!(parse_call_args("run_command", &args(&["[1]"])).is_err());
        assert!(parse_call_args("run_command", &args(&["{bad"])).is_err());
    }

    #[test]
    fn a_pair_takes_the_type_the_tool_declares() {
        let pairs = parse_call_args("run_command", &args(&["command=false", "cwd=1", "timeout_ms=2000"])).unwrap();
        assert_eq!(pairs, serde_json::json!({"command":"false","cwd":"1","timeout_ms":2000}));
        let file = parse_call_args("write_file", &args(&["path=null", "content=[1,2]", "create_dirs=true"])).unwrap();
        assert_eq!(file, serde_json::json!({"path":"null","content":"[1,2]","create_dirs":true}));
        // Not of the declared type: left as text for the tool's own check to name.
        let wrong = parse_call_args("read_file", &args(&["path=a", "max_bytes=lots"])).unwrap();
        assert_eq!(wrong, serde_json::json!({"path":"a","max_bytes":"lots"}));
        // A tool the table does not know: JSON where it parses.
        let other = parse_call_args("fleet", &args(&["action=list", "verbose=true"])).unwrap();
        assert_eq!(other, serde_json::json!({"action":"list","verbose":true}));
    }
}
