//! Voice calls in the web client: real headless Chromium whose microphone is a generated WAV (a
//! 440 Hz tone, then silence), a real relay and agent on 127.0.0.1:0, and the test Gemini server
//! behind whichever hosts the call: a self-hosted laptop, or the relay at `/live` (`voxa relay
//! --gemini-key-file` and `voxa run` as processes). Both calls pass the same checks. What the
//! server hears is analysed here; what the page played and how fast it stopped are the page's own
//! audio-clock counters (`voxaVoice`).

use std::f64::consts::PI;
use std::path::Path;

use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use serde_json::{json, Value};

use voxa::hosted::{Hosting, LiveConfig};
use voxa::relay::RelayConfig;
use voxa::secret::Secret;

use crate::support::browser::{browser_with_tone, Browser, Scheme, TONE_HZ};
use crate::support::fake_gemini::{FakeGemini, FakeOptions, Kind, SetupReply, BAD_KEY_REASON};
use crate::support::harness::*;
use crate::support::phone::expect_tool_responses;
use crate::support::run::start_run_with_config;
use crate::support::{voxa_bin, RunningVoxa};

/// The laptop's Gemini key (self-hosted mode).
const KEY: &str = "AIzaSy-web-voice-test-key";
/// The relay operator's Gemini key (hosted voice at `/live`).
const RELAY_KEY: &str = "AIzaSy-web-voice-relay-key";
/// Rate of what the page must send, and of what Gemini sends back.
const MIC_RATE: f64 = 16000.0;
const VOICE_RATE: usize = 24000;

/// Amplitude of `freq` in `samples` (Goertzel), relative to full scale 1.0.
fn goertzel(samples: &[f64], freq: f64, rate: f64) -> f64 {
    let coeff = 2.0 * (2.0 * PI * freq / rate).cos();
    let (mut s1, mut s2) = (0.0, 0.0);
    for &x in samples {
        let s = x + coeff * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    (s1 * s1 + s2 * s2 - coeff * s1 * s2).max(0.0).sqrt() * 2.0 / samples.len() as f64
}

/// The strongest frequency between 60 Hz and 7.9 kHz: a 10 Hz scan, then 0.5 Hz around its peak.
fn dominant_frequency(samples: &[f64], rate: f64) -> f64 {
    let strongest = |from: f64, to: f64, step: f64| {
        let mut best = (from, 0.0);
        let mut freq = from;
        while freq <= to {
            let amplitude = goertzel(samples, freq, rate);
            if amplitude > best.1 {
                best = (freq, amplitude);
            }
            freq += step;
        }
        best.0
    };
    let coarse = strongest(60.0, 7900.0, 10.0);
    strongest(coarse - 10.0, coarse + 10.0, 0.5)
}

fn pcm16(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(2).map(|pair| i16::from_le_bytes([pair[0], pair[1]]) as f64 / 32768.0).collect()
}

fn rms(samples: &[f64]) -> f64 {
    (samples.iter().map(|x| x * x).sum::<f64>() / samples.len().max(1) as f64).sqrt()
}

/// `seconds` of a `freq` sine at 24 kHz as PCM16LE, the way Gemini's voice arrives.
fn voice_pcm(freq: f64, seconds: f64) -> Vec<u8> {
    let samples = (VOICE_RATE as f64 * seconds) as usize;
    (0..samples)
        .flat_map(|n| (((0.3 * (2.0 * PI * freq * n as f64 / VOICE_RATE as f64).sin()) * 32767.0) as i16).to_le_bytes())
        .collect()
}

/// Sends `pcm` to `conn` as model audio in 40 ms chunks.
fn send_voice(fake: &FakeGemini, conn: usize, pcm: &[u8]) {
    for chunk in pcm.chunks(VOICE_RATE / 25 * 2) {
        fake.send(conn, FakeGemini::model_audio(chunk));
    }
}

async fn stat(browser: &Browser, name: &str) -> Value {
    browser.script(&format!("return voxaVoice.{name};"), vec![]).await
}

/// Who hosts the call in a scene, and the processes behind it.
enum Backend {
    /// An in-process relay (itself hosting voice, with [`RELAY_KEY`]) and a self-hosted agent.
    SelfHosted { relay: TestRelay, agent: TestAgent },
    /// `voxa relay --gemini-key-file` and `voxa run` in hosted mode, as processes.
    Hosted { relay: RunningVoxa, agent: RunningVoxa, home: tempfile::TempDir, workspace: tempfile::TempDir },
}

/// A relay, an agent, the test Gemini server behind whichever hosts voice, and Chromium on the
/// pairing link, online.
struct CallScene {
    backend: Backend,
    browser: Browser,
    _scratch: tempfile::TempDir,
}

/// `voxa relay` with a key file holding [`RELAY_KEY`], its Gemini being `fake`; waits until it listens.
fn hosting_relay(fake: &FakeGemini, dir: &Path) -> RunningVoxa {
    use std::os::unix::fs::PermissionsExt;
    let key_file = dir.join("gemini.key");
    std::fs::write(&key_file, format!("{RELAY_KEY}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = std::process::Command::new(voxa_bin());
    // The relay keeps its daily budget in its home: this test's, not the user's.
    cmd.env("VOXA_GEMINI_URL", fake.url()).env("VOXA_HOME", dir.join("relay-home"));
    for name in ["VOXA_RELAY_TOKEN", "VOXA_PROXY_TOKEN", "GEMINI_API_KEY"] {
        cmd.env_remove(name);
    }
    cmd.args(["relay", "--json", "--listen", "127.0.0.1:0", "--open-live", "--gemini-key-file"]).arg(&key_file);
    let mut relay = RunningVoxa::spawn(cmd);
    let listening = relay.wait_event("relay_listening");
    assert_eq!(listening["live"], true, "{listening}");
    relay.port = listening["listen"].as_str().unwrap().parse::<std::net::SocketAddr>().unwrap().port();
    relay
}

impl CallScene {
    /// A self-hosted laptop behind a relay that also hosts voice: the laptop's own session wins.
    async fn self_hosted(fake: &FakeGemini, scheme: Scheme) -> Option<CallScene> {
        let scratch = tempfile::tempdir().unwrap();
        let browser = browser_with_tone(&scratch, scheme).await?;
        let live = Some(LiveConfig::new(fake.config(RELAY_KEY)));
        let relay =
            TestRelay::with_config(RelayConfig { service: live.map(Hosting::service), ..Default::default() }).await;
        let config = fake.config(KEY);
        let agent = TestAgent::start_with(Some(relay.url()), |options| options.gemini = Some(config)).await;
        let link = format!("http://{}/?code={}&token={}", relay.addr, agent.code(), agent.token());
        browser.pair(&link).await;
        browser.wait_connection("online").await;
        Some(CallScene { backend: Backend::SelfHosted { relay, agent }, browser, _scratch: scratch })
    }

    /// A laptop in hosted mode (`voxa run`, no key) behind `voxa relay` hosting voice with its key.
    async fn hosted(fake: &FakeGemini, scheme: Scheme) -> Option<CallScene> {
        let scratch = tempfile::tempdir().unwrap();
        let browser = browser_with_tone(&scratch, scheme).await?;
        let relay = hosting_relay(fake, scratch.path());
        // The call's commands run without a tap (`[policy.hosted] trust`): this is the call itself.
        let (mut agent, _, (home, workspace)) = start_run_with_config(
            &["--relay", &relay.relay_url()],
            "[policy.hosted]\ntrust = [\"@read\", \"@exec\"]\n",
        );
        let link = agent.wait_event("pairing")["url"].as_str().unwrap().to_owned();
        browser.pair(&link).await;
        browser.wait_connection("online").await;
        Some(CallScene { backend: Backend::Hosted { relay, agent, home, workspace }, browser, _scratch: scratch })
    }

    /// The key Gemini must see: the laptop's when it hosts, else the relay operator's.
    fn gemini_key(&self) -> &'static str {
        match self.backend {
            Backend::SelfHosted { .. } => KEY,
            Backend::Hosted { .. } => RELAY_KEY,
        }
    }

    /// Who the page names when a call fails.
    fn host_word(&self) -> &'static str {
        match self.backend {
            Backend::SelfHosted { .. } => "laptop",
            Backend::Hosted { .. } => "relay",
        }
    }

    fn workspace(&self) -> &Path {
        match &self.backend {
            Backend::SelfHosted { agent, .. } => agent.workspace.path(),
            Backend::Hosted { workspace, .. } => workspace.path(),
        }
    }

    /// Presses "Call" and answers the Gemini `setup` it causes; returns the connection.
    async fn call(&self, fake: &mut FakeGemini) -> usize {
        self.browser.press("Call").await;
        let (conn, _) = fake.expect_setup().await;
        assert_eq!(connected_key(fake, conn).as_deref(), Some(self.gemini_key()), "the wrong side hosts the call");
        fake.complete_setup(conn);
        self.browser.control("button", "End call").await;
        self.browser.wait_script("the call to start", "return voxaVoice.state === 'live';").await;
        let shown = self.browser.wait_text("#call-host", "where the call runs", |t| !t.is_empty()).await;
        let said =
            if self.host_word() == "relay" { "the relay runs the model and hears this call" } else { "on the laptop" };
        assert_eq!(shown, said);
        // Whoever hosts the call, the page's session stays sealed beside it.
        assert_eq!(crate::support::sealed::seal_mark(&self.browser).await, "sealed");
        conn
    }

    async fn close(self) {
        self.browser.close().await;
        match self.backend {
            Backend::SelfHosted { relay, agent } => {
                agent.agent.stop().await;
                relay.kill().await;
            }
            Backend::Hosted { relay, agent, home: _home, workspace: _workspace } => {
                agent.stop();
                relay.stop();
            }
        }
    }
}

/// The `x-goog-api-key` Gemini connection `conn` came with.
fn connected_key(fake: &FakeGemini, conn: usize) -> Option<String> {
    fake.received().into_iter().find_map(|event| match event.kind {
        Kind::Connected { key } if event.conn == conn => key,
        _ => None,
    })
}

/// Collects microphone audio `conn` sent until there is `seconds` of it.
async fn microphone_audio(fake: &mut FakeGemini, conn: usize, seconds: f64) -> Vec<u8> {
    let mut pcm = Vec::new();
    while (pcm.len() as f64) < seconds * MIC_RATE * 2.0 {
        let (mime, chunk) = fake.expect_audio(conn).await;
        assert_eq!(mime, "audio/pcm;rate=16000");
        // 20–40 ms frames of PCM16.
        assert!((640..=1280).contains(&chunk.len()) && chunk.len() % 2 == 0, "a {} byte frame", chunk.len());
        pcm.extend_from_slice(&chunk);
    }
    pcm
}

/// The first `call_start` is refused (Gemini closes 1007 for the key): the page says so as a
/// sentence naming whose key it was, and is ready to call again.
async fn a_refused_key_is_a_sentence(scene: &CallScene, fake: &mut FakeGemini) {
    scene.browser.press("Call").await;
    let (refused, _) = fake.expect_setup().await;
    fake.close(refused, 1007, BAD_KEY_REASON);
    let said = scene.browser.wait_text("#call-error", "the refusal", |t| !t.is_empty()).await;
    let whose = if scene.host_word() == "relay" { "The relay's" } else { "The laptop's" };
    assert!(said.starts_with(&format!("{whose} Gemini API key was refused.")) && said.ends_with("(bad-key)"), "{said}");
}

/// The microphone reached Gemini as 16 kHz PCM16 whose strongest frequency is the WAV's tone, not silence.
async fn the_microphone_is_heard(fake: &mut FakeGemini, conn: usize) {
    let heard = pcm16(&microphone_audio(fake, conn, 3.0).await);
    let loudest = heard
        .chunks(MIC_RATE as usize / 2)
        .filter(|window| window.len() == MIC_RATE as usize / 2)
        .max_by(|a, b| rms(a).total_cmp(&rms(b)))
        .unwrap();
    assert!(rms(loudest) > 0.02, "the microphone reached the server as silence (rms {})", rms(loudest));
    let dominant = dominant_frequency(loudest, MIC_RATE);
    assert!((dominant - TONE_HZ).abs() <= TONE_HZ * 0.02, "dominant frequency {dominant} Hz, not {TONE_HZ} Hz");
}

/// Transcripts: partials grow a line, the final text replaces it, in the order spoken.
async fn transcripts_appear(browser: &Browser, fake: &FakeGemini, conn: usize) {
    fake.send(conn, json!({"serverContent": {"inputTranscription": {"text": "what is"}}}));
    browser.wait_text("#call-log .user.partial", "the partial transcript", |t| t.contains("what is")).await;
    fake.send(conn, json!({"serverContent": {"inputTranscription": {"text": " on my screen"}}}));
    fake.send(conn, json!({"serverContent": {"outputTranscription": {"text": "Let me look."}}}));
    fake.send(conn, json!({"serverContent": {"turnComplete": true}}));
    let log = browser
        .wait_text("#call-log", "the final transcripts", |t| {
            t.contains("what is on my screen") && t.contains("Let me look.")
        })
        .await;
    assert!(log.find("what is on my screen").unwrap() < log.find("Let me look.").unwrap(), "{log}");
    assert_eq!(browser.script("return document.querySelectorAll('#call-log .partial').length;", vec![]).await, 0);
}

/// The model's voice is played: the page's count of samples played is within 5 % of what was
/// sent. Returns the count and the bytes sent.
async fn the_voice_is_played(browser: &Browser, fake: &FakeGemini, conn: usize) -> (f64, usize) {
    let voice = voice_pcm(330.0, 1.0);
    let sent = (voice.len() / 2) as f64;
    send_voice(fake, conn, &voice);
    browser.wait_script("all the voice to arrive", &format!("return voxaVoice.samplesReceived === {sent};")).await;
    browser.wait_script("the voice to play", &format!("return voxaVoice.samplesPlayed >= {};", sent * 0.95)).await;
    browser
        .wait_script("playback to go idle", "return document.getElementById('call-status').textContent !== 'Speaking';")
        .await;
    let played = stat(browser, "samplesPlayed").await.as_f64().unwrap();
    assert!((played - sent).abs() <= sent * 0.05, "played {played} of {sent} samples");
    (played, voice.len())
}

/// Barge-in: `interrupted` stops a long answer at once; the rest is dropped, not played. Returns
/// the bytes of voice sent.
async fn interrupted_stops_playback(browser: &Browser, fake: &FakeGemini, conn: usize, played: f64) -> usize {
    let long = voice_pcm(330.0, 10.0);
    send_voice(fake, conn, &long);
    browser
        .wait_script("the long answer to play", &format!("return voxaVoice.samplesPlayed >= {};", played + 7200.0))
        .await;
    fake.send(conn, json!({"serverContent": {"interrupted": true}}));
    browser.wait_script("playback to stop", "return voxaVoice.stops.length === 1;").await;
    let stop = stat(browser, "stops[0]").await;
    let stop_ms = stop["ms"].as_f64().unwrap();
    assert!(stop_ms <= 50.0, "playback went on for {stop_ms} ms of audio after `interrupted`");
    assert!(stop["droppedSamples"].as_f64().unwrap() > 0.0, "{stop}");
    let after = stat(browser, "samplesPlayed").await.as_f64().unwrap();
    assert!(after < played + (long.len() / 2) as f64 / 2.0, "the interrupted answer kept playing: {after}");
    long.len()
}

/// Gemini's function call runs on the laptop and the page shows the tool's activity; then typed
/// text reaches Gemini. The laptop hosting the call runs a command (its file appears in the
/// workspace, Gemini gets the result); a call the relay hosts goes through the page's sealed
/// session and reads a file there (a tool of risk `read`, which `[policy] hosted` lets run).
async fn a_tool_runs_on_the_laptop_and_typing_reaches_gemini(scene: &CallScene, fake: &mut FakeGemini, conn: usize) {
    let browser = &scene.browser;
    if scene.host_word() == "relay" {
        std::fs::write(scene.workspace().join("for-gemini.txt"), "read-through-the-page-2c9d").unwrap();
        let read = json!({"path": "for-gemini.txt"});
        fake.send(conn, json!({"toolCall": {"functionCalls": [{"id": "t1", "name": "read_file", "args": read}]}}));
        browser.wait_text("#call-log .tool", "the tool's end", |t| t.contains("read_file — done")).await;
        let response = expect_tool_responses(fake, 1).await.remove(0);
        assert_eq!(response["id"], "t1", "{response}");
        assert!(response.to_string().contains("read-through-the-page-2c9d"), "{response}");
    } else {
        let command = json!({"command": "echo from-gemini > gemini.txt && echo written"});
        fake.send(conn, json!({"toolCall": {"functionCalls": [{"id": "t1", "name": "run_command", "args": command}]}}));
        browser.wait_text("#call-log .tool", "the tool's end", |t| t.contains("run_command — done")).await;
        let response = expect_tool_responses(fake, 1).await.remove(0);
        assert_eq!(response["id"], "t1", "{response}");
        assert_eq!(response["response"]["output"]["exit_code"], 0, "{response}");
        assert_eq!(std::fs::read_to_string(scene.workspace().join("gemini.txt")).unwrap(), "from-gemini\n");
    }
    browser.type_into("Say", "typed during the call").await;
    browser.press("Send").await;
    fake.wait_for("the typed text", |e| e.conn == conn && e.kind == Kind::Text("typed during the call".into())).await;
}

/// "End call" closes the Gemini socket and the page is ready for the next call.
async fn end_call_closes_gemini(browser: &Browser, fake: &mut FakeGemini, conn: usize) {
    browser.press("End call").await;
    fake.expect_closed(conn).await;
    browser.wait_text("#call-status", "the end", |t| t.starts_with("Call ended")).await;
    browser.control("button", "Call").await;
}

/// Everything the issue asks of a call, whoever hosts it: a refused key said as a sentence, then
/// a call whose microphone Gemini hears, whose transcripts appear, whose voice is played and
/// stopped by `interrupted`, whose tool runs on the laptop, and which "End call" ends.
async fn a_whole_call(scene: &CallScene, fake: &mut FakeGemini) {
    let browser = &scene.browser;
    a_refused_key_is_a_sentence(scene, fake).await;
    let conn = scene.call(fake).await;
    the_microphone_is_heard(fake, conn).await;
    transcripts_appear(browser, fake, conn).await;
    let (played, voice_bytes) = the_voice_is_played(browser, fake, conn).await;
    let long_bytes = interrupted_stops_playback(browser, fake, conn, played).await;
    a_tool_runs_on_the_laptop_and_typing_reaches_gemini(scene, fake, conn).await;
    end_call_closes_gemini(browser, fake, conn).await;
    assert!(stat(browser, "bytesSent").await.as_f64().unwrap() > 3.0 * MIC_RATE * 2.0);
    assert!(stat(browser, "bytesReceived").await.as_f64().unwrap() > (voice_bytes + long_bytes) as f64 / 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_the_browser_carries_the_microphone_both_ways_and_ends() {
    let mut fake = FakeGemini::start(FakeOptions { setup_reply: SetupReply::Hold, ..FakeOptions::new(KEY) }).await;
    let Some(scene) = CallScene::self_hosted(&fake, Scheme::Light).await else { return };
    let browser = &scene.browser;
    a_whole_call(&scene, &mut fake).await;
    // Push-to-talk: nothing goes out until the button is held; the release is `audioStreamEnd`.
    browser.client.find(fantoccini::Locator::Id("push-to-talk")).await.unwrap().click().await.unwrap();
    let conn = scene.call(&mut fake).await;
    // Ten frames captured while the button is not held: none of them went out.
    let captured = |more: u64| format!("return voxaVoice.framesCaptured >= {more};");
    browser.wait_script("frames captured", &captured(10)).await;
    assert_eq!(stat(browser, "framesSent").await, 0);
    assert!(!fake.received().iter().any(|e| e.conn == conn && matches!(e.kind, Kind::Audio { .. })));
    let talk = browser.control("button", "Hold to talk").await;
    let press = MouseActions::new("finger".into())
        .then(PointerAction::MoveToElement { element: talk.clone(), duration: None, x: 0.0, y: 0.0 })
        .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT });
    browser.client.perform_actions(press).await.unwrap();
    microphone_audio(&mut fake, conn, 0.2).await;
    let release = MouseActions::new("finger".into()).then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
    browser.client.perform_actions(release).await.unwrap();
    let is_end = |e: &crate::support::fake_gemini::Event| e.conn == conn && e.kind == Kind::AudioStreamEnd;
    fake.wait_for("audioStreamEnd", is_end).await;
    // Ten more frames captured after the release: none of them went out either.
    let sent = stat(browser, "framesSent").await.as_u64().unwrap();
    let now = stat(browser, "framesCaptured").await.as_u64().unwrap();
    browser.wait_script("frames captured", &captured(now + 10)).await;
    assert_eq!(stat(browser, "framesSent").await.as_u64().unwrap(), sent);
    assert_eq!(stat(browser, "audioEnds").await, 1);
    let events = fake.received();
    let end = events.iter().position(is_end).unwrap();
    assert!(
        !events[end..].iter().any(|e| e.conn == conn && matches!(e.kind, Kind::Audio { .. })),
        "audio after the release"
    );
    browser.press("End call").await;
    fake.expect_closed(conn).await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_relay_hosts_carries_the_microphone_both_ways_and_ends() {
    let options = FakeOptions { setup_reply: SetupReply::Hold, ..FakeOptions::new(RELAY_KEY) };
    let mut fake = FakeGemini::start(options).await;
    let Some(scene) = CallScene::hosted(&fake, Scheme::Light).await else { return };
    let browser = &scene.browser;
    a_whole_call(&scene, &mut fake).await;
    browser.press("Status").await;
    browser.wait_text("#facts", "who hosts voice", |t| t.contains("Voice\nhosted by the relay")).await;

    // `voxa status` on the laptop shows one session while a call the relay hosts runs: the page's
    // sealed one. The call socket is the relay's, no session of the pairing.
    let Backend::Hosted { home, .. } = &scene.backend else { unreachable!() };
    let home = home.path().join("voxa");
    let status = || {
        let home = home.clone();
        async move {
            let out = tokio::task::spawn_blocking(move || crate::support::voxa(&home, &["status"])).await.unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let sealed_line = connected_line("relay", "sealed", "voxa-web/1 since");
    let conn = scene.call(&mut fake).await;
    let during = status().await;
    assert!(during.contains(&sealed_line) && !during.contains("hosted-call"), "{during}");
    assert!(during.contains(" sealed, 0 plain"), "{during}");
    end_call_closes_gemini(browser, &mut fake, conn).await;
    scene.close().await;
}

/// A line of `voxa status`'s connected list, as it starts: `via`, `seal`, then the client.
fn connected_line(via: &str, seal: &str, client: &str) -> String {
    format!("  {via:<8} {seal:<9} {client}")
}

/// Opens the pairing link of a hosted-mode agent on `relay` and presses "Call"; returns the sentence.
async fn call_refusal(browser: &Browser, relay: &TestRelay) -> String {
    let agent = TestAgent::start(Some(relay.url())).await;
    browser.pair(&format!("http://{}/?code={}&token={}", relay.addr, agent.code(), agent.token())).await;
    browser.wait_connection("online").await;
    browser.press("Call").await;
    let said = browser.wait_text("#call-error", "the sentence", |t| !t.is_empty()).await;
    browser.control("button", "Call").await;
    agent.agent.stop().await;
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_says_why_when_there_is_no_voice_and_hosted_refusals_are_sentences() {
    let fake = FakeGemini::start(FakeOptions::new(RELAY_KEY)).await;
    let scratch = tempfile::tempdir().unwrap();
    let Some(browser) = browser_with_tone(&scratch, Scheme::Light).await else { return };

    let capped = LiveConfig { max_calls: 0, ..LiveConfig::new(fake.config(RELAY_KEY)) };
    let token = Some(Secret::from_string("proxy-token-web".into()));
    let gated = LiveConfig { proxy_token: token, ..LiveConfig::new(fake.config(RELAY_KEY)) };
    let none_left =
        std::sync::Arc::new(voxa::hosted::budget::Budget::open(Some(std::time::Duration::ZERO), None).unwrap());
    let spent = LiveConfig { budget: none_left, ..LiveConfig::new(fake.config(RELAY_KEY)) };
    for (live, sentence, code) in [
        // A relay without a key, a laptop without one: no voice, and the page says so.
        (None, "There is no voice on this relay", "no-voice-relay"),
        // A relay at its operator's limit.
        (Some(capped), "The relay is running as many calls as its operator allows", "at-capacity"),
        // A relay whose operator's minutes for the day are spent.
        (Some(spent), "The relay's voice minutes for today are spent", "budget-spent"),
        // A relay whose voice needs a proxy token a browser cannot send: the page works through
        // `/ws` and says why there is no voice.
        (Some(gated), "This relay hosts voice only for apps that send it a token", "proxy-token"),
    ] {
        let relay =
            TestRelay::with_config(RelayConfig { service: live.map(Hosting::service), ..Default::default() }).await;
        let said = call_refusal(&browser, &relay).await;
        assert!(said.starts_with(sentence) && said.ends_with(&format!("({code})")), "{said}");
        relay.kill().await;
    }

    assert!(fake.received().is_empty(), "no Gemini session was opened: {:?}", fake.received());
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_taken_during_a_call_is_shown_in_the_conversation() {
    let Some(xvfb) = crate::support::xvfb::Xvfb::start("320x200x24") else { return };
    let mut fake = FakeGemini::start(FakeOptions { setup_reply: SetupReply::Hold, ..FakeOptions::new(KEY) }).await;
    let Some(scene) = CallScene::self_hosted(&fake, Scheme::Light).await else { return };
    let browser = &scene.browser;
    let conn = scene.call(&mut fake).await;
    let call = json!({"id": "shot-1", "name": "screenshot", "args": {"display": xvfb.display}});
    fake.send(conn, json!({"toolCall": {"functionCalls": [call]}}));
    browser.control("image", "Screenshot during the call, 320 × 200").await;
    browser
        .wait_script(
            "the picture to load",
            "const i = document.querySelector('#call-log img'); return i.complete && i.naturalWidth === 320;",
        )
        .await;
    browser.wait_text("#call-log .tool", "the tool's end", |t| t.contains("screenshot — done")).await;
    browser.press("End call").await;
    fake.expect_closed(conn).await;
    scene.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resampler_keeps_the_band_and_removes_what_would_alias() {
    let Some(browser) = Browser::start().await else { return };
    let relay = TestRelay::start().await;
    browser.open(&format!("http://{}/", relay.addr)).await;
    // Each case: input rate, output rate, tone; the page resamples one second of it.
    let run = r#"
        const [inRate, outRate, freq, done] = arguments;
        import('/js/voice/resampler.js').then(({ Resampler }) => {
          const resampler = new Resampler(inRate, outRate);
          const out = [];
          const buffer = new Float32Array(512);
          let t = 0;
          for (let q = 0; q < Math.ceil(inRate / 128); q += 1) {
            const block = new Float32Array(128);
            for (let i = 0; i < 128; i += 1, t += 1) block[i] = 0.5 * Math.sin(2 * Math.PI * freq * t / inRate);
            resampler.push(block);
            let n;
            while ((n = resampler.pull(buffer)) > 0) for (let i = 0; i < n; i += 1) out.push(buffer[i]);
          }
          done(out);
        });
    "#;
    for (in_rate, out_rate, freq, passes) in [
        (48000.0_f64, 16000.0_f64, 440.0_f64, true),
        (44100.0, 16000.0, 440.0, true),
        (44100.0, 16000.0, 3000.0, true),
        // Above 8 kHz: dropping samples would fold these to 6 and 7 kHz at full strength.
        (48000.0, 16000.0, 10000.0, false),
        (44100.0, 16000.0, 9000.0, false),
        (24000.0, 48000.0, 3000.0, true),
        (24000.0, 44100.0, 440.0, true),
    ] {
        let value =
            browser.client.execute_async(run, vec![json!(in_rate), json!(out_rate), json!(freq)]).await.unwrap();
        let out: Vec<f64> = value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let expected = out_rate * (in_rate / 128.0).ceil() * 128.0 / in_rate;
        assert!((out.len() as f64 - expected).abs() < 0.01 * expected, "{in_rate}→{out_rate}: {} samples", out.len());
        let steady = &out[out.len() / 10..];
        if passes {
            let amplitude = goertzel(steady, freq, out_rate);
            assert!((amplitude - 0.5).abs() < 0.01, "{in_rate}→{out_rate}: {freq} Hz came out at {amplitude}");
            assert!((dominant_frequency(steady, out_rate) - freq).abs() < 1.0);
        } else {
            let folded = (out_rate - freq).abs();
            assert!(rms(steady) < 0.5e-3, "{in_rate}→{out_rate}: {freq} Hz left rms {}", rms(steady));
            assert!(goertzel(steady, folded, out_rate) < 1e-3, "{freq} Hz aliased to {folded} Hz");
        }
    }
    browser.close().await;
    relay.kill().await;
}

/// Pictures of a call at 390×844, light and dark, and one the relay hosts: transcripts, a tool,
/// the controls. Written to `docs/` when `VOXA_DOCS_SCREENSHOTS` is set, else to a temporary
/// directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pictures_of_a_call_at_phone_size() {
    let scratch = tempfile::tempdir().unwrap();
    let out = match std::env::var_os("VOXA_DOCS_SCREENSHOTS") {
        Some(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("docs"),
        None => scratch.path().to_owned(),
    };
    for (scheme, name, hosted) in [
        (Scheme::Light, "web-call.png", false),
        (Scheme::Dark, "web-call-dark.png", false),
        (Scheme::Light, "web-call-hosted.png", true),
    ] {
        let key = if hosted { RELAY_KEY } else { KEY };
        let mut fake = FakeGemini::start(FakeOptions { setup_reply: SetupReply::Hold, ..FakeOptions::new(key) }).await;
        let scene = match hosted {
            true => CallScene::hosted(&fake, scheme).await,
            false => CallScene::self_hosted(&fake, scheme).await,
        };
        let Some(scene) = scene else { return };
        let browser = &scene.browser;
        let conn = scene.call(&mut fake).await;
        for message in [
            json!({"serverContent": {"inputTranscription": {"text": "How much space is left on the disk?"}}}),
            json!({"serverContent": {"turnComplete": true}}),
            json!({"toolCall": {"functionCalls": [{"id": "t1", "name": "run_command", "args": {"command": "df -h ."}}]}}),
        ] {
            fake.send(conn, message);
        }
        browser.wait_text("#call-log .tool", "the tool's end", |t| t.contains("done")).await;
        fake.send(conn, json!({"serverContent": {"outputTranscription": {"text": "About 120 gigabytes are free on the main disk."}}}));
        fake.send(conn, json!({"serverContent": {"turnComplete": true}}));
        fake.send(conn, json!({"serverContent": {"inputTranscription": {"text": "Thanks, and what"}}}));
        browser.wait_text("#call-log .user.partial", "the partial", |t| t.contains("what")).await;
        browser.wait_script("the clock", "return document.getElementById('call-duration').textContent !== '';").await;
        let png = browser.screenshot().await;
        std::fs::write(out.join(name), png).unwrap();
        browser.press("End call").await;
        fake.expect_closed(conn).await;
        scene.close().await;
    }
}
