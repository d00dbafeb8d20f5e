// @ts-check
// One voice call's audio (see docs/PROTOCOL.md, "Voice"): the microphone through the capture
// worklet as 0x01 + PCM16LE 16 kHz frames, the laptop's 24 kHz voice through the player worklet,
// the wake lock, and the figures of the call (`voxaVoice`, read by the tests and the bench).

import { AUDIO_PREFIX } from '../protocol.js';

/**
 * What a call needs of the panel that shows it.
 * @typedef {object} Speaker
 * @property {boolean} muted
 * @property {() => boolean} sending whether microphone frames go out now
 * @property {(level: number) => void} showLevel
 * @property {(playing: boolean) => void} showSpeaking
 */

/** Length of one microphone frame (the laptop forwards 20–40 ms chunks). */
const FRAME_MS = 20;
/** Samples of each latency series kept for the figures (a bound on memory). */
const MAX_SAMPLES = 20000;
/** Voice chunks awaiting the audio thread's acknowledgement, at most. */
const MAX_UNACKNOWLEDGED = 1000;
/** Page-clock readings used to map the audio clock onto it. */
const CLOCK_READINGS = 64;

/** Maps the audio clock (seconds) onto the page clock (ms) from readings of both. */
class ClockMap {
  /** @param {AudioContext} context */
  constructor(context) {
    this.context = context;
    /** @type {number[]} */
    this.offsets = [];
  }

  read() {
    // currentTime is never ahead of the audio thread: the smallest offset is the closest.
    this.offsets.push(performance.now() - this.context.currentTime * 1000);
    if (this.offsets.length > CLOCK_READINGS) this.offsets.shift();
  }

  /** @param {number} audioSeconds */
  pageTime(audioSeconds) {
    return Math.min(...this.offsets) + audioSeconds * 1000;
  }
}

/**
 * @param {number[]} series
 * @param {number} value
 */
function record(series, value) {
  if (Number.isFinite(value) && series.length < MAX_SAMPLES) series.push(Math.max(0, value));
}

/**
 * Figures of one call; the tests and the bench read them as `voxaVoice`.
 * @typedef {ReturnType<typeof freshStats>} CallStats
 */
export function freshStats() {
  return {
    state: 'idle',
    sampleRate: 0,
    framesCaptured: 0,
    framesSent: 0,
    samplesSent: 0,
    samplesReceived: 0,
    samplesPlayed: 0,
    underruns: 0,
    /** @type {{ms: number, droppedSamples: number}[]} */
    stops: [],
    /** @type {number[]} */
    captureToSendMs: [],
    /** @type {number[]} */
    receiveToQueueMs: [],
    /** @type {number[]} */
    firstVoiceMs: [],
    /** When each sent microphone frame left the audio thread (its last sample), in Unix ms. @type {number[]} */
    sentAt: [],
    /** When the audio thread queued each voice chunk (its word back), in Unix ms. @type {number[]} */
    queuedAt: [],
    bytesSent: 0,
    bytesReceived: 0,
    seconds: 0,
    audioEnds: 0,
  };
}

/** Everything that lives only while a call runs: audio graph, microphone, timers. */
export class Call {
  /**
   * @param {Speaker} voice the panel the call reports to
   * @param {import('../session.js').Session | import('./socket.js').CallSocket} link the socket the
   *   call speaks on: the sealed session (the laptop hosts the call), or the call socket (the relay does)
   */
  constructor(voice, link) {
    this.voice = voice;
    this.link = link;
    this.stats = freshStats();
    /** @type {AudioContext | null} */
    this.context = null;
    /** @type {MediaStream | null} */
    this.stream = null;
    /** @type {AudioWorkletNode | null} */
    this.capture = null;
    /** @type {AudioWorkletNode | null} */
    this.player = null;
    /** @type {ClockMap | null} */
    this.clock = null;
    this.live = false;
    this.ended = false;
    this.seq = 0;
    /** Page time each voice chunk arrived, by sequence number, until the audio thread queues it. @type {Map<number, number>} */
    this.received = new Map();
    /** @type {Map<number, number> | undefined} */
    this.flushes = undefined;
    /** @type {number | null} */
    this.idleSince = null;
    /** @type {number | undefined} */
    this.firstChunk = undefined;
    /** @type {WakeLockSentinel | null} */
    this.wakeLock = null;
    this.startedAt = 0;
    this.bytesAtStart = { in: link.bytesIn, out: link.bytesOut };
  }

  /**
   * Must run inside the tap's handler: iOS Safari starts audio only there. `call_start` goes out
   * once the microphone is ready and `ready` (the link opening) resolved.
   * @param {Promise<void>} [ready]
   */
  begin(ready = Promise.resolve()) {
    // A refusal of the link after the call already failed here is nobody's news.
    ready.catch(() => {});
    /** @type {typeof AudioContext | undefined} */
    const AudioContextClass = globalThis.AudioContext || /** @type {any} */ (globalThis).webkitAudioContext;
    if (!AudioContextClass || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      return Promise.reject({ code: 'no-audio' });
    }
    const context = new AudioContextClass({ latencyHint: 'interactive' });
    this.context = context;
    context.resume().catch(() => {});
    this.clock = new ClockMap(context);
    this.stats.sampleRate = context.sampleRate;
    // When both fail, the link's refusal says more than the microphone's: it is the one reported.
    const audio = this.setUp(context).catch((error) => ready.then(() => Promise.reject(error)));
    return Promise.all([audio, ready]).then(() => {
      if (this.ended) return;
      this.stats.state = 'starting';
      this.link.sendJson({ type: 'call_start' });
    });
  }

  /** @param {AudioContext} context */
  async setUp(context) {
    if (!context.audioWorklet) throw { code: 'no-audio' };
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (error) {
      const name = error instanceof Error || error instanceof DOMException ? error.name : '';
      throw { code: name === 'NotFoundError' || name === 'OverconstrainedError' ? 'no-mic' : 'mic-denied' };
    }
    if (this.ended) {
      // The call ended while the microphone was being opened: it is released at once.
      for (const track of this.stream.getTracks()) track.stop();
      return;
    }
    await context.audioWorklet.addModule('/js/voice/audio-worklet.js');
    if (this.ended) return;
    const capture = new AudioWorkletNode(context, 'voxa-capture', {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1], processorOptions: { frameMs: FRAME_MS },
    });
    const player = new AudioWorkletNode(context, 'voxa-player', {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
    });
    this.capture = capture;
    this.player = player;
    capture.port.onmessage = (event) => this.onCaptured(event.data);
    player.port.onmessage = (event) => this.onPlayer(event.data);
    context.createMediaStreamSource(this.stream).connect(capture);
    // The capture node writes silence; connecting it keeps it pulled on every browser.
    capture.connect(context.destination);
    player.connect(context.destination);
  }

  onStarted() {
    this.live = true;
    this.startedAt = performance.now();
    this.stats.state = 'live';
    performance.mark('voxa:call-started');
    this.keepAwake();
  }

  /**
   * A microphone frame from the audio thread.
   * @param {{type: string, pcm: ArrayBuffer, level: number, end: number}} message
   */
  onCaptured(message) {
    const clock = this.clock;
    if (message.type !== 'frame' || !clock) return;
    clock.read();
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
    record(this.stats.captureToSendMs, performance.now() - clock.pageTime(message.end));
    record(this.stats.sentAt, performance.timeOrigin + clock.pageTime(message.end));
  }

  /**
   * A binary frame from the link: the laptop's voice.
   * @param {ArrayBuffer} data
   * @param {number} receivedAt page time it arrived
   */
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

  /**
   * A report of the player on the audio thread.
   * @param {Record<string, any>} message
   */
  onPlayer(message) {
    if (message.type === 'queued') {
      // The audio thread's acknowledgement: an upper bound on received → queued, on one clock.
      const receivedAt = this.received.get(message.seq);
      this.received.delete(message.seq);
      if (receivedAt !== undefined) record(this.stats.receiveToQueueMs, performance.now() - receivedAt);
      record(this.stats.queuedAt, performance.timeOrigin + performance.now());
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
      const flushes = this.flushes;
      const asked = flushes && flushes.get(message.seq);
      if (flushes && asked !== undefined) {
        flushes.delete(message.seq);
        // Measured on the audio clock: how much voice still played after `interrupted` arrived.
        this.stats.stops.push({ ms: (message.silentAt - asked) * 1000, droppedSamples: message.dropped });
      }
    }
  }

  /** Barge-in: playback stops at once and what was queued is dropped. */
  interrupt() {
    if (!this.player || !this.context) return;
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

