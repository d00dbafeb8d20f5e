//! Gemini Live's JSON (BidiGenerateContent; see docs/GUIDE.md, "Self-hosted mode"): what voxa
//! sends, and a tolerant reading of what the server sends. Every server message is hostile input:
//! anything that does not fit is dropped, never trusted and never a reason to end the call.

use std::time::Duration;

use base64::Engine as _;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::protocol::{ToolError, TranscriptRole};
use crate::tools::{Effect, ToolKind, ToolOutput};

/// MIME type of the microphone audio voxa sends (PCM16LE mono 16 kHz).
pub const INPUT_AUDIO_MIME: &str = "audio/pcm;rate=16000";
/// Longest resumption handle kept; a longer one is ignored rather than echoed back.
pub const MAX_HANDLE_LEN: usize = 4 << 10;

/// How the model should behave when the user drives the laptop by voice.
pub const SYSTEM_INSTRUCTION: &str = "You are voxa, a voice assistant that operates the user's laptop for them while \
they talk to you from their phone. Answer in one or two short spoken sentences: plain words, no markdown, no lists, \
no code read aloud. Act through the tools: run_command for terminal commands, read_file, write_file and list_dir for \
files in the workspace, screenshot to capture the screen, coding_agent for programming work. Before anything \
destructive or hard to undo (deleting or overwriting files, force-pushing, killing processes, installing or removing \
software, sending anything off the machine) say what you are about to do and wait for the user to confirm. Summarise \
command output and file contents in a sentence (the outcome, errors, counts) instead of reading them out verbatim; \
read exact text only when asked. A screenshot is shown on the user's phone, not to you: tell the user it is on their \
phone. If a tool fails, say why in a few words and suggest what to try next. You also supervise the user's coding \
sessions: text turns starting with [voxa] are voxa telling you what happened; say them in a sentence when the user is \
not speaking. When the user asks what happened or what they missed, call brief. To pass something on to a session call \
agent_send; to stop its turn, agent_interrupt. Allow an approval only after reading it to the user and hearing their own \
clear yes to it; voxa checks their words, and when they hesitate the approval waits for a tap on their phone.";

/// Whether the model must wait for a tool: one that changes the machine ([`Effect::Changes`]), so
/// it may not talk on as if it had run. Declared `BLOCKING` on models whose calls default to
/// `NON_BLOCKING`.
pub fn is_blocking(name: &str) -> bool {
    ToolKind::parse(name).is_some_and(|kind| kind.spec().effect == Effect::Changes)
}

/// The `setup` message: always the first message on a connection. Without declarations it has no
/// `tools` at all.
pub fn setup(model: &str, voice: &str, declarations: &Value, handle: Option<&str>) -> String {
    let model = model_name(model);
    let resumption = match handle {
        Some(handle) => json!({ "handle": handle }),
        None => json!({}),
    };
    let mut setup = json!({
        "model": model,
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": { "voiceConfig": { "prebuiltVoiceConfig": { "voiceName": voice } } }
        },
        "systemInstruction": { "parts": [{ "text": SYSTEM_INSTRUCTION }] },
        "inputAudioTranscription": {},
        "outputAudioTranscription": {},
        "contextWindowCompression": { "slidingWindow": {} },
        "sessionResumption": resumption
    });
    let declarations = function_declarations(&model, declarations);
    if !declarations.is_empty() {
        setup["tools"] = json!([{ "functionDeclarations": declarations }]);
    }
    json!({ "setup": setup }).to_string()
}

/// Declarations as the service accepts them: no `parameters` for a tool that takes none, no
/// empty `properties` anywhere, `required` naming only listed properties, and `behavior:
/// BLOCKING` on the tools the model must wait for ([`is_blocking`]) where it would not by default.
pub fn function_declarations(model: &str, declarations: &Value) -> Vec<Value> {
    let blocking = calls_default_to_non_blocking(model);
    let list = declarations.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .filter_map(|declaration| {
            let mut declaration = declaration.as_object()?.clone();
            let name = declaration.get("name").and_then(Value::as_str)?.to_owned();
            match declaration.remove("parameters").and_then(fit_schema) {
                Some(parameters) => declaration.insert("parameters".into(), parameters),
                None => None,
            };
            if blocking && is_blocking(&name) {
                declaration.insert("behavior".into(), json!("BLOCKING"));
            }
            Some(Value::Object(declaration))
        })
        .collect()
}

/// A schema within the service's OpenAPI subset, or `None` for an object without properties.
fn fit_schema(schema: Value) -> Option<Value> {
    let Value::Object(mut schema) = schema else { return None };
    if let Some(items) = schema.remove("items") {
        if let Some(items) = fit_schema(items) {
            schema.insert("items".into(), items);
        }
    }
    let Some(properties) = schema.remove("properties") else {
        schema.remove("required");
        let is_object = schema.get("type").and_then(Value::as_str).is_some_and(|t| t.eq_ignore_ascii_case("object"));
        return (!is_object).then_some(Value::Object(schema));
    };
    let properties: Map<String, Value> = match properties {
        Value::Object(properties) => {
            properties.into_iter().filter_map(|(name, property)| Some((name, fit_schema(property)?))).collect()
        }
        _ => Map::new(),
    };
    if properties.is_empty() {
        return None;
    }
    let required: Vec<Value> = match schema.remove("required") {
        Some(Value::Array(names)) => {
            names.into_iter().filter(|name| name.as_str().is_some_and(|n| properties.contains_key(n))).collect()
        }
        _ => Vec::new(),
    };
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    Some(Value::Object(schema))
}

/// True for Live models whose function calls run `NON_BLOCKING` unless declared otherwise: those
/// after 3.1 (and any name voxa cannot read, to be safe: `BLOCKING` is what older models do anyway).
pub fn calls_default_to_non_blocking(model: &str) -> bool {
    let name = model.trim().trim_start_matches("models/");
    let Some(version) = name.strip_prefix("gemini-") else { return true };
    let mut numbers = version.split(['-', '.']).map(|part| part.parse::<u32>());
    match (numbers.next(), numbers.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) > (3, 1),
        (Some(Ok(major)), _) => major > 3,
        _ => true,
    }
}

/// Model names always carry the `models/` prefix.
pub fn model_name(model: &str) -> String {
    let model = model.trim();
    if model.starts_with("models/") {
        model.to_owned()
    } else {
        format!("models/{model}")
    }
}

/// `realtimeInput.audio` with the microphone's PCM (never the deprecated `mediaChunks`).
pub fn audio(pcm: &[u8]) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(pcm);
    // Base64 and the MIME type need no JSON escaping; this is the per-frame hot path.
    format!(r#"{{"realtimeInput":{{"audio":{{"mimeType":"{INPUT_AUDIO_MIME}","data":"{data}"}}}}}}"#)
}

/// `realtimeInput.text`: what the user typed with `say`, or a note from voxa to the model.
pub fn text(text: &str) -> String {
    json!({ "realtimeInput": { "text": text } }).to_string()
}

/// `realtimeInput.audioStreamEnd`: the microphone paused (push-to-talk released).
pub fn audio_stream_end() -> String {
    json!({ "realtimeInput": { "audioStreamEnd": true } }).to_string()
}

/// The note a resumed session gets for a function call it asked for on an earlier connection
/// whose answer that session never saw.
pub fn late_outcome(id: &str, name: &str, response: &Value) -> String {
    format!(
        "(voxa) The connection was renewed while your call {name} (id {id}) was pending; it has finished with \
         this result: {response}"
    )
}

/// The note a fresh session gets when the previous one could not be resumed.
pub const CONTEXT_LOST: &str = "(voxa) The voice connection was renewed and the earlier conversation could not be \
restored. If you do not know what the user was asking, ask them briefly.";

/// A `toolResponse` answering one function call.
pub fn tool_response(id: &str, name: &str, response: Value) -> String {
    json!({ "toolResponse": { "functionResponses": [{ "id": id, "name": name, "response": response }] } }).to_string()
}

/// The sentence Gemini gets instead of a screenshot's bytes.
pub fn screenshot_note(width: u32, height: u32) -> String {
    format!("The screenshot ({width}x{height}) is shown on the user's phone.")
}

/// The `response` of a function call: `{"output":…}` or `{"error":{code,message}}`. A screenshot
/// becomes a sentence: its pixels go to the phone only.
pub fn tool_result(outcome: &Result<ToolOutput, ToolError>) -> Value {
    match outcome {
        Ok(ToolOutput { image: Some(shot), .. }) => json!({
            "output": {
                "shown_on_phone": true,
                "width": shot.width,
                "height": shot.height,
                "message": screenshot_note(shot.width, shot.height),
            }
        }),
        Ok(output) => json!({ "output": output.result }),
        Err(error) => json!({ "error": { "code": error.code.as_str(), "message": error.message } }),
    }
}

/// One function call Gemini asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionCall {
    pub id: String,
    pub name: String,
    pub args: Value,
}

/// What one server message means to the bridge, in the order it should be acted on.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerEvent {
    SetupComplete,
    /// Model speech: PCM16LE mono 24 kHz.
    Audio(Vec<u8>),
    Transcript {
        speaker: TranscriptRole,
        text: String,
        is_final: bool,
    },
    Interrupted,
    /// The model finished generating this turn (its audio may still be playing).
    GenerationComplete,
    /// The turn ended; `reason` says why it produced nothing, when the service says so.
    TurnComplete {
        reason: Option<TurnReason>,
    },
    ToolCalls(Vec<FunctionCall>),
    ToolCancellation(Vec<String>),
    /// The connection closes after `time_left` (`None` when the service did not say).
    GoAway {
        time_left: Option<Duration>,
    },
    /// A handle the session can be resumed with (only when the server said it is resumable).
    Resumable(String),
    /// Token counts the service reported.
    Usage(Usage),
}

/// Why a turn ended without an answer (`turnCompleteReason`), in the service's words and ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnReason {
    /// The service's code, e.g. `MALFORMED_FUNCTION_CALL`.
    pub code: String,
    /// A sentence for the user.
    pub message: String,
}

/// `usageMetadata` token counts (a count that is not a number reads as 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_token_count: u64,
    pub response_token_count: u64,
    pub total_token_count: u64,
}

/// Longest `turnCompleteReason` code passed on.
const MAX_REASON_CODE_LEN: usize = 64;

impl TurnReason {
    /// The reason a turn produced nothing, or `None` for a turn that ended normally.
    fn from_code(code: &str) -> Option<TurnReason> {
        let message = match code {
            "" | "TURN_COMPLETE_REASON_UNSPECIFIED" | "NEED_MORE_INPUT" => return None,
            "MALFORMED_FUNCTION_CALL" => "the model made a malformed tool call and gave no answer",
            "RESPONSE_REJECTED" => "the model's answer was rejected",
            "PROHIBITED_INPUT_CONTENT" | "IMAGE_PROHIBITED_INPUT_CONTENT" => {
                "the service refused the input under its content policy"
            }
            _ => "the turn ended without an answer",
        };
        let fits = code.len() <= MAX_REASON_CODE_LEN && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
        fits.then(|| TurnReason { code: code.to_owned(), message: message.to_owned() })
    }
}

/// A protobuf JSON duration such as `"50s"` or `"1.5s"`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let seconds: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(24.0 * 3600.0)))
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawMessage {
    setup_complete: Option<IgnoredAny>,
    server_content: Option<RawContent>,
    tool_call: Option<RawToolCall>,
    tool_call_cancellation: Option<RawCancellation>,
    go_away: Option<RawGoAway>,
    session_resumption_update: Option<RawResumption>,
    usage_metadata: Option<Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawGoAway {
    time_left: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawContent {
    model_turn: Option<RawTurn>,
    input_transcription: Option<RawTranscription>,
    output_transcription: Option<RawTranscription>,
    interrupted: Option<bool>,
    generation_complete: Option<bool>,
    turn_complete: Option<bool>,
    turn_complete_reason: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawTurn {
    parts: Vec<RawPart>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawPart {
    inline_data: Option<RawBlob>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawBlob {
    mime_type: Option<String>,
    data: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawTranscription {
    text: Option<String>,
    finished: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawToolCall {
    function_calls: Vec<RawFunctionCall>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawFunctionCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<Value>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct RawCancellation {
    ids: Vec<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawResumption {
    new_handle: Option<String>,
    resumable: Option<bool>,
}

/// Reads one server message (JSON, from a binary or text frame). Parts that do not fit the
/// protocol are skipped; only a message that is not a JSON object at all is an error.
pub fn parse_server(bytes: &[u8]) -> Result<Vec<ServerEvent>, serde_json::Error> {
    // Serde reads a struct from an array too (`[{}]` would pass as `setupComplete`): objects only.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(serde::de::Error::custom("a server message must be a JSON object"));
    }
    let raw: RawMessage = serde_json::from_slice(bytes)?;
    let mut events = Vec::new();
    if raw.setup_complete.is_some() {
        events.push(ServerEvent::SetupComplete);
    }
    if let Some(content) = raw.server_content {
        content_events(content, &mut events);
    }
    if let Some(call) = raw.tool_call {
        let calls: Vec<FunctionCall> = call.function_calls.into_iter().filter_map(function_call).collect();
        if !calls.is_empty() {
            events.push(ServerEvent::ToolCalls(calls));
        }
    }
    if let Some(cancellation) = raw.tool_call_cancellation {
        if !cancellation.ids.is_empty() {
            events.push(ServerEvent::ToolCancellation(cancellation.ids));
        }
    }
    if let Some(update) = raw.session_resumption_update {
        // proto3 JSON omits `resumable:false`: only an explicit true makes a handle usable.
        if let (Some(handle), Some(true)) = (update.new_handle, update.resumable) {
            if !handle.is_empty() && handle.len() <= MAX_HANDLE_LEN {
                events.push(ServerEvent::Resumable(handle));
            }
        }
    }
    if let Some(Value::Object(usage)) = raw.usage_metadata {
        let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
        events.push(ServerEvent::Usage(Usage {
            prompt_token_count: count("promptTokenCount"),
            response_token_count: count("responseTokenCount"),
            total_token_count: count("totalTokenCount"),
        }));
    }
    if let Some(go_away) = raw.go_away {
        events.push(ServerEvent::GoAway { time_left: go_away.time_left.as_deref().and_then(parse_duration) });
    }
    Ok(events)
}

/// The events of one `serverContent`, in the order the phone must see them.
fn content_events(content: RawContent, events: &mut Vec<ServerEvent>) {
    // An interruption first: the phone flushes queued playback before anything newer.
    if content.interrupted == Some(true) {
        events.push(ServerEvent::Interrupted);
    }
    if let Some(heard) = content.input_transcription.and_then(|t| transcript(TranscriptRole::User, t)) {
        events.push(heard);
    }
    for part in content.model_turn.map(|turn| turn.parts).unwrap_or_default() {
        let Some(RawBlob { mime_type: Some(mime), data: Some(data) }) = part.inline_data else { continue };
        if !mime.starts_with("audio/pcm") {
            continue;
        }
        if let Ok(pcm) = base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) {
            if !pcm.is_empty() {
                events.push(ServerEvent::Audio(pcm));
            }
        }
    }
    if let Some(spoken) = content.output_transcription.and_then(|t| transcript(TranscriptRole::Model, t)) {
        events.push(spoken);
    }
    if content.generation_complete == Some(true) {
        events.push(ServerEvent::GenerationComplete);
    }
    if content.turn_complete == Some(true) {
        let reason = content.turn_complete_reason.as_deref().and_then(TurnReason::from_code);
        events.push(ServerEvent::TurnComplete { reason });
    }
}

/// A function call with a usable id and name; arguments that are not an object become `{}`.
fn function_call(call: RawFunctionCall) -> Option<FunctionCall> {
    let id = call.id.filter(|id| !id.is_empty() && id.len() <= crate::protocol::MAX_CALL_ID_LEN)?;
    let name = call.name.filter(|name| !name.is_empty() && name.len() <= 128)?;
    let args = match call.args {
        Some(args @ Value::Object(_)) => args,
        _ => Value::Object(Default::default()),
    };
    Some(FunctionCall { id, name, args })
}

fn transcript(speaker: TranscriptRole, raw: RawTranscription) -> Option<ServerEvent> {
    let text = raw.text.unwrap_or_default();
    let is_final = raw.finished.unwrap_or(false);
    (!text.is_empty() || is_final).then_some(ServerEvent::Transcript { speaker, text, is_final })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorCode;
    use crate::tools::Screenshot;

    fn parse(value: Value) -> Vec<ServerEvent> {
        parse_server(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn setup_has_the_shape_the_service_requires() {
        let declarations = json!([{"name":"list_dir","description":"d","parameters":{"type":"OBJECT"}}]);
        let setup: Value = serde_json::from_str(&setup("gemini-x", "Kore", &declarations, None)).unwrap();
        let object = setup.as_object().unwrap();
        assert_eq!(object.len(), 1, "exactly one top-level key");
        let setup = &setup["setup"];
        assert_eq!(setup["model"], "models/gemini-x");
        assert_eq!(setup["generationConfig"]["responseModalities"], json!(["AUDIO"]));
        assert_eq!(
            setup["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"],
            "Kore"
        );
        assert!(setup["generationConfig"].get("inputAudioTranscription").is_none());
        assert!(setup["generationConfig"].get("outputAudioTranscription").is_none());
        assert_eq!(setup["inputAudioTranscription"], json!({}));
        assert_eq!(setup["outputAudioTranscription"], json!({}));
        assert_eq!(setup["contextWindowCompression"], json!({"slidingWindow":{}}));
        assert_eq!(setup["sessionResumption"], json!({}));
        let fitted = json!([{"name":"list_dir","description":"d"}]);
        assert_eq!(setup["tools"], json!([{"functionDeclarations": fitted}]), "no parameters without properties");
        let instruction = setup["systemInstruction"]["parts"][0]["text"].as_str().unwrap();
        for needle in ["confirm", "Summarise", "phone", "short", "brief", "agent_send", "agent_interrupt", "own"] {
            assert!(instruction.contains(needle), "instruction lacks {needle:?}");
        }

        let resumed: Value = serde_json::from_str(&setup_with_handle()).unwrap();
        assert_eq!(resumed["setup"]["sessionResumption"], json!({"handle":"h-1"}));
        assert_eq!(resumed["setup"]["model"], "models/gemini-x", "the prefix is not doubled");
    }

    fn setup_with_handle() -> String {
        setup("models/gemini-x", "Kore", &json!([]), Some("h-1"))
    }

    #[test]
    fn declarations_fit_the_schema_subset_the_service_accepts() {
        let declarations = json!([
            {"name":"fleet","description":"d","parameters":{"type":"OBJECT","properties":{}}},
            {"name":"screenshot","description":"d"},
            {"name":"run_command","description":"d","parameters":{"type":"OBJECT",
                "properties":{"command":{"type":"STRING"},"opts":{"type":"OBJECT","properties":{}}},
                "required":["command","opts","ghost"]}},
            {"name":"list_dir","parameters":{"type":"OBJECT","properties":{"path":{"type":"STRING"}},"required":[]}},
            {"description":"a declaration without a name is dropped"},
            "junk"
        ]);
        let fitted = function_declarations("models/gemini-2.5-flash-native-audio-preview-12-2025", &declarations);
        assert_eq!(
            fitted,
            vec![
                json!({"name":"fleet","description":"d"}),
                json!({"name":"screenshot","description":"d"}),
                json!({"name":"run_command","description":"d","parameters":{"type":"OBJECT",
                    "properties":{"command":{"type":"STRING"}},"required":["command"]}}),
                json!({"name":"list_dir","parameters":{"type":"OBJECT","properties":{"path":{"type":"STRING"}}}}),
            ]
        );
        let none: Value = serde_json::from_str(&setup("gemini-3.8-live", "Kore", &json!([]), None)).unwrap();
        assert!(none["setup"].get("tools").is_none(), "no tools at all when none may run: {none}");
    }

    #[test]
    fn tools_that_change_the_machine_block_where_the_model_would_not_wait() {
        for model in ["models/gemini-3.8-live", "gemini-3.8-live-extended-thinking", "gemini-4-live", "future-live"] {
            assert!(calls_default_to_non_blocking(model), "{model}");
        }
        for model in ["models/gemini-2.5-flash-native-audio-preview-12-2025", "models/gemini-3.1-flash-live-preview"] {
            assert!(!calls_default_to_non_blocking(model), "{model}");
        }
        let declarations: Value = ["run_command", "read_file", "write_file", "list_dir", "screenshot", "coding_agent"]
            .iter()
            .map(|name| json!({"name": name, "description": "d"}))
            .collect();
        let behaviors = |model: &str| -> Vec<(String, Value)> {
            function_declarations(model, &declarations)
                .into_iter()
                .map(|d| (d["name"].as_str().unwrap().to_owned(), d.get("behavior").cloned().unwrap_or(Value::Null)))
                .collect()
        };
        let blocking: Vec<_> =
            behaviors("models/gemini-3.8-live").into_iter().filter(|(_, b)| b == "BLOCKING").map(|(n, _)| n).collect();
        assert_eq!(blocking, ["run_command", "write_file", "coding_agent"]);
        assert!(behaviors("models/gemini-3.1-flash-live-preview").iter().all(|(_, b)| b.is_null()));
    }

    #[test]
    fn turn_reasons_and_durations_read_as_the_service_sends_them() {
        let reason = |code: &str| parse(json!({"serverContent":{"turnComplete":true,"turnCompleteReason":code}}));
        let ServerEvent::TurnComplete { reason: Some(malformed) } = &reason("MALFORMED_FUNCTION_CALL")[0] else {
            panic!("a malformed call is a reason")
        };
        assert_eq!(malformed.code, "MALFORMED_FUNCTION_CALL");
        assert!(malformed.message.contains("malformed tool call"), "{}", malformed.message);
        for normal in ["NEED_MORE_INPUT", "TURN_COMPLETE_REASON_UNSPECIFIED"] {
            assert_eq!(reason(normal), vec![ServerEvent::TurnComplete { reason: None }], "{normal}");
        }
        assert_eq!(reason("<script>"), vec![ServerEvent::TurnComplete { reason: None }], "junk is not repeated");
        assert_eq!(
            parse(json!({"serverContent":{"generationComplete":true,"turnComplete":true}})),
            vec![ServerEvent::GenerationComplete, ServerEvent::TurnComplete { reason: None }]
        );
        assert_eq!(parse_duration("50s"), Some(Duration::from_secs(50)));
        assert_eq!(parse_duration("0.25s"), Some(Duration::from_millis(250)));
        for junk in ["", "50", "-1s", "NaNs", "infs", "s"] {
            assert_eq!(parse_duration(junk), None, "{junk:?}");
        }
        let audio_end: Value = serde_json::from_str(&audio_stream_end()).unwrap();
        assert_eq!(audio_end, json!({"realtimeInput":{"audioStreamEnd":true}}));
    }

    #[test]
    fn client_messages_use_realtime_input_and_tool_response() {
        let audio: Value = serde_json::from_str(&audio(&[1, 2, 3, 250])).unwrap();
        assert_eq!(audio, json!({"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=16000","data":"AQID+g=="}}}));
        let typed: Value = serde_json::from_str(&text("say \"hi\"\n")).unwrap();
        assert_eq!(typed, json!({"realtimeInput":{"text":"say \"hi\"\n"}}));
        let response: Value = serde_json::from_str(&tool_response("fc-1", "list_dir", json!({"output":1}))).unwrap();
        assert_eq!(
            response,
            json!({"toolResponse":{"functionResponses":[{"id":"fc-1","name":"list_dir","response":{"output":1}}]}})
        );
    }

    #[test]
    fn server_content_maps_to_audio_transcripts_and_flags_in_order() {
        let events = parse(json!({"serverContent":{
            "modelTurn":{"parts":[
                {"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAEC"}},
                {"text":"a thought"},
                {"inlineData":{"mimeType":"image/png","data":"AAEC"}},
                {"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"!!not base64!!"}}
            ]},
            "inputTranscription":{"text":"list files","finished":true},
            "outputTranscription":{"text":"Here"},
            "interrupted":true,
            "turnComplete":true
        }}));
        assert_eq!(
            events,
            vec![
                ServerEvent::Interrupted,
                ServerEvent::Transcript { speaker: TranscriptRole::User, text: "list files".into(), is_final: true },
                ServerEvent::Audio(vec![0, 1, 2]),
                ServerEvent::Transcript { speaker: TranscriptRole::Model, text: "Here".into(), is_final: false },
                ServerEvent::TurnComplete { reason: None },
            ]
        );
        assert_eq!(parse(json!({"setupComplete":{}})), vec![ServerEvent::SetupComplete]);
        assert_eq!(
            parse(json!({"goAway":{"timeLeft":"50s"}})),
            vec![ServerEvent::GoAway { time_left: Some(Duration::from_secs(50)) }]
        );
        assert_eq!(
            parse(json!({"goAway":{"timeLeft":"1.500s"}})),
            vec![ServerEvent::GoAway { time_left: Some(Duration::from_millis(1500)) }]
        );
        assert_eq!(parse(json!({"goAway":{}})), vec![ServerEvent::GoAway { time_left: None }]);
        assert_eq!(
            parse(json!({"usageMetadata":{"promptTokenCount":1,"responseTokenCount":2,"totalTokenCount":3}})),
            vec![ServerEvent::Usage(Usage { prompt_token_count: 1, response_token_count: 2, total_token_count: 3 })]
        );
    }

    #[test]
    fn tool_calls_and_cancellations_keep_their_ids() {
        let events = parse(json!({"toolCall":{"functionCalls":[
            {"id":"fc-1","name":"list_dir","args":{"path":"."}},
            {"id":"fc-2","name":"screenshot"},
            {"name":"no_id"},
            {"id":"fc-3","name":"bad_args","args":"rm -rf /"}
        ]}}));
        assert_eq!(
            events,
            vec![ServerEvent::ToolCalls(vec![
                FunctionCall { id: "fc-1".into(), name: "list_dir".into(), args: json!({"path":"."}) },
                FunctionCall { id: "fc-2".into(), name: "screenshot".into(), args: json!({}) },
                FunctionCall { id: "fc-3".into(), name: "bad_args".into(), args: json!({}) },
            ])]
        );
        let cancelled = parse(json!({"toolCallCancellation":{"ids":["fc-1","fc-2"]}}));
        assert_eq!(cancelled, vec![ServerEvent::ToolCancellation(vec!["fc-1".into(), "fc-2".into()])]);
    }

    #[test]
    fn only_resumable_handles_are_kept() {
        let update = |v: Value| parse(json!({ "sessionResumptionUpdate": v }));
        assert_eq!(update(json!({"newHandle":"h-1","resumable":true})), vec![ServerEvent::Resumable("h-1".into())]);
        assert_eq!(update(json!({"newHandle":"h-2","resumable":false})), vec![]);
        assert_eq!(update(json!({"newHandle":"h-3"})), vec![], "a missing flag means false");
        assert_eq!(update(json!({"resumable":true})), vec![]);
        assert_eq!(update(json!({"newHandle":"x".repeat(MAX_HANDLE_LEN + 1),"resumable":true})), vec![]);
    }

    #[test]
    fn hostile_messages_are_errors_or_nothing_never_panics() {
        for junk in [&b"{"[..], b"", b"null", b"[1,2]", b"\xff\xfe", b"\"text\""] {
            assert!(parse_server(junk).is_err(), "{junk:?}");
        }
        // Wrong types inside a known key make the message unreadable, not the call.
        assert!(parse_server(br#"{"serverContent":{"modelTurn":5}}"#).is_err());
        assert!(parse_server(br#"{"toolCall":{"functionCalls":"x"}}"#).is_err());
        assert_eq!(parse(json!({"unknownKey":{"a":1}})), vec![]);
        assert_eq!(parse(json!({"serverContent":{"inputTranscription":{}}})), vec![]);
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse_server(deep.as_bytes()).is_err());
        assert!(parse_server(b"[{}]").is_err(), "an array is not a setupComplete");
        let nested = format!(r#"{{"setupComplete":{}{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse_server(nested.as_bytes()).unwrap(), vec![ServerEvent::SetupComplete], "no stack overflow");
        let deep_content =
            format!(r#"{{"serverContent":{{"modelTurn":{}{}}}}}"#, "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_server(deep_content.as_bytes()).is_err());
    }

    #[test]
    fn screenshots_reach_gemini_as_a_sentence_without_bytes() {
        let shot = Screenshot { mime: "image/png".into(), width: 1280, height: 800, bytes: vec![0x89, b'P', 7, 7] };
        let output =
            ToolOutput { result: json!({"width":1280,"height":800,"mime":"image/png","bytes":4}), image: Some(shot) };
        let response = tool_result(&Ok(output));
        assert_eq!(response["output"]["message"], "The screenshot (1280x800) is shown on the user's phone.");
        assert_eq!(response["output"]["shown_on_phone"], true);
        let text = response.to_string();
        assert!(!text.contains("iVBO") && !text.contains("\"mime\""), "{text}");

        let plain = tool_result(&Ok(ToolOutput { result: json!({"entries":[]}), image: None }));
        assert_eq!(plain, json!({"output":{"entries":[]}}));
        let failed = tool_result(&Err(ToolError::new(ErrorCode::UnknownTool, "no tool named \"x\"")));
        assert_eq!(failed, json!({"error":{"code":"unknown-tool","message":"no tool named \"x\""}}));
    }
}
