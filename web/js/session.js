// @ts-check
// One connection to one laptop: the socket, presence, the hello, tool calls matched by id, and
// reconnecting with backoff. On `/ws` (a relay's phone socket, or the loopback port) the session
// is sealed (protocol 3, docs/PROTOCOL.md "Sealed sessions"): a Noise handshake rides in the hello
// and every frame after it, both ways, is a sealed binary frame the relay can neither read nor
// alter. A frame that does not open ends the session (`sealed-session-broken`).
//
// The session is always `/ws`, sealed, whoever hosts voice. A call the relay hosts speaks on a
// second socket of its own, to the relay's `/live`, only while it runs (voice/socket.js).

import { AUDIO_PREFIX, PROTOCOL, SEALED_PROTOCOL, parseAgentFrame, parseNotice } from './protocol.js';
import { KIND_AUDIO, startHello } from './seal/channel.js';
import { fromBase64, toBase64 } from './seal/noise.js';

/**
 * @typedef {import('./protocol.js').AgentFrame} AgentFrame
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {{code: string, message: string}} CallFailure
 * @typedef {{result: Record<string, any>, image: AgentFrame | undefined}} CallOutcome
 * @typedef {{id: string, done: Promise<CallOutcome>}} RunningCall
 * @typedef {{env?: string, onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void,
 *   id?: string, caller?: string}} CallOptions `id` and `caller`: a call carried for the relay's model (voice/socket.js)
 * @typedef {{resolve: (outcome: CallOutcome) => void, reject: (error: CallFailure) => void,
 *   onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void, image?: AgentFrame,
 *   onReplay?: () => void}} Pending
 * @typedef {{id: string, name: string, args?: Record<string, unknown>, env?: string, started: number}} CallEntry
 * @typedef {{entry: CallEntry, finished: boolean, call: RunningCall}} AdoptedCall
 */

/**
 * Where the connection stands (see `Session`).
 * @typedef {'idle' | 'connecting' | 'relay' | 'hello' | 'online' | 'offline' | 'reconnecting' | 'refused'
 *   | 'impostor' | 'replaced' | 'insecure' | 'broken'} ConnectionState
 * @typedef {import('./seal/channel.js').Channel} Channel
 * @typedef {import('./seal/channel.js').Bytes} Bytes
 * @typedef {Awaited<ReturnType<typeof startHello>>} SealedHello
 */

export const CLIENT = 'voxa-web/1';
/** First reconnect delay ceiling and largest delay (exponential backoff with full jitter). */
const BACKOFF_BASE_MS = 1000;
const BACKOFF_CAP_MS = 30000;
/** Shortest wait between two attempts, so a failing relay is never hammered. */
const BACKOFF_FLOOR_MS = 250;

/** Bytes queued on the socket beyond which microphone frames are dropped (about 1.5 s of audio). */
const MAX_BUFFERED_AUDIO = 48 * 1024;
/** Frames of a voice call, handed to whoever speaks on the socket (voice/panel.js, voice/socket.js). */
export const VOICE_FRAMES = new Set(['call_started', 'call_error', 'call_ended', 'transcript', 'turn_complete',
  'interrupted', 'tool_activity', 'narrate']);

const encoder = new TextEncoder();
const BROKEN_TEXT = 'the relay altered this session, so it was closed and nothing in it ran — Reconnect to start a new one';

/** Finished calls this tab remembers having shown, so a reconnect does not show them again. */
const SEEN_MAX = 64;

/** @param {number} bytes */
export function randomHex(bytes) {
  const buf = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(buf, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The auth token as an HMAC-SHA256 key.
 * @param {string} token
 */
export function importToken(token) {
  return crypto.subtle.importKey('raw', encoder.encode(token), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
}

/**
 * One direction's hello proof, lowercase hex (see docs/PROTOCOL.md).
 * @param {CryptoKey} key
 * @param {'client' | 'agent'} direction
 * @param {string} agentNonce
 * @param {string} clientNonce
 */
export async function helloProof(key, direction, agentNonce, clientNonce) {
  const message = `voxa-hello/2 ${direction}\n${agentNonce}\n${clientNonce}`;
  const mac = await crypto.subtle.sign('HMAC', key, encoder.encode(message));
  return Array.from(new Uint8Array(mac), (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Compares two strings in time that does not depend on where they differ.
 * @param {unknown} a
 * @param {unknown} b
 */
export function sameText(a, b) {
  if (typeof a !== 'string' || typeof b !== 'string' || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i += 1) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Connection states, emitted as `state` events with `{state, text}`:
 * connecting, relay (relay reachable, laptop offline), hello (laptop present, proving),
 * online, offline, reconnecting, refused (token no longer valid), impostor (wrong proof),
 * replaced (opened elsewhere), insecure (no WebCrypto), broken (a sealed frame did not open).
 * `sealed` (in every `state` event, and as a member) says whether the session is sealed.
 *
 * `liveRefused` says why the relay's hosted voice cannot serve this laptop (`proxy-token`,
 * `no-voice-relay`), once a call learnt it (voice/panel.js).
 */
export class Session extends EventTarget {
  /**
   * @param {Pairing} pairing
   */
  constructor(pairing) {
    super();
    this.pairing = pairing;
    /** The relay refuses a socket without its token, which this link does not carry (set by `offered`). */
    this.tokenMissing = false;
    /** @type {string | null} */
    this.liveRefused = null;
    /** @type {WebSocket | null} */
    this.socket = null;
    /** @type {Map<string, Pending>} */
    this.pending = new Map();
    this.nextId = 1;
    this.attempt = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
    this.stopped = false;
    this.final = false;
    this.online = false;
    /** @type {AgentFrame | null} */
    this.hello = null;
    /** @type {CryptoKey | null} */
    this.key = null;
    /** @type {{socket: WebSocket, sealing: SealedHello | null} | null} */
    this.challenge = null;
    /** The sealed session's keys while it lasts (null: not sealed, or it ended). */
    /** @type {Channel | null} */
    this.channel = null;
    /** The socket carried a sealed session whose agent left: until the next challenge only notices may come. */
    this.sealEnded = false;
    /** Sealed messages go out one after the other, in the order their frames were given. */
    this.outbound = Promise.resolve();
    /** Bytes handed to the seal and not yet on the socket. */
    this.sealing = 0;
    /**
     * Sealed messages that came while message 2 was being read, opened once it is.
     * @type {{message: Bytes, at: number}[] | null}
     */
    this.early = null;
    /** @type {ConnectionState} */
    this.state = 'idle';
    /** Bytes of every frame received and sent, for the call figures. */
    this.bytesIn = 0;
    this.bytesOut = 0;
    /** This page's call ids: calls outlive the socket, so they must not collide with another tab's. */
    this.idPrefix = `w${randomHex(4)}-`;
    /** Waiting for the `calls` answer that names every call the laptop kept for this pairing. */
    this.askedCalls = false;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.ticker = undefined;
  }

  /** Where this tab keeps the ids of the finished calls it showed. */
  seenKey() {
    return `voxa.calls.seen.${this.pairing.kind === 'relay' ? this.pairing.code : 'local'}`;
  }

  /** @returns {string[]} */
  seenCalls() {
    try {
      const stored = JSON.parse(sessionStorage.getItem(this.seenKey()) || '[]');
      return Array.isArray(stored) ? stored.filter((id) => typeof id === 'string').slice(-SEEN_MAX) : [];
    } catch {
      return [];
    }
  }

  /** @param {string} id */
  rememberSeen(id) {
    const seen = this.seenCalls().filter((other) => other !== id);
    seen.push(id);
    try {
      sessionStorage.setItem(this.seenKey(), JSON.stringify(seen.slice(-SEEN_MAX)));
    } catch {
      // A full or disabled storage only means the call may be shown again after a reload.
    }
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
      this.key = await importToken(this.pairing.token);
    } catch {
      this.finish('insecure', 'this browser cannot compute the hello proofs');
      return;
    }
    this.connect();
  }

  /** Closes the socket for good. */
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.failPending({ code: 'offline', message: 'the page left this laptop' });
    if (this.socket) this.socket.close(1000, 'bye');
    this.socket = null;
  }

  /** Tries again at once (after `replaced`, or to skip a backoff wait). */
  reconnectNow() {
    if (this.stopped) return;
    this.final = false;
    this.attempt = 0;
    clearTimeout(this.timer);
    if (this.socket) this.socket.close(1000, 'reconnect');
    this.connect();
  }

  url() {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const path = this.pairing.kind === 'relay' ? `/ws?code=${this.pairing.code}` : '/';
    return `${scheme}//${location.host}${path}`;
  }

  /**
   * @param {ConnectionState} state
   * @param {string} text
   */
  setState(state, text) {
    this.state = state;
    const sealed = this.sealed;
    this.dispatchEvent(new CustomEvent('state', { detail: { state, text, attempt: this.attempt, sealed } }));
  }

  /** Whether the session is sealed end to end (protocol 3) right now. */
  get sealed() {
    return this.channel !== null;
  }

  /**
   * A state nothing but the user can leave: no more reconnecting.
   * @param {ConnectionState} state
   * @param {string} text
   */
  finish(state, text) {
    this.final = true;
    clearTimeout(this.timer);
    this.goOffline({ code: 'offline', message: text });
    this.setState(state, text);
    if (this.socket) this.socket.close(1000, state);
  }

  connect() {
    clearInterval(this.ticker);
    if (this.stopped) return;
    this.setState('connecting', this.pairing.kind === 'relay' ? 'connecting to the relay…' : 'connecting…');
    let socket;
    try {
      socket = new WebSocket(this.url(), relayProtocols(this.pairing));
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.socket = socket;
    socket.binaryType = 'arraybuffer';
    socket.onopen = () => {
      if (socket !== this.socket) return;
      if (this.pairing.kind === 'relay') this.setState('relay', 'relay reachable — laptop offline');
      else this.setState('hello', 'saying hello…');
    };
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      if (typeof event.data !== 'string') {
        const at = performance.now();
        this.bytesIn += event.data.byteLength;
        if (this.channel) {
          this.openSealed(socket, this.channel, new Uint8Array(event.data), at);
        } else if (this.early) {
          this.early.push({ message: new Uint8Array(event.data), at });
        } else if (this.sealEnded) {
          this.breakSeal(socket);
        } else if (this.online) {
          // Binary frames of a plain session carry call audio; nothing else is binary.
          this.dispatchEvent(new CustomEvent('audio', { detail: { data: event.data, at } }));
        }
        return;
      }
      this.bytesIn += event.data.length;
      const notice = parseNotice(event.data);
      if (notice) {
        this.onNotice(notice);
        return;
      }
      const frame = parseAgentFrame(event.data);
      // Sealed, nothing but the relay's notices comes in the clear; after a sealed session, the
      // next one's challenge.
      if (this.channel || (this.sealEnded && !(frame && frame.type === 'challenge'))) {
        this.breakSeal(socket);
        return;
      }
      this.sealEnded = false;
      if (frame) this.onFrame(frame).catch(() => {});
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return;
      this.socket = null;
      this.goOffline({ code: 'offline', message: 'the connection closed' });
      if (this.stopped || this.final) return;
      if (event.code === 4001) {
        this.finish('replaced', 'this laptop was opened in another window');
      } else if (event.code === 1008 && (event.reason === 'bearer-refused' || event.reason === 'pairing-revoked')) {
        this.finish('refused', 'this link is no longer valid — scan the new code');
      } else if (event.code === 1008 && event.reason === 'sealed-session-broken') {
        this.finish('broken', BROKEN_TEXT);
      } else {
        this.scheduleReconnect();
      }
    };
  }

  /**
   * What the server that served the page offers (`/config`), which may come after the socket opened.
   * @param {{relay_token?: boolean}} offer
   */
  offered(offer) {
    this.tokenMissing = this.pairing.kind === 'relay' && !this.pairing.relayToken && offer.relay_token === true;
  }

  scheduleReconnect() {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(this.attempt, 16));
    const delay = Math.max(BACKOFF_FLOOR_MS, Math.random() * ceiling);
    this.attempt += 1;
    const at = Date.now() + delay;
    // The countdown counts: the words are said again every second until the attempt.
    const say = () => {
      const seconds = Math.max(1, Math.ceil((at - Date.now()) / 1000));
      const why = this.tokenMissing ? 'private relay: this link lacks its token (open the one voxa pair prints) — ' : 'offline — ';
      this.setState('reconnecting', `${why}reconnecting in ${seconds} s`);
    };
    say();
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.ticker = setInterval(say, 1000);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  /**
   * The session ended. Its calls go on on the laptop (they belong to the pairing): they stay
   * pending and the next session's `calls` answer replays them. `error` is for when that will
   * not happen (the page gave the laptop up).
   * @param {CallFailure} error
   */
  goOffline(error) {
    this.online = false;
    this.challenge = null;
    this.early = null;
    if (this.channel) this.sealEnded = true;
    this.channel = null;
    this.sealing = 0;
    this.askedCalls = false;
    if (this.stopped || this.final) this.failPending(error);
  }

  /**
   * Opens one sealed message and hands its frame on, in arrival order.
   * @param {WebSocket} socket
   * @param {Channel} channel
   * @param {Bytes} message
   * @param {number} at when it arrived
   */
  openSealed(socket, channel, message, at) {
    channel.open(message).then((plain) => {
      if (socket !== this.socket || channel !== this.channel || !plain) return;
      if (plain.kind === 'audio') {
        const data = new Uint8Array(plain.data.length + 1);
        data[0] = AUDIO_PREFIX;
        data.set(plain.data, 1);
        if (this.online) this.dispatchEvent(new CustomEvent('audio', { detail: { data: data.buffer, at } }));
        return;
      }
      const frame = parseAgentFrame(plain.text);
      // The session has started: a hello inside it means nothing.
      if (frame && frame.type !== 'challenge' && frame.type !== 'hello_ok') this.onFrame(frame).catch(() => {});
    }, () => {
      if (socket === this.socket && channel === this.channel) this.breakSeal(socket);
    });
  }

  /**
   * A sealed session broke (a frame that did not open, or one that came unsealed): it ends at
   * once, closed `sealed-session-broken`, and nothing more of it is read or sent.
   * @param {WebSocket} socket
   */
  breakSeal(socket) {
    if (socket !== this.socket) return;
    this.channel = null;
    this.sealEnded = false;
    this.final = true;
    clearTimeout(this.timer);
    this.goOffline({ code: 'sealed-session-broken', message: BROKEN_TEXT });
    this.setState('broken', BROKEN_TEXT);
    this.socket = null;
    // A page may close only with 1000 or 3000–4999: the reason says why (docs/PROTOCOL.md).
    socket.close(1000, 'sealed-session-broken');
  }

  /**
   * Sends one frame: sealed as `kind` when the session is, else as it is (`data`: JSON text, or
   * the bytes of a binary frame with their prefix). False when nothing can be sent.
   * @param {string | Bytes} data
   */
  transmit(data) {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    const channel = this.channel;
    if (!channel) {
      // A socket that carried a sealed session sends nothing in the clear but the next hello.
      if (this.sealEnded) return false;
      this.bytesOut += typeof data === 'string' ? data.length : data.byteLength;
      socket.send(data);
      return true;
    }
    let sealed;
    try {
      sealed = typeof data === 'string' ? channel.sealJson(data) : channel.seal(KIND_AUDIO, data.subarray(1));
    } catch {
      this.breakSeal(socket);
      return false;
    }
    const size = typeof data === 'string' ? data.length : data.byteLength;
    this.sealing += size;
    this.outbound = this.outbound.then(async () => {
      for (const message of sealed) {
        const bytes = await message;
        if (socket !== this.socket || channel !== this.channel || socket.readyState !== WebSocket.OPEN) return;
        this.bytesOut += bytes.byteLength;
        socket.send(bytes);
      }
    }).catch(() => this.breakSeal(socket)).finally(() => {
      if (channel === this.channel) this.sealing = Math.max(0, this.sealing - size);
    });
    return true;
  }

  /** @param {CallFailure} error */
  failPending(error) {
    for (const [, call] of this.pending) call.reject(error);
    this.pending.clear();
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
    }
  }

  /** @param {AgentFrame} frame */
  async onFrame(frame) {
    switch (frame.type) {
      case 'challenge':
        await this.answerChallenge(frame);
        return;
      case 'hello_ok':
        await this.checkHelloOk(frame);
        return;
      case 'error':
        // A refused proof, or the pairing rotated on the laptop (`voxa pair --rotate`).
        if (frame.code === 'bearer-refused' || frame.code === 'pairing-revoked') {
          this.finish('refused', 'this link is no longer valid — scan the new code');
          return;
        }
        if (this.online) this.dispatchEvent(new CustomEvent('error', { detail: frame }));
        return;
      case 'approval':
      case 'approval_resolved':
        // Approvals the laptop holds, for whoever follows (approvals/panel.js).
        if (this.online) this.dispatchEvent(new CustomEvent('approval', { detail: frame }));
        return;
      case 'calls':
        if (this.online) this.onCalls(frame);
        return;
      case 'status':
        if (this.online) this.dispatchEvent(new CustomEvent('status', { detail: frame }));
        return;
      case 'term_output':
      case 'term_exit':
        // The laptop's terminals this page watches, for the shell view (pty/panel.js).
        if (this.online) this.dispatchEvent(new CustomEvent('term', { detail: frame }));
        return;
      case 'agent_event':
        // The coding-agent sessions' events, for the agent view (agent/panel.js).
        if (this.online) this.dispatchEvent(new CustomEvent('agent_event', { detail: frame }));
        return;
      default:
        if (this.online) this.onCallFrame(frame);
    }
  }

  /** @param {AgentFrame} frame */
  async answerChallenge(frame) {
    const agentNonce = typeof frame.nonce === 'string' ? frame.nonce : '';
    if (frame.protocol !== PROTOCOL || !/^[0-9a-f]{32}$/.test(agentNonce)) {
      this.finish('impostor', 'this laptop speaks another protocol version — update voxa');
      return;
    }
    // A new challenge starts a new session; the calls in flight are asked for again once it is open.
    this.goOffline({ code: 'offline', message: 'the laptop restarted the session' });
    this.sealEnded = false;
    const socket = this.socket;
    if (!socket || !this.key) return;
    /** @type {{socket: WebSocket, sealing: SealedHello | null}} */
    const challenge = { socket, sealing: null };
    this.challenge = challenge;
    // Sealed whatever the challenge offers: a relay cannot talk the page down to protocol 2.
    challenge.sealing = await startHello(this.pairing.token, agentNonce);
    const hello = { type: 'hello', protocol: SEALED_PROTOCOL, noise: toBase64(challenge.sealing.message), client: CLIENT };
    if (this.challenge !== challenge || challenge.socket !== this.socket || socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify(hello));
  }

  /**
   * The laptop's `hello_ok` checked: protocol 3's message 2 opened (its payload is the `hello_ok`
   * itself) and the session's channel. `null` when it does not check out: this is not the paired
   * laptop.
   * @param {AgentFrame} frame
   * @param {{sealing: SealedHello | null}} challenge
   * @returns {Promise<{hello: AgentFrame, channel: Channel} | null>}
   */
  async checkAgent(frame, challenge) {
    if (!challenge.sealing) return null;
    if (frame.protocol !== SEALED_PROTOCOL || typeof frame.noise !== 'string') return null;
    try {
      const { payload, channel } = await challenge.sealing.finish(fromBase64(frame.noise));
      const hello = parseAgentFrame(payload);
      return hello && hello.type === 'hello_ok' ? { hello, channel } : null;
    } catch {
      return null;
    }
  }

  /** @param {AgentFrame} frame */
  async checkHelloOk(frame) {
    const challenge = this.challenge;
    if (!challenge || challenge.socket !== this.socket || !this.key) return;
    this.challenge = null;
    // The agent may seal its first frames before message 2 is read here: they wait.
    this.early = [];
    const checked = await this.checkAgent(frame, challenge);
    const early = this.early || /** @type {{message: Bytes, at: number}[]} */ ([]);
    this.early = null;
    if (challenge.socket !== this.socket) return;
    if (!checked) {
      this.finish('impostor', 'this is not your laptop — it could not prove it holds the pairing');
      return;
    }
    const hello = checked.hello;
    this.channel = checked.channel;
    const socket = challenge.socket;
    if (this.channel) for (const { message, at } of early) this.openSealed(socket, this.channel, message, at);
    this.attempt = 0;
    this.online = true;
    this.hello = hello;
    performance.mark('voxa:online');
    this.setState('online', 'laptop online');
    this.dispatchEvent(new CustomEvent('hello', { detail: hello }));
    // Every (re)connect asks for the calls of this pairing: those still running, those finished
    // while no page was there, and from now on those other devices start.
    this.askedCalls = this.sendJson({ type: 'calls', seen: this.seenCalls() });
    this.sendJson({ type: 'status' });
  }

  /**
   * The laptop names calls of this pairing (docs/PROTOCOL.md, "Calls outlive the connection").
   * The first answer after `calls` names all it kept: a pending call it does not name is gone.
   * Calls this page does not hold yet are adopted and handed out in a `calls` event.
   * @param {AgentFrame} frame
   */
  onCalls(frame) {
    const running = Array.isArray(frame.running) ? frame.running.filter(isEntry) : [];
    const finished = Array.isArray(frame.finished) ? frame.finished.filter(isEntry) : [];
    const named = new Set([...running, ...finished].map((entry) => entry.id));
    if (this.askedCalls) {
      this.askedCalls = false;
      for (const [id, call] of this.pending) {
        if (named.has(id)) continue;
        this.pending.delete(id);
        call.reject({ code: 'offline', message: 'the laptop no longer holds this call (it restarted, or its result was not kept)' });
      }
    }
    /** @type {AdoptedCall[]} */
    const adopted = [];
    for (const [entries, done] of /** @type {const} */ ([[running, false], [finished, true]])) {
      for (const entry of entries) {
        const known = this.pending.get(entry.id);
        if (known) {
          // Replayed from the start: what this page showed before is shown again.
          if (known.onReplay) known.onReplay();
          continue;
        }
        adopted.push({ entry, finished: done, call: this.adopt(entry.id) });
      }
    }
    if (adopted.length) this.dispatchEvent(new CustomEvent('calls', { detail: adopted }));
  }

  /**
   * A call this page did not start (or started before a reload): its frames are matched by id
   * like its own. Handlers go on the returned pending entry through `watch`.
   * @param {string} id
   * @returns {RunningCall}
   */
  adopt(id) {
    /** @type {Promise<CallOutcome>} */
    const done = new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
    });
    return { id, done };
  }

  /**
   * Sets the handlers of a pending call (an adopted one, mostly).
   * @param {string} id
   * @param {{onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void, onReplay?: () => void}} handlers
   */
  watch(id, handlers) {
    const call = this.pending.get(id);
    if (call) Object.assign(call, handlers);
  }

  /** Asks the laptop to stop every call of this pairing; false when it is not connected. */
  cancelAll() {
    return this.sendJson({ type: 'cancel_all' });
  }

  /** @param {AgentFrame} frame */
  onCallFrame(frame) {
    const call = this.pending.get(frame.id);
    if (!call) {
      // Voice frames, and pictures a voice call's tools took (their ids are not ours).
      if (VOICE_FRAMES.has(frame.type) || frame.type === 'image') {
        this.dispatchEvent(new CustomEvent('voice', { detail: frame }));
      }
      return;
    }
    if (frame.type === 'tool_progress') {
      if (call.onProgress && typeof frame.chunk === 'string') call.onProgress(frame.chunk);
    } else if (frame.type === 'image') {
      call.image = frame;
      if (call.onImage) call.onImage(frame);
    } else if (frame.type === 'tool_result') {
      this.pending.delete(frame.id);
      this.rememberSeen(frame.id);
      if (frame.ok) call.resolve({ result: frame.result || {}, image: call.image });
      else call.reject(frame.error || { code: 'internal', message: 'the call failed without a reason' });
    }
  }

  /**
   * Runs one tool. Resolves `{result, image}`, rejects with `{code, message}`.
   * Returns `{id, done}` so the caller can cancel.
   * @param {string} name
   * @param {Record<string, unknown>} args
   * @param {CallOptions} [options]
   * @returns {RunningCall}
   */
  call(name, args, { env, onProgress, onImage, id = `${this.idPrefix}${this.nextId++}`, caller } = {}) {
    /** @type {Promise<CallOutcome>} */
    const done = new Promise((resolve, reject) => {
      if (!this.online || !this.socket) {
        reject({ code: 'offline', message: 'the laptop is not connected' });
        return;
      }
      /** @type {import('./protocol.js').ClientFrame} */
      const frame = { type: 'tool_call', id, name, args };
      if (env) frame.env = env;
      if (caller) frame.caller = caller;
      if (!this.transmit(JSON.stringify(frame))) {
        reject({ code: 'offline', message: 'the laptop is not connected' });
        return;
      }
      this.pending.set(id, { resolve, reject, onProgress, onImage });
    });
    return { id, done };
  }

  /**
   * Sends one JSON frame; false when the laptop is not connected.
   * @param {import('./protocol.js').ClientFrame} frame
   */
  sendJson(frame) {
    if (!this.online) return false;
    return this.transmit(JSON.stringify(frame));
  }

  /** Sends `call_end` while the socket is open, even after the laptop left: the laptop's call ends with the page's. */
  hangUp() {
    this.transmit(JSON.stringify({ type: 'call_end' }));
  }

  /**
   * Sends one binary frame (call audio); false when the laptop is not connected.
   * @param {Bytes} bytes
   */
  sendAudio(bytes) {
    if (!this.online || !this.socket || bytes[0] !== AUDIO_PREFIX) return false;
    // A slow uplink drops microphone frames instead of queueing seconds of stale audio.
    if (this.socket.bufferedAmount + this.sealing > MAX_BUFFERED_AUDIO) return false;
    return this.transmit(bytes);
  }

  /**
   * Asks the laptop to stop a call; its result then arrives as `cancelled`.
   * @param {string} id
   */
  cancel(id) {
    if (this.online && this.pending.has(id)) this.transmit(JSON.stringify({ type: 'cancel', id }));
  }
}

/**
 * Subprotocols to offer a relay: a private relay's token as `voxa-relay-token.<base64url>` beside
 * `voxa.1`, the one the relay names back (a browser cannot send `Authorization`).
 * @param {Pairing} pairing
 * @returns {string[]}
 */
export function relayProtocols(pairing) {
  const relayToken = pairing.kind === 'relay' ? pairing.relayToken : undefined;
  if (!relayToken) return [];
  const bytes = new TextEncoder().encode(relayToken);
  const base64 = btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  return ['voxa.1', `voxa-relay-token.${base64}`];
}

/**
 * A `calls` entry as the page can use it; the rest of it stays unchecked.
 * @param {unknown} entry
 * @returns {entry is CallEntry}
 */
function isEntry(entry) {
  if (!entry || typeof entry !== 'object') return false;
  const { id, name } = /** @type {Record<string, unknown>} */ (entry);
  return typeof id === 'string' && id.length > 0 && id.length <= 128 && typeof name === 'string';
}
