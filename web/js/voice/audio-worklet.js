// @ts-check
// Audio thread of a voice call (an AudioWorklet module): the microphone is downmixed to mono,
// resampled to 16 kHz and cut into PCM16 frames; the laptop's 24 kHz voice plays through a
// small jitter buffer that fades at every gap, so no chunk boundary or barge-in clicks.

import { Resampler } from './resampler.js';

/** Rate of the microphone audio sent to the laptop. */
const MIC_RATE = 16000;
/** Rate of the voice the laptop sends. */
const VOICE_RATE = 24000;
/** Playback starts once this much voice is buffered, or the oldest of it waited this long. */
const JITTER_SECONDS = 0.06;
/** Voice held at most; the oldest goes first beyond it (a bound on memory, not a delay). */
const MAX_QUEUED_SECONDS = 120;
/** Length of the fade applied where playback stops or starts mid-signal. */
const FADE_SAMPLES = 96;
/** Render quanta between two stats messages (about 43 ms at 48 kHz). */
const STATS_EVERY = 16;

class Capture extends AudioWorkletProcessor {
  /** @param {{processorOptions?: {frameMs?: number}}} options */
  constructor(options) {
    super();
    const frameMs = (options.processorOptions && options.processorOptions.frameMs) || 20;
    this.frame = new Int16Array(Math.round((MIC_RATE * frameMs) / 1000));
    this.filled = 0;
    this.energy = 0;
    this.resampler = new Resampler(sampleRate, MIC_RATE);
    this.mono = new Float32Array(128);
    this.out = new Float32Array(256);
  }

  /** @param {Float32Array[][]} inputs */
  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const length = channels[0].length;
    if (this.mono.length !== length) this.mono = new Float32Array(length);
    const mono = this.mono;
    // Downmix: the mean of every channel.
    mono.set(channels[0]);
    for (let c = 1; c < channels.length; c += 1) {
      const channel = channels[c];
      for (let i = 0; i < length; i += 1) mono[i] += channel[i];
    }
    if (channels.length > 1) for (let i = 0; i < length; i += 1) mono[i] /= channels.length;
    this.resampler.push(mono);
    let produced;
    while ((produced = this.resampler.pull(this.out)) > 0) {
      for (let i = 0; i < produced; i += 1) {
        const sample = Math.max(-1, Math.min(1, this.out[i]));
        this.energy += sample * sample;
        this.frame[this.filled] = sample < 0 ? sample * 0x8000 : sample * 0x7fff;
        this.filled += 1;
        if (this.filled === this.frame.length) this.emit(length);
      }
    }
    return true;
  }

  /** @param {number} quantum samples of the quantum that completed the frame */
  emit(quantum) {
    const pcm = this.frame;
    const length = pcm.length;
    const level = Math.sqrt(this.energy / length);
    // `end` is the audio clock at the end of the quantum that completed the frame.
    this.port.postMessage({ type: 'frame', pcm: pcm.buffer, level, end: currentTime + quantum / sampleRate },
      [pcm.buffer]);
    // The buffer went to the page; the next frame gets its own.
    this.frame = new Int16Array(length);
    this.filled = 0;
    this.energy = 0;
  }
}

class Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.resampler = new Resampler(VOICE_RATE, sampleRate);
    /** Voice waiting to be played, at 24 kHz. @type {Float32Array[]} */
    this.chunks = [];
    this.queued = 0;
    this.firstArrival = 0;
    this.playing = false;
    this.fadeIn = 0;
    /** The sequence number of a flush asked for and not done yet. @type {number | null} */
    this.flushAt = null;
    this.played = 0;
    this.received = 0;
    this.dropped = 0;
    this.underruns = 0;
    this.quanta = 0;
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  /** @param {{type: string, pcm?: ArrayBuffer, seq: number}} message */
  onMessage(message) {
    if (message.type === 'audio' && message.pcm) {
      const pcm = new Int16Array(message.pcm);
      const samples = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i += 1) samples[i] = pcm[i] / 0x8000;
      if (this.chunks.length === 0 && !this.playing) this.firstArrival = currentTime;
      this.chunks.push(samples);
      this.queued += samples.length;
      this.received += samples.length;
      for (let oldest = this.chunks[0]; this.queued > MAX_QUEUED_SECONDS * VOICE_RATE && this.chunks.length > 1;
        oldest = this.chunks[0]) {
        this.chunks.shift();
        this.queued -= oldest.length;
        this.dropped += oldest.length;
      }
      this.port.postMessage({ type: 'queued', seq: message.seq, at: currentTime });
    } else if (message.type === 'flush') {
      this.flushAt = message.seq;
    }
  }

  /** Output that can be produced at once from what is queued, in device samples. */
  bufferedOutput() {
    return this.resampler.available() + Math.floor((this.queued * sampleRate) / VOICE_RATE);
  }

  /**
   * Fills `out` from the queue as far as it goes; returns how many samples were real voice.
   * @param {Float32Array} out
   */
  fill(out) {
    let written = 0;
    while (written < out.length) {
      written += this.resampler.pull(out, written, out.length - written);
      if (written === out.length) break;
      const chunk = this.chunks.shift();
      if (!chunk) break;
      this.queued -= chunk.length;
      this.resampler.push(chunk);
    }
    return written;
  }

  /**
   * @param {Float32Array[][]} _inputs
   * @param {Float32Array[][]} outputs
   */
  process(_inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    if (this.flushAt !== null) {
      this.stop(out);
    } else if (this.playing || this.shouldStart()) {
      if (!this.playing) this.port.postMessage({ type: 'started', at: currentTime });
      this.playing = true;
      const real = this.fill(out);
      if (this.fadeIn > 0) {
        for (let i = 0; i < real && this.fadeIn > 0; i += 1, this.fadeIn -= 1) {
          out[i] *= 1 - this.fadeIn / FADE_SAMPLES;
        }
      }
      if (real < out.length) {
        // Ran dry mid-signal: fade what there is, then wait for the buffer to fill again.
        fadeOut(out, real);
        this.playing = false;
        this.fadeIn = FADE_SAMPLES;
        this.underruns += 1;
        if (this.chunks.length === 0) this.firstArrival = currentTime;
      }
      this.played += real;
    }
    this.quanta += 1;
    if (this.quanta % STATS_EVERY === 0) this.report();
    return true;
  }

  shouldStart() {
    if (this.bufferedOutput() === 0) return false;
    return this.bufferedOutput() >= JITTER_SECONDS * sampleRate
      || currentTime - this.firstArrival >= JITTER_SECONDS;
  }

  /**
   * Barge-in: this quantum fades to silence and everything queued is dropped.
   * @param {Float32Array} out
   */
  stop(out) {
    const seq = this.flushAt;
    this.flushAt = null;
    let real = 0;
    if (this.playing) {
      real = this.fill(out);
      fadeOut(out, real);
      this.played += real;
    }
    const dropped = this.queued + Math.round((this.resampler.available() * VOICE_RATE) / sampleRate);
    this.chunks = [];
    this.queued = 0;
    this.resampler.reset();
    this.playing = false;
    this.fadeIn = FADE_SAMPLES;
    // Silent from the end of this quantum on.
    this.port.postMessage({ type: 'flushed', seq, silentAt: currentTime + out.length / sampleRate, dropped });
    this.report();
  }

  report() {
    this.port.postMessage({
      type: 'stats',
      played: this.played,
      received: this.received,
      buffered: this.bufferedOutput(),
      playing: this.playing,
      underruns: this.underruns,
      dropped: this.dropped,
    });
  }
}

/**
 * Fades the first `length` samples of `out` to zero at their end.
 * @param {Float32Array} out
 * @param {number} length
 */
function fadeOut(out, length) {
  const span = Math.min(FADE_SAMPLES, length);
  for (let i = 0; i < span; i += 1) out[length - span + i] *= 1 - (i + 1) / span;
}

registerProcessor('voxa-capture', Capture);
registerProcessor('voxa-player', Player);
