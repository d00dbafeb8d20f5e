//! Gemini Live's JSON (gemini-live.md): the messages voxa sends, and a tolerant reading of what
//! the server sends. Every server message is hostile input: anything that does not fit is dropped,
//! never trusted and never a reason to end the call.

use base64::Engine as _;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::protocol::{ToolError, TranscriptRole};
use crate::tools::ToolOutput;

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
phone. If a tool fails, say why in a few words and suggest what to try next.";

/// The `setup` message: always the first message on a connection.
pub fn setup(model: &str, voice: &str, declarations: Value, handle: Option<&str>) -> String {
    let resumption = match handle {
        Some(handle) => json!({ "handle": handle }),
        None => json!({}),
    };
    json!({
        "setup": {
            "model": model_name(model),
            "generationConfig": {
                "responseModalities": ["AUDIO"],
                "speechConfig": { "voiceConfig": { "prebuiltVoiceConfig": { "voiceName": voice } } }
            },
            "systemInstruction": { "parts": [{ "text": SYSTEM_INSTRUCTION }] },
            "tools": [{ "functionDeclarations": declarations }],
            "inputAudioTranscription": {},
            "outputAudioTranscription": {},
            "contextWindowCompression": { "slidingWindow": {} },
            "sessionResumption": resumption
        }
    })
    .to_string()
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

/// `realtimeInput.text`: what the user typed with `say`.
pub fn text(text: &str) -> String {
    json!({ "realtimeInput": { "text": text } }).to_string()
}

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
    TurnComplete,
    ToolCalls(Vec<FunctionCall>),
    ToolCancellation(Vec<String>),
    GoAway,
    /// A handle the session can be resumed with (only when the server said it is resumable).
    Resumable(String),
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawMessage {
    setup_complete: Option<IgnoredAny>,
    server_content: Option<RawContent>,
    tool_call: Option<RawToolCall>,
    tool_call_cancellation: Option<RawCancellation>,
    go_away: Option<IgnoredAny>,
    session_resumption_update: Option<RawResumption>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawContent {
    model_turn: Option<RawTurn>,
    input_transcription: Option<RawTranscription>,
    output_transcription: Option<RawTranscription>,
    interrupted: Option<bool>,
    turn_complete: Option<bool>,
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
        if content.turn_complete == Some(true) {
            events.push(ServerEvent::TurnComplete);
        }
    }
    if let Some(call) = raw.tool_call {
        let calls: Vec<FunctionCall> = call
            .function_calls
            .into_iter()
            .filter_map(|call| {
                let id = call.id.filter(|id| !id.is_empty() && id.len() <= crate::protocol::MAX_CALL_ID_LEN)?;
                let name = call.name.filter(|name| !name.is_empty() && name.len() <= 128)?;
                let args = match call.args {
                    Some(args @ Value::Object(_)) => args,
                    _ => Value::Object(Default::default()),
                };
                Some(FunctionCall { id, name, args })
            })
            .collect();
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
    if raw.go_away.is_some() {
        events.push(ServerEvent::GoAway);
    }
    Ok(events)
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
        let setup: Value = serde_json::from_str(&setup("gemini-x", "Kore", declarations.clone(), None)).unwrap();
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
        assert_eq!(setup["tools"], json!([{"functionDeclarations": declarations}]));
        let instruction = setup["systemInstruction"]["parts"][0]["text"].as_str().unwrap();
        for needle in ["confirm", "Summarise", "phone", "short"] {
            assert!(instruction.contains(needle), "instruction lacks {needle:?}");
        }

        let resumed: Value = serde_json::from_str(&setup_with_handle()).unwrap();
        assert_eq!(resumed["setup"]["sessionResumption"], json!({"handle":"h-1"}));
        assert_eq!(resumed["setup"]["model"], "models/gemini-x", "the prefix is not doubled");
    }

    fn setup_with_handle() -> String {
        setup("models/gemini-x", "Kore", json!([]), Some("h-1"))
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
                ServerEvent::TurnComplete,
            ]
        );
        assert_eq!(parse(json!({"setupComplete":{}})), vec![ServerEvent::SetupComplete]);
        assert_eq!(parse(json!({"goAway":{"timeLeft":"50s"}})), vec![ServerEvent::GoAway]);
        assert_eq!(parse(json!({"usageMetadata":{"totalTokenCount":3}})), vec![]);
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
