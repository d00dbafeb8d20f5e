// @ts-check
// One connection to one laptop: the socket, presence, the protocol-2 hello (both proofs, see
// docs/PROTOCOL.md), tool calls matched by id, and reconnecting with backoff.
//
// Through a relay that hosts voice, the session socket is the relay's `/live` (a phone socket with
// voice added) unless the laptop hosts voice itself (`"mode":"self-hosted"`): then it is `/ws`, so
// the laptop's own Gemini session answers `call_start` and the relay only passes frames on.

import { PROTOCOL, parseAgentFrame, parseNotice } from './protocol.js';

/**
 * @typedef {import('./protocol.js').AgentFrame} AgentFrame
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {{code: string, message: string}} CallFailure
 * @typedef {{result: Record<string, any>, image: AgentFrame | undefined}} CallOutcome
 * @typedef {{id: string, done: Promise<CallOutcome>}} RunningCall
 * @typedef {{env?: string, onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void}} CallOptions
 * @typedef {{resolve: (outcome: CallOutcome) => void, reject: (error: CallFailure) => void,
 *   onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void, image?: AgentFrame,
 *   onReplay?: () => void}} Pending
 * @typedef {{id: string, name: string, args?: Record<string, unknown>, env?: string, started: number}} CallEntry
 * @typedef {{entry: CallEntry, finished: boolean, call: RunningCall}} AdoptedCall
 */

/**
 * Where the connection stands (see `Session`).
 * @typedef {'idle' | 'connecting' | 'relay' | 'hello' | 'online' | 'offline' | 'reconnecting' | 'refused'
 *   | 'impostor' | 'replaced' | 'insecure'} ConnectionState
 */

const CLIENT = 'voxa-web/1';
/** First reconnect delay ceiling and largest delay (exponential backoff with full jitter). */
const BACKOFF_BASE_MS = 1000;
const BACKOFF_CAP_MS = 30000;
/** Shortest wait between two attempts, so a failing relay is never hammered. */
const BACKOFF_FLOOR_MS = 250;

/** Bytes queued on the socket beyond which microphone frames are dropped (about 1.5 s of audio). */
const MAX_BUFFERED_AUDIO = 48 * 1024;
/** Frames of a voice call, handed to whoever speaks on this session (see voice.js). */
const VOICE_FRAMES = new Set(['call_started', 'call_error', 'call_ended', 'transcript', 'turn_complete',
  'interrupted', 'tool_activity']);

/**
 * Why the relay's `/live` cannot be used, by the HTTP status a plain request to it gets.
 * @type {Record<number, string>}
 */
const LIVE_REFUSALS = { 401: 'proxy-token', 403: 'proxy-token', 404: 'no-voice-relay' };

const encoder = new TextEncoder();

/** Finished calls this tab remembers having shown, so a reconnect does not show them again. */
const SEEN_MAX = 64;

/** @param {number} bytes */
function randomHex(bytes) {
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
function sameText(a, b) {
  if (typeof a !== 'string' || typeof b !== 'string' || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i += 1) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Connection states, emitted as `state` events with `{state, text}`:
 * connecting, relay (relay reachable, laptop offline), hello (laptop present, proving),
 * online, offline, reconnecting, refused (token no longer valid), impostor (wrong proof),
 * replaced (opened elsewhere), insecure (no WebCrypto).
 *
 * `live`: the relay hosts voice calls (`/config`). `route` is the socket's path, `ws` or `live`;
 * `liveRefused` says why `/live` was given up (`proxy-token`, `no-voice-relay`). A `route` event
 * tells which laptop mode the route was chosen for, so the next visit starts on the right one.
 */
export class Session extends EventTarget {
  /**
   * @param {Pairing} pairing
   * @param {{live?: boolean}} [options]
   */
  constructor(pairing, { live = false } = {}) {
    super();
    this.pairing = pairing;
    this.live = live && pairing.kind === 'relay';
    /** @type {string | null} */
    this.liveRefused = null;
    /** @type {'ws' | 'live'} */
    this.route = this.routeFor(pairing.mode);
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
    /** @type {{agentNonce: string, clientNonce: string, socket: WebSocket} | null} */
    this.challenge = null;
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
    const path = this.pairing.kind === 'relay' ? `/${this.route}?code=${this.pairing.code}` : '/';
    return `${scheme}//${location.host}${path}`;
  }

  /**
   * The socket for a laptop in `mode`: the relay's `/live` unless the laptop hosts voice itself.
   * @param {string | undefined} mode
   * @returns {'ws' | 'live'}
   */
  routeFor(mode) {
    return this.live && !this.liveRefused && mode !== 'self-hosted' ? 'live' : 'ws';
  }

  /**
   * `/live` failed before it opened: a plain request says whether the relay refuses it (a proxy
   * token a browser cannot send, or no hosting any more). Then `/ws` at once; else the usual backoff.
   */
  async checkLive() {
    if (this.pairing.kind !== 'relay') return;
    let status = 0;
    try {
      const response = await fetch(`/live?code=${this.pairing.code}`, { cache: 'no-store', credentials: 'omit' });
      status = response.status;
    } catch {
      status = 0;
    }
    if (this.stopped || this.final || this.socket) return;
    if (LIVE_REFUSALS[status]) {
      this.liveRefused = LIVE_REFUSALS[status];
      this.route = 'ws';
      this.connect();
    } else {
      this.scheduleReconnect();
    }
  }

  /**
   * @param {ConnectionState} state
   * @param {string} text
   */
  setState(state, text) {
    this.state = state;
    this.dispatchEvent(new CustomEvent('state', { detail: { state, text, attempt: this.attempt } }));
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
      socket = new WebSocket(this.url());
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.socket = socket;
    socket.binaryType = 'arraybuffer';
    let opened = false;
    socket.onopen = () => {
      if (socket !== this.socket) return;
      opened = true;
      if (this.pairing.kind === 'relay') this.setState('relay', 'relay reachable — laptop offline');
      else this.setState('hello', 'saying hello…');
    };
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      if (typeof event.data !== 'string') {
        // Binary frames carry call audio; nothing else is binary.
        const at = performance.now();
        this.bytesIn += event.data.byteLength;
        if (this.online) this.dispatchEvent(new CustomEvent('audio', { detail: { data: event.data, at } }));
        return;
      }
      this.bytesIn += event.data.length;
      const notice = parseNotice(event.data);
      if (notice) {
        this.onNotice(notice);
        return;
      }
      const frame = parseAgentFrame(event.data);
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
      } else if (!opened && this.route === 'live') {
        this.checkLive();
      } else {
        this.scheduleReconnect();
      }
    };
  }

  scheduleReconnect() {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(this.attempt, 16));
    const delay = Math.max(BACKOFF_FLOOR_MS, Math.random() * ceiling);
    this.attempt += 1;
    const at = Date.now() + delay;
    // The countdown counts: the words are said again every second until the attempt.
    const say = () => {
      const seconds = Math.max(1, Math.ceil((at - Date.now()) / 1000));
      this.setState('reconnecting', `offline — reconnecting in ${seconds} s`);
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
    this.askedCalls = false;
    if (this.stopped || this.final) this.failPending(error);
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
    const clientNonce = randomHex(16);
    const socket = this.socket;
    if (!socket || !this.key) return;
    this.challenge = { agentNonce, clientNonce, socket };
    const proof = await helloProof(this.key, 'client', agentNonce, clientNonce);
    if (!this.challenge || this.challenge.socket !== this.socket || socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ type: 'hello', protocol: PROTOCOL, nonce: clientNonce, proof, client: CLIENT }));
  }

  /** @param {AgentFrame} frame */
  async checkHelloOk(frame) {
    const challenge = this.challenge;
    if (!challenge || challenge.socket !== this.socket || !this.key) return;
    this.challenge = null;
    const expected = await helloProof(this.key, 'agent', challenge.agentNonce, challenge.clientNonce);
    if (!sameText(frame.proof, expected)) {
      this.finish('impostor', 'this is not your laptop — it could not prove it holds the pairing');
      return;
    }
    const route = this.routeFor(frame.mode);
    this.dispatchEvent(new CustomEvent('route', { detail: { mode: frame.mode } }));
    if (route !== this.route) {
      // The laptop's mode wants the other socket: switch before anything is sent on this one.
      this.route = route;
      this.reconnectNow();
      return;
    }
    this.attempt = 0;
    this.online = true;
    this.hello = frame;
    performance.mark('voxa:online');
    this.setState('online', 'laptop online');
    this.dispatchEvent(new CustomEvent('hello', { detail: frame }));
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
  call(name, args, { env, onProgress, onImage } = {}) {
    const id = `${this.idPrefix}${this.nextId++}`;
    /** @type {Promise<CallOutcome>} */
    const done = new Promise((resolve, reject) => {
      if (!this.online || !this.socket) {
        reject({ code: 'offline', message: 'the laptop is not connected' });
        return;
      }
      this.pending.set(id, { resolve, reject, onProgress, onImage });
      /** @type {import('./protocol.js').ClientFrame} */
      const frame = { type: 'tool_call', id, name, args };
      if (env) frame.env = env;
      this.sendJson(frame);
    });
    return { id, done };
  }

  /**
   * Sends one JSON frame; false when the laptop is not connected.
   * @param {import('./protocol.js').ClientFrame} frame
   */
  sendJson(frame) {
    if (!this.online || !this.socket || this.socket.readyState !== WebSocket.OPEN) return false;
    const text = JSON.stringify(frame);
    this.bytesOut += text.length;
    this.socket.send(text);
    return true;
  }

  /** Sends `call_end` while the socket is open, even after the laptop left: a call the relay hosts ends with the page's. */
  hangUp() {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) {
      const text = JSON.stringify({ type: 'call_end' });
      this.bytesOut += text.length;
      this.socket.send(text);
    }
  }

  /**
   * Sends one binary frame (call audio); false when the laptop is not connected.
   * @param {Uint8Array} bytes
   */
  sendAudio(bytes) {
    if (!this.online || !this.socket || this.socket.readyState !== WebSocket.OPEN) return false;
    // A slow uplink drops microphone frames instead of queueing seconds of stale audio.
    if (this.socket.bufferedAmount > MAX_BUFFERED_AUDIO) return false;
    this.bytesOut += bytes.byteLength;
    this.socket.send(bytes);
    return true;
  }

  /**
   * Asks the laptop to stop a call; its result then arrives as `cancelled`.
   * @param {string} id
   */
  cancel(id) {
    if (this.online && this.socket && this.pending.has(id)) {
      this.socket.send(JSON.stringify({ type: 'cancel', id }));
    }
  }
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
