// @ts-check
// One connection to one laptop, always sealed on `/ws` (protocol 3, docs/PROTOCOL.md "Sealed
// sessions"): a Noise handshake rides in the hello, and every frame after it is a sealed binary
// frame the relay can neither read nor alter; one that does not open ends the session
// (`sealed-session-broken`). Its parts: the socket and reconnects (session/transport.js), the
// session start (session/hello.js), the sealed frames (session/sealed.js), the tool calls
// (session/calls.js) and the frames handed on as events (session/events.js). A call the relay
// hosts speaks on a socket of its own, to `/live` (voice/socket.js).
//
// A session may start *held* (a laptop the page does not know yet, app.js): it runs the handshake,
// which tells the laptop's name, then sends nothing — no `calls`, `status`, tool call or follow —
// until `admit()`. A session opened with a link's ticket waits, before either, for the laptop's
// `pairing` frame with the token (a `paired` event); every later session uses the token.

import { Outbox, labelOf } from './outbox.js';
import { parseAgentFrame, parseNotice } from './protocol.js';
import { Calls } from './session/calls.js';
import { handOn } from './session/events.js';
import { answerChallenge, importToken, paired, ticketRefusal } from './session/hello.js';
import { checkHelloOk } from './session/sealed.js';
import { BROKEN_TEXT, REFUSED_TEXT, Relays, Retry, finalClose } from './session/transport.js';
import { Wake, networkBack, networkLost } from './session/wake.js';

/**
 * @typedef {import('./protocol.js').AgentFrame} AgentFrame
 * @typedef {import('./protocol.js').ClientFrame} ClientFrame
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {import('./session/calls.js').CallFailure} CallFailure
 * @typedef {import('./session/calls.js').CallOptions} CallOptions
 * @typedef {import('./session/calls.js').RunningCall} RunningCall
 * @typedef {import('./session/calls.js').CallHandlers} CallHandlers
 * @typedef {import('./seal/channel.js').Bytes} Bytes
 */

/**
 * Where the connection stands (see `Session`).
 * @typedef {'idle' | 'connecting' | 'relay' | 'hello' | 'online' | 'offline' | 'reconnecting' | 'refused'
 *   | 'impostor' | 'replaced' | 'insecure' | 'broken'} ConnectionState
 */

/**
 * Connection states, emitted as `state` events with `{state, text, attempt, sealed}`:
 * connecting, relay (relay reachable, laptop offline), hello (laptop present, proving),
 * online, offline, reconnecting, refused (token no longer valid), impostor (wrong proof),
 * replaced (opened elsewhere), insecure (no WebCrypto), broken (a sealed frame did not open).
 * A held session that proved the laptop stays in `hello` and emits `introduced` with its hello.
 *
 * `liveRefused` says why the relay's hosted voice cannot serve this laptop (`proxy-token`,
 * `no-voice-relay`), once a call learnt it (voice/panel.js).
 */
export class Session extends EventTarget {
  /**
   * @param {Pairing} pairing
   * @param {{held?: boolean}} [options] held: prove the laptop, then send nothing until `admit()`
   */
  constructor(pairing, { held = false } = {}) {
    super();
    this.pairing = pairing;
    this.held = held;
    /** The relay refuses a socket without its token, which this link does not carry (set by `offered`). */
    this.tokenMissing = false;
    /** @type {string | null} */
    this.liveRefused = null;
    /** @type {WebSocket | null} */
    this.socket = null;
    /** What the user sent, until the laptop answered it (outbox.js). */
    this.outbox = new Outbox(pairing);
    this.calls = new Calls(pairing, this.outbox);
    this.retry = new Retry((seconds) => {
      const why = this.tokenMissing ? 'private relay: this link lacks its token (open the one voxa pair prints) — ' : 'offline — ';
      this.setState('reconnecting', `${why}reconnecting in ${seconds} s`);
    }, () => this.connect());
    this.stopped = false;
    this.final = false;
    this.online = false;
    /** @type {AgentFrame | null} */
    this.hello = null;
    /** @type {CryptoKey | null} */
    this.key = null;
    /** The hello of a session a ticket opened, until the laptop hands the token. @type {AgentFrame | null} */
    this.introducing = null;
    /** The session start in progress on the socket, if any. @type {import('./session/hello.js').SessionStart | null} */
    this.starting = null;
    /** The sealed session while it lasts (null: not sealed, or it ended). @type {import("./session/sealed.js").Sealed | null} */
    this.seal = null;
    /** The socket carried a sealed session whose agent left: until the next challenge only notices may come. */
    this.sealEnded = false;
    /** @type {ConnectionState} */
    this.state = 'idle';
    this.text = '';
    /** Bytes of every frame received and sent, for the call figures. */
    this.bytesIn = 0;
    this.bytesOut = 0;
    /** The browser's network and the page's visibility, watched while the session runs. @type {Wake | null} */
    this.wake = null;
    /** The relays the socket goes to in turn, the page's own first (and the link's early socket). */
    this.relays = new Relays(pairing);
  }

  /** Starts connecting; reconnects by itself until `stop()` or a final refusal. */
  async start() {
    // Say so at once: the previous laptop's state must not linger while the key is prepared.
    this.setState('connecting', this.pairing.kind === 'relay' ? 'connecting to the relay…' : 'connecting…');
    if (!globalThis.crypto || !crypto.subtle) {
      this.finish('insecure', 'this page needs https (or localhost) to prove who it talks to');
      return;
    }
    try {
      this.key = await importToken(this.pairing.ticket || this.pairing.token);
    } catch {
      this.finish('insecure', 'this browser cannot compute the hello proofs');
      return;
    }
    if (this.stopped) return;
    this.wake = new Wake({ lost: () => networkLost(this), back: () => networkBack(this, true), shown: () => networkBack(this, false) });
    this.connect();
  }

  /** Closes the socket for good. */
  stop() {
    this.stopped = true;
    this.retry.cancel();
    this.relays.drop();
    if (this.wake) this.wake.stop();
    this.calls.failAll({ code: 'offline', message: 'the page left this laptop' });
    if (this.seal) this.seal.end();
    if (this.socket) this.socket.close(1000, 'bye');
    this.socket = null;
  }

  /** Tries again at once (after `replaced`, or to skip a backoff wait). */
  reconnectNow() {
    if (this.stopped) return;
    this.final = false;
    this.retry.attempt = 0;
    this.retry.cancel();
    if (this.socket) this.socket.close(1000, 'reconnect');
    this.connect();
  }

  /**
   * The user added the laptop of a held session: it goes online now (at once when the laptop
   * already proved itself, else when it does).
   */
  admit() {
    if (!this.held) return;
    this.held = false;
    if (this.seal && this.hello && !this.online) this.goOnline(this.hello);
  }

  /**
   * @param {ConnectionState} state
   * @param {string} text
   */
  setState(state, text) {
    this.state = state;
    this.text = text;
    const { sealed, relays } = this;
    this.dispatchEvent(new CustomEvent('state', { detail: { state, text, attempt: this.retry.attempt, sealed, relay: relays.host } }));
  }

  /** Whether the session is sealed end to end (protocol 3) right now. */
  get sealed() {
    return this.seal !== null;
  }

  /**
   * A state nothing but the user can leave: no more reconnecting.
   * @param {ConnectionState} state
   * @param {string} text
   */
  finish(state, text) {
    this.final = true;
    this.retry.cancel();
    this.relays.drop();
    this.goOffline({ code: 'offline', message: text });
    this.setState(state, text);
    if (this.socket) this.socket.close(1000, state);
  }

  connect() {
    this.retry.cancel();
    if (this.stopped) return;
    this.setState('connecting', this.pairing.kind === 'relay' ? 'connecting to the relay…' : 'connecting…');
    let socket;
    try {
      socket = this.relays.open();
    } catch {
      this.retry.schedule();
      return;
    }
    this.socket = socket;
    socket.binaryType = 'arraybuffer';
    socket.onopen = () => {
      if (socket !== this.socket) return;
      if (this.pairing.kind === 'relay') this.setState('relay', 'relay reachable — laptop offline');
      else this.setState('hello', 'saying hello…');
      this.relays.absent(socket, () => socket === this.socket && ['relay', 'offline'].includes(this.state));
    };
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      if (typeof event.data !== 'string') this.onBinary(socket, event.data);
      else this.onText(socket, event.data);
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return;
      this.socket = null;
      this.goOffline({ code: 'offline', message: 'the connection closed' });
      if (this.stopped || this.final) return;
      const refused = ticketRefusal(event.code === 1008 && event.reason);
      const final = refused ? { state: /** @type {ConnectionState} */ ('refused'), text: refused } : finalClose(event);
      if (final) this.finish(final.state, final.text);
      else {
        this.relays.next();
        this.retry.schedule();
      }
    };
  }

  /**
   * @param {WebSocket} socket
   * @param {ArrayBuffer} data
   */
  onBinary(socket, data) {
    const at = performance.now();
    this.bytesIn += data.byteLength;
    if (this.seal) {
      this.seal.open(new Uint8Array(data), at);
    } else if (this.starting && this.starting.hold(new Uint8Array(data), at)) {
      // Opened once `hello_ok` is read.
    } else if (this.sealEnded) {
      this.breakSeal(socket);
    }
  }

  /**
   * @param {WebSocket} socket
   * @param {string} text
   */
  onText(socket, text) {
    this.bytesIn += text.length;
    const notice = parseNotice(text);
    if (notice) {
      this.onNotice(notice);
      return;
    }
    const frame = parseAgentFrame(text);
    // Sealed, nothing but the relay's notices comes in the clear; after a sealed session, the
    // next one's challenge.
    if (this.seal || (this.sealEnded && !(frame && frame.type === 'challenge'))) {
      this.breakSeal(socket);
      return;
    }
    this.sealEnded = false;
    if (frame) this.onFrame(frame).catch(() => {});
  }

  /** What the page's server offers (`/config`, perhaps after the socket opened). @param {{relay_token?: boolean}} offer */
  offered(offer) {
    this.tokenMissing = this.pairing.kind === 'relay' && !this.pairing.relayToken && offer.relay_token === true;
  }

  /**
   * The session ended. Its calls go on on the laptop (they belong to the pairing): they stay
   * pending and the next session's `calls` answer replays them. `error` is for when that will
   * not happen (the page gave the laptop up).
   * @param {CallFailure} error
   */
  goOffline(error) {
    this.online = false;
    this.introducing = null;
    if (this.starting) this.starting.abandon();
    this.starting = null;
    if (this.seal) {
      this.seal.end();
      this.sealEnded = true;
    }
    this.seal = null;
    this.calls.asked = false;
    if (this.stopped || this.final) this.calls.failAll(error);
  }

  /**
   * A sealed session heard nothing sealed for too long (`sealed-session-stalled`), or nothing
   * after a network change (`now`): it ends and a new one is started, at once when `now`.
   * @param {WebSocket} socket
   * @param {boolean} [now]
   */
  restart(socket, now = false) {
    if (socket !== this.socket) return;
    this.socket = null;
    socket.close(1000, 'sealed-session-stalled');
    this.goOffline({ code: 'offline', message: 'the laptop stopped answering' });
    this.relays.next();
    if (!now) {
      this.retry.schedule();
      return;
    }
    this.retry.attempt = 0;
    this.connect();
  }

  /**
   * A sealed session broke (a frame that did not open, or one that came unsealed): it ends at
   * once, closed `sealed-session-broken`, and nothing more of it is read or sent.
   * @param {WebSocket} socket
   */
  breakSeal(socket) {
    if (socket !== this.socket) return;
    if (this.seal) this.seal.end();
    this.seal = null;
    this.sealEnded = false;
    this.final = true;
    this.retry.cancel();
    this.goOffline({ code: 'sealed-session-broken', message: BROKEN_TEXT });
    this.setState('broken', BROKEN_TEXT);
    this.socket = null;
    // A page may close only with 1000 or 3000–4999: the reason says why (docs/PROTOCOL.md).
    socket.close(1000, 'sealed-session-broken');
  }

  /**
   * Sends one frame, sealed (`data`: JSON text, or the bytes of an audio frame with their prefix).
   * False when nothing can be sent: the page sends nothing unsealed but its hello.
   * @param {string | Bytes} data
   */
  transmit(data) {
    return this.seal !== null && this.socket !== null && this.seal.send(data);
  }

  /**
   * The relay says the laptop came or went.
   * @param {{peer: string, state: 'joined' | 'left'}} notice
   */
  onNotice(notice) {
    if (notice.peer !== 'agent') return;
    if (notice.state === 'joined') {
      this.setState('hello', 'laptop found — saying hello…');
    } else {
      this.goOffline({ code: 'offline', message: 'the laptop went offline' });
      this.setState('offline', 'laptop offline');
      const socket = this.socket;
      this.relays.absent(socket, () => socket === this.socket && this.state === 'offline');
    }
  }

  /** @param {AgentFrame} frame */
  async onFrame(frame) {
    if (frame.type === 'challenge') {
      await answerChallenge(this, frame);
    } else if (frame.type === 'hello_ok') {
      await checkHelloOk(this, frame);
    } else if (frame.type === 'error' && (frame.code === 'bearer-refused' || frame.code === 'pairing-revoked')) {
      // A refused proof, or the pairing rotated on the laptop (`voxa pair --rotate`).
      this.finish('refused', REFUSED_TEXT);
    } else if (frame.type === 'error' && ticketRefusal(frame.code)) {
      this.finish('refused', ticketRefusal(frame.code) || REFUSED_TEXT);
    } else if (frame.type === 'pairing' && this.introducing) {
      paired(this, frame.token);
    } else if (this.online) {
      // Nothing of a session that is not online (or is held) reaches the page.
      handOn(this, frame);
    }
  }

  /**
   * The session is open: calls can be made, and the laptop is asked for its calls and status.
   * @param {AgentFrame} hello
   */
  goOnline(hello) {
    this.online = true;
    performance.mark('voxa:online');
    this.setState('online', 'laptop online');
    this.dispatchEvent(new CustomEvent('hello', { detail: hello }));
    // Every (re)connect asks for the calls of this pairing: those still running, those finished
    // while no page was there, and from now on those other devices start.
    this.calls.asked = this.sendJson({ type: 'calls', seen: this.calls.seen() });
    this.sendJson({ type: 'status' });
  }

  /**
   * Runs one tool. Resolves `{result, image}`, rejects with `{code, message}`.
   * Returns `{id, done}` so the caller can cancel.
   * @param {string} name
   * @param {Record<string, unknown>} args
   * @param {CallOptions} [options]
   * @returns {RunningCall}
   */
  call(name, args, options = {}) {
    return this.calls.start(name, args, options, (frame) => this.sendJson(frame));
  }

  /**
   * Sets the handlers of a pending call (an adopted one, mostly).
   * @param {string} id
   * @param {CallHandlers} handlers
   */
  watch(id, handlers) {
    this.calls.watch(id, handlers);
  }

  /** Asks the laptop to stop every call of this pairing; false when it is not connected. */
  cancelAll() {
    return this.sendJson({ type: 'cancel_all' });
  }

  /**
   * Sends one JSON frame; false when the laptop is not connected.
   * @param {ClientFrame} frame
   */
  sendJson(frame) {
    if (!this.online) return false;
    return this.transmit(JSON.stringify(frame));
  }

  /** Sends `call_end` while the socket is open, even after the laptop left: the laptop's call ends with the page's. */
  hangUp() {
    if (!this.held) this.transmit(JSON.stringify({ type: 'call_end' }));
  }

  /**
   * Sends one binary frame (call audio); false when the laptop is not connected.
   * @param {Bytes} bytes
   */
  sendAudio(bytes) {
    return this.online && this.seal !== null && this.seal.sendAudio(bytes);
  }

  /**
   * Asks the laptop to stop a call; its result then arrives as `cancelled`.
   * @param {string} id
   */
  cancel(id) {
    if (this.calls.has(id)) this.sendOnce({ type: 'cancel', id });
  }

  /**
   * Sends a frame that acts (`approve`, `cancel`) once: under a `receipt` id, kept in the outbox
   * until the laptop answers it, sent when the session is back if it cannot be now. Its id, or
   * null when it could be neither sent nor kept.
   * @param {ClientFrame} frame
   */
  sendOnce(frame) {
    const id = `r${this.calls.idPrefix}${this.calls.nextId++}`;
    const receipted = { ...frame, receipt: id };
    const sent = this.sendJson(receipted);
    return this.outbox.add(id, receipted, labelOf(receipted), sent) || sent ? id : null;
  }
}
