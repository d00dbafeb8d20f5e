// Voice calls (see docs/PROTOCOL.md, "Voice"): `call_start`, the microphone as 0x01 + PCM16LE
// 16 kHz frames, the laptop's 24 kHz voice played as it arrives, live transcripts, tool activity,
// screenshots, mute, typed `say`, and push-to-talk (`audio_end` on release).
//
// A call speaks on a *link*: any EventTarget with `sendJson(frame)`, `sendAudio(bytes)`, `online`,
// `bytesIn`/`bytesOut`, that dispatches `voice` (call frames), `audio` (binary frames) and `state`
// events: the session socket, whether it reaches a self-hosted laptop or the relay's `/live`,
// which hosts the call itself with the same frames.

import { atBottom, base64Bytes, byId, el, sentence, show } from './dom.js';

/** Prefix byte of an audio frame, both ways. */
const AUDIO_PREFIX = 0x01;
/** Length of one microphone frame (the laptop forwards 20–40 ms chunks). */
const FRAME_MS = 20;
/** Samples of each latency series kept for the figures (a bound on memory). */
const MAX_SAMPLES = 20000;
/** Transcript lines, tool lines and pictures kept on screen during one call. */
const MAX_LOG_ITEMS = 300;
/** Voice chunks awaiting the audio thread's acknowledgement, at most. */
const MAX_UNACKNOWLEDGED = 1000;
/** Page-clock readings used to map the audio clock onto it. */
const CLOCK_READINGS = 64;

// What each call_error code means, as a sentence, when the laptop hosts the call.
const CALL_ERRORS = {
  'bad-key': 'The laptop\'s Gemini API key was refused. Check GEMINI_API_KEY on the laptop.',
  'gemini-refused': 'Gemini refused the call\'s request.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the laptop asked for.',
  'gemini-unavailable': 'Gemini is busy or out of quota right now; try again in a minute.',
  'gemini-unreachable': 'The laptop cannot reach Gemini. Check its internet connection.',
  'gemini-closed': 'Gemini ended the call and it could not be resumed.',
  'busy': 'The call is not keeping up; try again in a moment.',
  'unavailable': 'This laptop does not host voice calls. Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-call': 'No call is running on the laptop.',
  'no-key': 'The laptop has no Gemini API key. Set GEMINI_API_KEY and start it with --self-hosted.',
  'mic-denied': 'The microphone is blocked. Allow it for this page in the browser\'s site settings.',
  'no-mic': 'No microphone was found.',
  'no-audio': 'This browser cannot run a voice call here (it needs https and Web Audio).',
  'offline': 'The call ended: the laptop went offline.',
  'no-voice-laptop': 'There is no voice on this laptop: it does not host calls itself. '
    + 'Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-voice-relay': 'There is no voice on this relay, and this laptop does not host calls itself. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY, or pair it through a relay that hosts voice.',
  'proxy-token': 'This relay hosts voice only for apps that send it a token, which a browser cannot do. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY to call from here.',
};

// The same codes when the relay hosts the call (at `/live`): the key and the limits are its operator's.
const RELAY_CALL_ERRORS = {
  ...CALL_ERRORS,
  'bad-key': 'The relay\'s Gemini API key was refused. Tell the relay\'s operator.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the relay asked for.',
  'gemini-unreachable': 'The relay cannot reach Gemini right now; try again in a minute.',
  'unavailable': 'The relay cannot start a call until the laptop has answered this page.',
  'no-call': 'No call is running on the relay.',
  'at-capacity': 'The relay is running as many calls as its operator allows; try again later.',
};

/** Where a call runs, as the call panel says it. */
const CALL_HOSTS = { laptop: 'on the laptop', relay: 'via the relay' };

/** A call_error (or a page-side failure) as a sentence with its code; `host` is who runs the call. */
export const callSentence = (error, host = 'laptop') =>
  sentence(error, host === 'relay' ? RELAY_CALL_ERRORS : CALL_ERRORS);

/** "1:05" for 65 s; "1:02:03" past an hour. */
function clockText(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const mm = String(Math.floor((s % 3600) / 60));
  const ss = String(s % 60).padStart(2, '0');
  return s >= 3600 ? `${Math.floor(s / 3600)}:${mm.padStart(2, '0')}:${ss}` : `${mm}:${ss}`;
}

/** Maps the audio clock (seconds) onto the page clock (ms) from readings of both. */
class ClockMap {
  constructor(context) {
    this.context = context;
    this.offsets = [];
  }

  read() {
    // currentTime is never ahead of the audio thread: the smallest offset is the closest.
    this.offsets.push(performance.now() - this.context.currentTime * 1000);
    if (this.offsets.length > CLOCK_READINGS) this.offsets.shift();
  }

  pageTime(audioSeconds) {
    return Math.min(...this.offsets) + audioSeconds * 1000;
  }
}

function record(series, value) {
  if (Number.isFinite(value) && series.length < MAX_SAMPLES) series.push(Math.max(0, value));
}

/** Figures of one call; the tests and the bench read them as `voxaVoice`. */
function freshStats() {
  return {
    state: 'idle',
    sampleRate: 0,
    framesCaptured: 0,
    framesSent: 0,
    samplesSent: 0,
    samplesReceived: 0,
    samplesPlayed: 0,
    underruns: 0,
    stops: [],
    captureToSendMs: [],
    receiveToQueueMs: [],
    firstVoiceMs: [],
    bytesSent: 0,
    bytesReceived: 0,
    seconds: 0,
    audioEnds: 0,
  };
}

/** Everything that lives only while a call runs: audio graph, microphone, timers. */
class Call {
  constructor(voice, link) {
    this.voice = voice;
    this.link = link;
    this.stats = freshStats();
    this.context = null;
    this.stream = null;
    this.capture = null;
    this.player = null;
    this.clock = null;
    this.live = false;
    this.ended = false;
    this.seq = 0;
    this.received = new Map();
    this.idleSince = null;
    this.wakeLock = null;
    this.startedAt = 0;
    this.bytesAtStart = { in: link.bytesIn, out: link.bytesOut };
  }

  /** Must run inside the tap's handler: iOS Safari starts audio only there. */
  begin() {
    const AudioContextClass = globalThis.AudioContext || globalThis.webkitAudioContext;
    if (!AudioContextClass || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      return Promise.reject({ code: 'no-audio' });
    }
    this.context = new AudioContextClass({ latencyHint: 'interactive' });
    this.context.resume().catch(() => {});
    this.clock = new ClockMap(this.context);
    this.stats.sampleRate = this.context.sampleRate;
    return this.setUp();
  }

  async setUp() {
    const context = this.context;
    if (!context.audioWorklet) throw { code: 'no-audio' };
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (error) {
      const name = error && error.name;
      throw { code: name === 'NotFoundError' || name === 'OverconstrainedError' ? 'no-mic' : 'mic-denied' };
    }
    if (this.ended) return;
    await context.audioWorklet.addModule('/js/audio-worklet.js');
    if (this.ended) return;
    this.capture = new AudioWorkletNode(context, 'voxa-capture', {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1], processorOptions: { frameMs: FRAME_MS },
    });
    this.player = new AudioWorkletNode(context, 'voxa-player', {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
    });
    this.capture.port.onmessage = (event) => this.onCaptured(event.data);
    this.player.port.onmessage = (event) => this.onPlayer(event.data);
    context.createMediaStreamSource(this.stream).connect(this.capture);
    // The capture node writes silence; connecting it keeps it pulled on every browser.
    this.capture.connect(context.destination);
    this.player.connect(context.destination);
    this.stats.state = 'starting';
    this.link.sendJson({ type: 'call_start' });
  }

  onStarted() {
    this.live = true;
    this.startedAt = performance.now();
    this.stats.state = 'live';
    performance.mark('voxa:call-started');
    this.keepAwake();
  }

  /** A microphone frame from the audio thread. */
  onCaptured(message) {
    if (message.type !== 'frame') return;
    this.clock.read();
    this.stats.framesCaptured += 1;
    this.stats.bytesSent = this.link.bytesOut - this.bytesAtStart.out;
    this.stats.bytesReceived = this.link.bytesIn - this.bytesAtStart.in;
    this.voice.showLevel(message.level);
    if (!this.live || !this.voice.sending()) return;
    const pcm = new Uint8Array(message.pcm);
    const frame = new Uint8Array(pcm.length + 1);
    frame[0] = AUDIO_PREFIX;
    // Muted in hands-free mode still streams silence, so Gemini's voice detection ends the turn.
    if (!this.voice.muted) frame.set(pcm, 1);
    if (!this.link.sendAudio(frame)) return;
    this.stats.framesSent += 1;
    this.stats.samplesSent += pcm.length / 2;
    record(this.stats.captureToSendMs, performance.now() - this.clock.pageTime(message.end));
  }

  /** A binary frame from the link: the laptop's voice. */
  onAudio(data, receivedAt) {
    const bytes = new Uint8Array(data);
    if (!this.live || !this.player || bytes.length < 3 || bytes[0] !== AUDIO_PREFIX) return;
    // PCM16LE; an odd trailing byte is not a sample.
    const pcm = bytes.slice(1, 1 + ((bytes.length - 1) & ~1));
    this.seq += 1;
    // Kept until the audio thread acknowledges the chunk; bounded should it never answer.
    if (this.received.size > MAX_UNACKNOWLEDGED) this.received.clear();
    this.received.set(this.seq, receivedAt);
    if (this.idleSince !== null || this.stats.samplesReceived === 0) this.firstChunk = receivedAt;
    this.idleSince = null;
    this.stats.samplesReceived += pcm.length / 2;
    this.player.port.postMessage({ type: 'audio', pcm: pcm.buffer, seq: this.seq }, [pcm.buffer]);
  }

  onPlayer(message) {
    if (message.type === 'queued') {
      // The audio thread's acknowledgement: an upper bound on received → queued, on one clock.
      const receivedAt = this.received.get(message.seq);
      this.received.delete(message.seq);
      if (receivedAt !== undefined) record(this.stats.receiveToQueueMs, performance.now() - receivedAt);
    } else if (message.type === 'stats') {
      const rate = this.stats.sampleRate || 48000;
      this.stats.samplesPlayed = Math.round((message.played * 24000) / rate);
      this.stats.underruns = message.underruns;
      if (!message.playing && message.buffered === 0 && this.idleSince === null) this.idleSince = performance.now();
      this.voice.showSpeaking(message.playing);
    } else if (message.type === 'started') {
      // On the page clock when the audio thread's word arrives: an upper bound by that one hop.
      if (this.firstChunk !== undefined) record(this.stats.firstVoiceMs, performance.now() - this.firstChunk);
      this.firstChunk = undefined;
    } else if (message.type === 'flushed') {
      const asked = this.flushes && this.flushes.get(message.seq);
      if (asked !== undefined) {
        this.flushes.delete(message.seq);
        // Measured on the audio clock: how much voice still played after `interrupted` arrived.
        this.stats.stops.push({ ms: (message.silentAt - asked) * 1000, droppedSamples: message.dropped });
      }
    }
  }

  /** Barge-in: playback stops at once and what was queued is dropped. */
  interrupt() {
    if (!this.player) return;
    this.flushes = this.flushes || new Map();
    this.seq += 1;
    this.flushes.set(this.seq, this.context.currentTime);
    this.player.port.postMessage({ type: 'flush', seq: this.seq });
  }

  async keepAwake() {
    if (!navigator.wakeLock || this.ended || document.visibilityState !== 'visible') return;
    try {
      this.wakeLock = await navigator.wakeLock.request('screen');
    } catch {
      this.wakeLock = null;
    }
  }

  /** Back from the background: the audio clock may have been suspended, the wake lock is gone. */
  onVisible() {
    if (this.ended) return;
    if (this.context && this.context.state !== 'running') this.context.resume().catch(() => {});
    if (this.live && !this.wakeLock) this.keepAwake();
  }

  /** Any tap resumes audio the system interrupted (a phone call, Siri on iOS). */
  onTap() {
    if (!this.ended && this.context && this.context.state !== 'running') this.context.resume().catch(() => {});
  }

  seconds() {
    return this.live ? (performance.now() - this.startedAt) / 1000 : 0;
  }

  /** Releases the microphone, the audio graph and the wake lock. */
  tearDown() {
    if (this.ended) return;
    this.ended = true;
    this.live = false;
    this.stats.seconds = this.startedAt ? (performance.now() - this.startedAt) / 1000 : 0;
    this.stats.bytesSent = this.link.bytesOut - this.bytesAtStart.out;
    this.stats.bytesReceived = this.link.bytesIn - this.bytesAtStart.in;
    this.stats.state = 'ended';
    if (this.stream) for (const track of this.stream.getTracks()) track.stop();
    if (this.capture) this.capture.port.onmessage = null;
    if (this.context) this.context.close().catch(() => {});
    if (this.wakeLock) this.wakeLock.release().catch(() => {});
    this.wakeLock = null;
  }
}

export class Voice {
  constructor(app) {
    this.app = app;
    this.link = null;
    this.call = null;
    this.last = freshStats();
    this.muted = false;
    this.talking = false;
    this.timer = null;
    this.lines = { user: null, model: null };
    this.images = [];
    this.tools = new Map();
    this.section = byId('voice');
    this.callButton = byId('call');
    this.endButton = byId('end-call');
    this.muteButton = byId('mute');
    this.panel = byId('call-panel');
    this.log = byId('call-log');
    this.pushToTalk = byId('push-to-talk');
    this.talkButton = byId('talk');
    this.callButton.addEventListener('click', () => this.start());
    this.endButton.addEventListener('click', () => this.end());
    this.muteButton.addEventListener('click', () => this.setMuted(!this.muted));
    this.pushToTalk.addEventListener('change', () => this.setPushToTalk(this.pushToTalk.checked));
    byId('say-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.say();
    });
    this.wireTalkButton();
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible' && this.call) this.call.onVisible();
    });
    for (const kind of ['touchend', 'click']) {
      document.addEventListener(kind, () => this.call && this.call.onTap(), { capture: true, passive: true });
    }
    // Figures for the tests and the bench: the running call's, else the last one's.
    Object.defineProperty(globalThis, 'voxaVoice', { get: () => (this.call ? this.call.stats : this.last) });
  }

  /** Speaks on `link` from now on (the session socket, to the laptop or to `/live`); a running call ends. */
  attach(link, offer) {
    if (this.link && this.link !== link) this.finish({ code: 'offline' });
    this.link = link;
    this.offer = offer;
    this.refresh();
    if (!link) return;
    link.addEventListener('voice', (event) => this.onFrame(event.detail));
    link.addEventListener('audio', (event) => this.call && this.call.onAudio(event.detail.data, event.detail.at));
    link.addEventListener('state', (event) => {
      if (event.detail.state !== 'online' && this.call) {
        // A call the relay hosts would outlive the laptop's session: it is ended there too.
        link.hangUp();
        this.finish({ code: 'offline' });
      }
      this.refresh();
    });
    this.refresh();
  }

  /**
   * Who hosts calls on this link: `{host: 'laptop'}` (self-hosted), `{host: 'relay'}` (`/live`),
   * or `{reason}` (a code of CALL_ERRORS) saying why there is no voice, which "Call" then shows.
   */
  setOffer(offer) {
    this.offer = offer;
    this.refresh();
  }

  /** Who runs the call: its sentences name the laptop or the relay. */
  host() {
    return (this.offer && this.offer.host) || 'laptop';
  }

  refresh() {
    const online = !!(this.link && this.link.online);
    this.section.hidden = !this.offer && !this.call;
    this.callButton.hidden = !!this.call;
    this.callButton.disabled = !online;
    this.endButton.hidden = !this.call;
    this.muteButton.hidden = !this.call;
    this.muteButton.setAttribute('aria-pressed', String(this.muted));
    this.talkButton.hidden = !this.pushToTalk.checked;
    byId('say').disabled = !(this.call && this.call.live);
    byId('say-send').disabled = !(this.call && this.call.live);
  }

  /** True while microphone frames should go out: always hands-free, only while held with push-to-talk. */
  sending() {
    return !this.pushToTalk.checked || this.talking;
  }

  start() {
    if (this.call || !this.link || !this.link.online) return;
    this.clearLog();
    if (!this.offer || !this.offer.host) {
      // No voice here: the panel says why, in a sentence.
      this.panel.hidden = false;
      this.panel.dataset.voice = 'none';
      this.setStatus('No voice calls here');
      byId('call-host').textContent = '';
      show(byId('call-error'), callSentence({ code: (this.offer && this.offer.reason) || 'no-voice-laptop' }));
      return;
    }
    delete this.panel.dataset.voice;
    // Where the call runs matters: the relay's operator can hear a call the relay hosts.
    byId('call-host').textContent = CALL_HOSTS[this.offer.host];
    show(byId('call-error'));
    this.setMuted(false);
    const call = new Call(this, this.link);
    this.call = call;
    this.panel.hidden = false;
    this.setStatus('Starting the call…');
    this.refresh();
    call.begin().catch((error) => {
      if (this.call === call) this.finish(error && error.code ? error : { code: 'no-audio' });
    });
  }

  /** "End call": the laptop closes the Gemini session; the page stops at once. */
  end() {
    if (!this.call) return;
    this.link.sendJson({ type: 'call_end' });
    this.finish();
  }

  /** Ends the call on the page, with a reason when it failed. */
  finish(error, duration) {
    const call = this.call;
    if (!call) return;
    const seconds = duration ?? call.seconds();
    call.tearDown();
    this.last = call.stats;
    this.call = null;
    this.talking = false;
    clearInterval(this.timer);
    this.timer = null;
    this.finishLines();
    byId('call-level').style.setProperty('--level', '0');
    this.setStatus(seconds > 0 ? `Call ended after ${clockText(seconds)}` : 'Call ended');
    byId('call-duration').textContent = '';
    if (error) show(byId('call-error'), callSentence(error, this.host()));
    this.refresh();
  }

  onFrame(frame) {
    const call = this.call;
    switch (frame.type) {
      case 'call_started':
        if (!call) return;
        call.onStarted();
        this.setStatus(this.pushToTalk.checked ? 'Hold to talk' : 'Listening');
        this.timer = setInterval(() => this.tick(), 1000);
        this.tick();
        this.refresh();
        return;
      case 'call_error':
        if (call) this.finish(frame);
        else show(byId('call-error'), callSentence(frame, this.host()));
        return;
      case 'call_ended':
        if (call) this.finish(null, Number(frame.duration_s) || undefined);
        return;
      case 'transcript':
        if (call) this.onTranscript(frame);
        return;
      case 'turn_complete':
        this.finishLines();
        return;
      case 'interrupted':
        if (call) call.interrupt();
        this.finishLine('model', true);
        return;
      case 'tool_activity':
        if (call) this.onToolActivity(frame);
        return;
      case 'image':
        if (call) this.onImage(frame);
        return;
      default:
    }
  }

  tick() {
    if (this.call && this.call.live) byId('call-duration').textContent = clockText(this.call.seconds());
  }

  setStatus(text) {
    byId('call-status').textContent = text;
  }

  showSpeaking(playing) {
    if (!this.call || !this.call.live) return;
    const idle = this.pushToTalk.checked ? (this.talking ? 'Listening' : 'Hold to talk') : 'Listening';
    this.setStatus(playing ? 'Speaking' : this.muted ? 'Muted' : idle);
  }

  showLevel(level) {
    const shown = this.muted || !this.sending() ? 0 : Math.min(1, level * 4);
    byId('call-level').style.setProperty('--level', shown.toFixed(2));
  }

  setMuted(muted) {
    this.muted = muted;
    this.refresh();
    this.showSpeaking(false);
  }

  setPushToTalk(on) {
    this.talking = false;
    this.refresh();
    this.showSpeaking(false);
  }

  wireTalkButton() {
    const down = (event) => {
      event.preventDefault();
      if (event.pointerId !== undefined) this.talkButton.setPointerCapture(event.pointerId);
      this.setTalking(true);
    };
    const up = () => this.setTalking(false);
    this.talkButton.addEventListener('pointerdown', down);
    this.talkButton.addEventListener('pointerup', up);
    this.talkButton.addEventListener('pointercancel', up);
    this.talkButton.addEventListener('lostpointercapture', up);
    this.talkButton.addEventListener('contextmenu', (event) => event.preventDefault());
    this.talkButton.addEventListener('keydown', (event) => {
      if ((event.key === ' ' || event.key === 'Enter') && !event.repeat) {
        event.preventDefault();
        this.setTalking(true);
      }
    });
    this.talkButton.addEventListener('keyup', (event) => {
      if (event.key === ' ' || event.key === 'Enter') this.setTalking(false);
    });
  }

  /** Push-to-talk: frames flow while held; the release ends the utterance with `audio_end`. */
  setTalking(talking) {
    if (talking === this.talking) return;
    this.talking = talking;
    this.talkButton.setAttribute('aria-pressed', String(talking));
    if (!talking && this.call && this.call.live) {
      this.link.sendJson({ type: 'audio_end' });
      this.call.stats.audioEnds += 1;
    }
    this.showSpeaking(false);
  }

  say() {
    const field = byId('say');
    const text = field.value.trim();
    if (!text || !this.call || !this.call.live) return;
    if (this.link.sendJson({ type: 'say', text })) {
      field.value = '';
      this.addLine('user', text, true, 'typed');
    }
  }

  // --- the conversation log -----------------------------------------------------------------

  clearLog() {
    for (const url of this.images) URL.revokeObjectURL(url);
    this.images = [];
    this.tools.clear();
    this.lines = { user: null, model: null };
    this.log.replaceChildren();
  }

  append(node) {
    const follow = atBottom(this.log);
    this.log.append(node);
    while (this.log.childElementCount > MAX_LOG_ITEMS) {
      const first = this.log.firstElementChild;
      const image = first.querySelector('img');
      if (image && image.src.startsWith('blob:')) URL.revokeObjectURL(image.src);
      first.remove();
    }
    if (follow) this.log.scrollTop = this.log.scrollHeight;
  }

  addLine(role, text, final, note) {
    const line = el('li', { class: `line ${role}${final ? '' : ' partial'}` },
      el('span', { class: 'who', text: role === 'user' ? 'You' : 'Laptop' }),
      el('span', { class: 'said', text }));
    if (note) line.dataset.note = note;
    this.append(line);
    return line;
  }

  /** Partials grow the speaker's current line; the final text replaces it. */
  onTranscript(frame) {
    const role = frame.role === 'user' ? 'user' : 'model';
    const text = typeof frame.text === 'string' ? frame.text : '';
    // A new user utterance closes the model's line and the other way round.
    this.finishLine(role === 'user' ? 'model' : 'user');
    let line = this.lines[role];
    if (!line) {
      line = this.addLine(role, '', false);
      this.lines[role] = line;
    }
    const said = line.querySelector('.said');
    if (frame.final) {
      said.textContent = text;
      this.finishLine(role);
    } else {
      said.textContent += text;
    }
    const follow = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 80;
    if (follow) this.log.scrollTop = this.log.scrollHeight;
  }

  finishLine(role, cut) {
    const line = this.lines[role];
    if (!line) return;
    line.classList.remove('partial');
    if (cut) line.classList.add('cut');
    if (!line.querySelector('.said').textContent) line.remove();
    this.lines[role] = null;
  }

  finishLines() {
    this.finishLine('user');
    this.finishLine('model');
  }

  onToolActivity(frame) {
    const name = typeof frame.name === 'string' ? frame.name : 'tool';
    let line = this.tools.get(frame.id);
    if (!line) {
      line = el('li', { class: 'line tool' }, el('span', { class: 'who', text: 'Tool' }), el('span', { class: 'said' }));
      this.tools.set(frame.id, line);
      this.append(line);
    }
    const said = line.querySelector('.said');
    if (frame.state === 'started') {
      said.textContent = `${name} — running…`;
      line.dataset.state = 'running';
    } else {
      const ok = frame.ok !== false;
      said.textContent = ok ? `${name} — done` : `${name} — failed`;
      line.dataset.state = ok ? 'ok' : 'failed';
      this.tools.delete(frame.id);
    }
  }

  onImage(frame) {
    if (typeof frame.data !== 'string') return;
    const mime = typeof frame.mime === 'string' && frame.mime.startsWith('image/') ? frame.mime : 'image/png';
    let url;
    try {
      url = URL.createObjectURL(new Blob([base64Bytes(frame.data)], { type: mime }));
    } catch {
      return;
    }
    this.images.push(url);
    const image = el('img', { src: url, alt: `Screenshot during the call, ${frame.width} × ${frame.height}` });
    this.append(el('li', { class: 'line picture' }, image));
  }

  reset() {
    this.finish();
    this.clearLog();
    this.panel.hidden = true;
    show(byId('call-error'));
  }
}
