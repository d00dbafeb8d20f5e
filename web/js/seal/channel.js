// @ts-check
// Sealed sessions as voxa speaks them (docs/PROTOCOL.md, "Sealed sessions (protocol 3)"): the
// pre-shared key and prologue from the pairing's token and the agent's challenge, the client's
// side of the handshake, and then every session frame as Noise transport messages, one per binary
// WebSocket frame, each starting with a kind byte (JSON, audio, or a non-final part). The channel
// keeps the session's ticks: a tick when nothing was sealed for a while, the agent's ticks
// consumed, and the end when nothing opened for too long — so a frame the relay drops, or a socket
// that died, is noticed.

import { CipherState, Handshake, MAX_NOISE_MESSAGE, TAG_LEN, concat, sha256 } from './noise.js';

/** Bytes in memory of their own (what WebCrypto takes). @typedef {Uint8Array<ArrayBuffer>} Bytes */

/** Kind byte of a JSON frame's last (or only) part. */
export const KIND_JSON = 0x00;
/** Kind byte of an audio frame's last (or only) part. */
export const KIND_AUDIO = 0x01;
/** Kind byte of a non-final part. */
export const KIND_PART = 0x02;
/** Largest body of one transport message after its kind byte: 65,535 − 16 − 1. */
export const MAX_PART = MAX_NOISE_MESSAGE - TAG_LEN - 1;
/** Largest frame once its parts are joined (the protocol's `MAX_FRAME_LEN`, 16 MiB). */
export const MAX_FRAME_LEN = 16 * 1024 * 1024;
/** A side that sealed nothing for this long sends a tick (the protocol's `TICK_INTERVAL`). */
export const TICK_INTERVAL_MS = 10_000;
/** A side that opened nothing for this long ends the session (`sealed-session-stalled`). */
export const STALL_AFTER_MS = 25_000;
/** The tick, as sealed. */
export const TICK = '{"type":"tick"}';
/** How often the clocks are looked at. */
const TICK_CHECK_MS = 500;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * A frame as opened: JSON text, or audio (the bytes after the protocol-2 audio prefix).
 * @typedef {{kind: 'json', text: string} | {kind: 'audio', data: Uint8Array}} Plain
 */

/**
 * The pre-shared key: SHA-256("voxa-psk/3\n" + token), the token as its 32 hex characters.
 * @param {string} token
 */
export function psk(token) {
  return sha256(encoder.encode(`voxa-psk/3\n${token}`));
}

/**
 * The prologue: "voxa/3\n" + the challenge's nonce exactly as sent.
 * @param {string} challenge
 */
export function prologue(challenge) {
  return encoder.encode(`voxa/3\n${challenge}`);
}

/** Why a sealed session ended: a message did not open, or did not read as a frame. */
export class Broken extends Error {}

/**
 * Whether an opened JSON frame is a tick, which the channel consumes.
 * @param {string} text
 */
export function isTick(text) {
  if (text.length > 64) return false;
  try {
    const frame = JSON.parse(text);
    return frame !== null && typeof frame === 'object' && frame.type === 'tick';
  } catch {
    return false;
  }
}

/**
 * The client's side of the handshake: message 1 for the hello, then `finish` with message 2.
 * @param {string} token
 * @param {string} challenge
 */
export async function startHello(token, challenge) {
  const handshake = await Handshake.begin({ initiator: true, psk: await psk(token), prologue: prologue(challenge) });
  const message = await handshake.writeMessage(new Uint8Array(0));
  return {
    message,
    /**
     * Reads message 2: the `hello_ok` it carries and the session's channel. Rejects when it does
     * not open (an agent without the token, or an answer to another session).
     * @param {Bytes} reply
     */
    async finish(reply) {
      const payload = await handshake.readMessage(reply);
      const { send, receive, hash } = await handshake.split();
      return { payload: decoder.decode(payload), channel: new Channel(send, receive), hash };
    },
  };
}

/**
 * Both directions of a sealed session. `seal` and `open` take nonces in the order they are
 * called, whenever WebCrypto finishes each: a caller sends the sealed messages in call order.
 */
export class Channel {
  /**
   * @param {CipherState} send
   * @param {CipherState} receive
   */
  constructor(send, receive) {
    this.send = send;
    this.receive = receive;
    /** @type {Bytes[]} */
    this.partial = [];
    this.partialLength = 0;
    /** Frames are joined in arrival order, one after the other. */
    this.inbound = Promise.resolve();
    this.broken = false;
    /** When this side last sealed a message, and last opened one of the peer's. */
    this.sentAt = Date.now();
    this.heardAt = Date.now();
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.clock = undefined;
  }

  /**
   * Keeps the session's ticks until `stop`: `send` gets a tick to send (as a JSON frame's text)
   * whenever nothing was sealed for `TICK_INTERVAL_MS`, and `stalled` is called once when nothing
   * opened for `STALL_AFTER_MS`.
   * @param {{send: (text: string) => void, stalled: () => void}} on
   */
  keepTicks(on) {
    this.stop();
    this.sentAt = Date.now();
    this.heardAt = Date.now();
    this.clock = setInterval(() => {
      const now = Date.now();
      if (now - this.heardAt >= STALL_AFTER_MS) {
        this.stop();
        on.stalled();
      } else if (now - this.sentAt >= TICK_INTERVAL_MS) {
        on.send(TICK);
      }
    }, TICK_CHECK_MS);
  }

  /** Stops the ticks: the session ended. */
  stop() {
    clearInterval(this.clock);
    this.clock = undefined;
  }

  /**
   * One frame of `kind` as the transport messages that carry it, in order (parts of at most
   * `MAX_PART` bytes).
   * @param {number} kind KIND_JSON or KIND_AUDIO
   * @param {Bytes} body
   * @returns {Promise<Bytes>[]}
   */
  seal(kind, body) {
    this.sentAt = Date.now();
    const messages = [];
    let at = 0;
    do {
      const end = Math.min(body.length, at + MAX_PART);
      const plain = new Uint8Array(end - at + 1);
      plain[0] = end < body.length ? KIND_PART : kind;
      plain.set(body.subarray(at, end), 1);
      messages.push(this.send.encrypt(new Uint8Array(0), plain));
      at = end;
    } while (at < body.length);
    return messages;
  }

  /**
   * A JSON frame, sealed.
   * @param {string} text
   */
  sealJson(text) {
    return this.seal(KIND_JSON, encoder.encode(text));
  }

  /**
   * Opens the next transport message; call it in arrival order. Resolves in that order too: a
   * whole frame, or `null` after a non-final part or a tick. Rejects with `Broken` for a message that does
   * not open (altered, replayed, reordered, after a dropped one) or read as a frame, and so does
   * every message after it.
   * @param {Bytes} message
   * @returns {Promise<Plain | null>}
   */
  open(message) {
    /** @type {Promise<Bytes>} */
    let opened;
    if (message.length < TAG_LEN || message.length > MAX_NOISE_MESSAGE) {
      opened = Promise.reject(new Broken('a sealed message of impossible length'));
    } else {
      // The nonce is taken now, in arrival order, whenever the decryption finishes.
      opened = this.receive.decrypt(new Uint8Array(0), message).catch(() => {
        throw new Broken('a frame failed to decrypt');
      });
    }
    const result = this.inbound.then(() => opened).then((plain) => this.frame(plain));
    this.inbound = result.then(() => {}, () => {
      this.broken = true;
    });
    return result;
  }

  /**
   * Joins parts; called in order (see `open`).
   * @param {Bytes} plain
   * @returns {Plain | null}
   */
  frame(plain) {
    if (this.broken) throw new Broken('a frame after a broken one');
    this.heardAt = Date.now();
    if (plain.length === 0) throw new Broken('an empty sealed message');
    const kind = plain[0];
    const body = plain.subarray(1);
    if (this.partialLength + body.length > MAX_FRAME_LEN) throw new Broken('a sealed frame larger than the frame limit');
    if (kind === KIND_PART) {
      this.partial.push(body);
      this.partialLength += body.length;
      return null;
    }
    const whole = this.partial.length ? concat(...this.partial, body) : body;
    this.partial = [];
    this.partialLength = 0;
    if (kind === KIND_AUDIO) return { kind: 'audio', data: whole };
    if (kind !== KIND_JSON) throw new Broken('a sealed message of unknown kind');
    let text;
    try {
      text = decoder.decode(whole);
    } catch {
      throw new Broken('a sealed JSON frame that is not UTF-8');
    }
    return isTick(text) ? null : { kind: 'json', text };
  }
}
