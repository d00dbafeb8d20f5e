// @ts-check
// A streaming band-limited resampler: a Kaiser-windowed sinc low-pass evaluated in a polyphase
// table, for any pair of rates (44.1 or 48 kHz microphones to 16 kHz, 24 kHz voice to the
// device's rate). Used inside the audio worklet and testable from the page.

/** Zero crossings of the sinc on each side of a tap set: the filter's length and steepness. */
const ZERO_CROSSINGS = 20;
/** Kaiser window shape: about 80 dB of stop-band attenuation. */
const KAISER_BETA = 8;
/** Fractional positions the taps are precomputed for; the nearest one is used. */
const PHASES = 256;
/** Cut-off as a share of the lower rate's Nyquist frequency: room for the transition band. */
const CUTOFF = 0.9;

/**
 * Modified Bessel function of the first kind, order 0 (power series).
 * @param {number} x
 */
function besselI0(x) {
  let sum = 1;
  let term = 1;
  for (let k = 1; k < 50; k += 1) {
    term *= (x / (2 * k)) ** 2;
    sum += term;
    if (term < sum * 1e-12) break;
  }
  return sum;
}

export class Resampler {
  /**
   * Converts a stream at `inRate` to `outRate`; push input, pull output.
   * @param {number} inRate
   * @param {number} outRate
   */
  constructor(inRate, outRate) {
    this.inRate = inRate;
    this.outRate = outRate;
    /** Input samples per output sample. */
    this.step = inRate / outRate;
    // Cut-off in cycles per input sample, below the lower of the two Nyquist frequencies.
    const cutoff = (CUTOFF * Math.min(inRate, outRate)) / 2 / inRate;
    this.half = Math.ceil(ZERO_CROSSINGS / (2 * cutoff));
    const taps = 2 * this.half;
    this.taps = taps;
    this.table = new Float32Array(PHASES * taps);
    const norm = besselI0(KAISER_BETA);
    for (let phase = 0; phase < PHASES; phase += 1) {
      const fraction = phase / PHASES;
      let sum = 0;
      const row = phase * taps;
      for (let k = 0; k < taps; k += 1) {
        // Tap k multiplies input sample floor(p) - half + 1 + k; t is its distance from p.
        const t = k - this.half + 1 - fraction;
        const x = 2 * cutoff * t;
        const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
        const r = t / (this.half + 1);
        const window = Math.abs(r) >= 1 ? 0 : besselI0(KAISER_BETA * Math.sqrt(1 - r * r)) / norm;
        const value = sinc * window;
        this.table[row + k] = value;
        sum += value;
      }
      // Unity gain at DC for every phase, down- and up-sampling alike.
      for (let k = 0; k < taps; k += 1) this.table[row + k] /= sum;
    }
    /** Input samples: the history the next output looks back on, then what is not used yet. */
    this.buffer = new Float32Array(0);
    /** Samples held in `buffer`. */
    this.length = 0;
    /** Where the next output sample falls, in input samples from the start of `buffer`. */
    this.position = 0;
    this.reset();
  }

  /** Forgets all input (after a flush); the next output starts from silence. */
  reset() {
    this.buffer = new Float32Array(Math.max(4096, this.taps * 4));
    // The history starts as silence so the first output needs no look-back.
    this.length = this.half;
    this.position = this.half;
  }

  /**
   * Appends input samples.
   * @param {ArrayLike<number>} samples
   */
  push(samples) {
    if (this.length + samples.length > this.buffer.length) {
      // Drop what no output needs any more; grow only if that is not enough.
      const keep = Math.max(0, Math.floor(this.position) - this.half + 1);
      const used = this.length - keep;
      if (used + samples.length > this.buffer.length) {
        const next = new Float32Array((used + samples.length) * 2);
        next.set(this.buffer.subarray(keep, this.length));
        this.buffer = next;
      } else {
        this.buffer.copyWithin(0, keep, this.length);
      }
      this.length = used;
      this.position -= keep;
    }
    this.buffer.set(samples, this.length);
    this.length += samples.length;
  }

  /** Output samples that can be produced from the input so far. */
  available() {
    const last = this.length - this.half - 1;
    if (this.position > last) return 0;
    return Math.floor((last - this.position) / this.step) + 1;
  }

  /**
   * Writes up to `count` output samples into `out` from `offset`; returns how many.
   * @param {Float32Array} out
   * @param {number} [offset]
   * @param {number} [count]
   */
  pull(out, offset = 0, count = out.length - offset) {
    const n = Math.min(count, this.available());
    const { buffer, table, taps, half, step } = this;
    let position = this.position;
    for (let i = 0; i < n; i += 1) {
      const base = Math.floor(position);
      const row = Math.floor((position - base) * PHASES) * taps;
      const first = base - half + 1;
      let acc = 0;
      for (let k = 0; k < taps; k += 1) acc += buffer[first + k] * table[row + k];
      out[offset + i] = acc;
      position += step;
    }
    this.position = position;
    return n;
  }
}
