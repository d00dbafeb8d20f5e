// @ts-check
// A sealed session on its socket (docs/PROTOCOL.md, "Frames of a sealed session"): every frame
// out is sealed and sent in the order it was given, every message in is opened in arrival order,
// and the first one that does not open breaks the session. What the frames say is the session's
// business (session.js); this only carries them.

import { AUDIO_PREFIX, parseAgentFrame } from '../protocol.js';
import { KIND_AUDIO } from '../seal/channel.js';
import { introduce } from './hello.js';

/**
 * @typedef {import('../seal/channel.js').Channel} Channel
 * @typedef {import('../seal/channel.js').Bytes} Bytes
 * @typedef {{text: (text: string) => void, audio: (data: ArrayBuffer, at: number) => void, broken: () => void,
 *   sent: (bytes: number) => void}} Receiver
 */

/** Bytes queued on the socket beyond which microphone frames are dropped (about 1.5 s of audio). */
const MAX_BUFFERED_AUDIO = 48 * 1024;

/**
 * The laptop's `hello_ok`: checked, it opens the sealed session, and the session goes online (or,
 * held, waits for the user to add the laptop).
 * @param {import('../session.js').Session} session
 * @param {import('../protocol.js').AgentFrame} frame
 */
export async function checkHelloOk(session, frame) {
  const starting = session.starting;
  if (!starting || starting.socket !== session.socket) return;
  const checked = await starting.check(frame);
  if (checked === undefined || starting !== session.starting) return;
  session.starting = null;
  if (!checked) {
    session.finish('impostor', 'this is not your laptop — it could not prove it holds the pairing');
    return;
  }
  session.seal = sealSession(session, starting.socket, checked);
  session.retry.attempt = 0;
  introduce(session, checked.hello);
}

/**
 * The sealed session a checked `hello_ok` opened on `socket`: its frames go to `session`, the
 * messages that came early are opened, and it ticks (seal/channel.js): a dropped frame or a dead
 * socket ends it, a stall starts a new one.
 * @param {import('../session.js').Session} session
 * @param {WebSocket} socket
 * @param {{channel: Channel, early: {message: Bytes, at: number}[]}} checked
 */
function sealSession(session, socket, checked) {
  const seal = new Sealed(socket, checked.channel, {
    text: (text) => {
      const inner = parseAgentFrame(text);
      // The session has started: a hello inside it means nothing.
      if (inner && inner.type !== 'challenge' && inner.type !== 'hello_ok') session.onFrame(inner).catch(() => {});
    },
    audio: (data, at) => {
      if (session.online) session.dispatchEvent(new CustomEvent('audio', { detail: { data, at } }));
    },
    broken: () => session.breakSeal(socket),
    sent: (bytes) => { session.bytesOut += bytes; },
  });
  for (const { message, at } of checked.early) seal.open(message, at);
  checked.channel.keepTicks({ send: (text) => session.transmit(text), stalled: () => session.restart(socket) });
  return seal;
}

export class Sealed {
  /**
   * @param {WebSocket} socket
   * @param {Channel} channel the keys the handshake gave
   * @param {Receiver} receiver where opened frames go, and who hears that the seal broke
   */
  constructor(socket, channel, receiver) {
    this.socket = socket;
    this.channel = channel;
    this.receiver = receiver;
    /** Sealed messages go out one after the other, in the order their frames were given. */
    this.outbound = Promise.resolve();
    /** Bytes handed to the seal and not yet on the socket. */
    this.queued = 0;
    /** Set once the session ended: nothing more is read or sent. */
    this.ended = false;
  }

  /** Ends the session here: what is still being opened or sealed is dropped. */
  end() {
    this.channel.stop();
    this.ended = true;
    this.queued = 0;
  }

  /**
   * Opens one sealed message and hands its frame on, in arrival order.
   * @param {Bytes} message
   * @param {number} at when it arrived
   */
  open(message, at) {
    this.channel.open(message).then((plain) => {
      if (this.ended || !plain) return;
      if (plain.kind === 'audio') {
        const data = new Uint8Array(plain.data.length + 1);
        data[0] = AUDIO_PREFIX;
        data.set(plain.data, 1);
        this.receiver.audio(data.buffer, at);
      } else {
        this.receiver.text(plain.text);
      }
    }, () => this.breaks());
  }

  /**
   * Seals and sends one frame (JSON text, or audio bytes with their prefix); false when the
   * socket cannot take it.
   * @param {string | Bytes} data
   */
  send(data) {
    const socket = this.socket;
    if (this.ended || socket.readyState !== WebSocket.OPEN) return false;
    let sealed;
    try {
      sealed = typeof data === 'string' ? this.channel.sealJson(data) : this.channel.seal(KIND_AUDIO, data.subarray(1));
    } catch {
      this.breaks();
      return false;
    }
    const size = typeof data === 'string' ? data.length : data.byteLength;
    this.queued += size;
    this.outbound = this.outbound.then(async () => {
      for (const message of sealed) {
        const bytes = await message;
        if (this.ended || socket.readyState !== WebSocket.OPEN) return;
        this.receiver.sent(bytes.byteLength);
        socket.send(bytes);
      }
    }).catch(() => this.breaks()).finally(() => {
      if (!this.ended) this.queued = Math.max(0, this.queued - size);
    });
    return true;
  }

  /**
   * Sends one microphone frame (its prefix first); false when it was dropped: a slow uplink drops
   * them instead of queueing seconds of stale audio.
   * @param {Bytes} bytes
   */
  sendAudio(bytes) {
    if (bytes[0] !== AUDIO_PREFIX || this.socket.bufferedAmount + this.queued > MAX_BUFFERED_AUDIO) return false;
    return this.send(bytes);
  }

  breaks() {
    if (this.ended) return;
    this.end();
    this.receiver.broken();
  }
}
