// @ts-check
// The session's socket (docs/PROTOCOL.md, "Web client"): where it connects (`/ws?code=` on the
// relay's own origin, or the loopback port), the relay token a private relay asks for, the waits
// between attempts, and what a close tells the page.

/** @typedef {import('../pairings.js').Pairing} Pairing */

/**
 * Reconnect delays: the first `QUICK_ATTEMPTS` wait at most `QUICK_MS` (a relay that restarts is
 * back within seconds, and the page is back within one of those waits); after them, exponential
 * backoff with full jitter from `BACKOFF_BASE_MS` up to `BACKOFF_CAP_MS`, for a relay that is
 * really down.
 */
const QUICK_ATTEMPTS = 6;
const QUICK_MS = 1000;
const BACKOFF_BASE_MS = 2000;
const BACKOFF_CAP_MS = 30000;
/** Shortest wait between two attempts, so a failing relay is never hammered. */
const BACKOFF_FLOOR_MS = 250;

/** What the page says when a sealed session broke. */
export const BROKEN_TEXT = 'the relay altered or dropped part of this session, so it was closed: nothing altered ran, but what you sent last may not have reached the laptop — Reconnect to start a new one';
/** What the page says when the laptop no longer accepts this link's token. */
export const REFUSED_TEXT = 'this link is no longer valid — scan the new code';

/**
 * The session socket's address: on the page's own origin, or on another relay of the pairing
 * (`relay`, a base URL from pairings.js `relayList`).
 * @param {Pairing} pairing
 * @param {string} [relay]
 */
export function socketUrl(pairing, relay) {
  if (relay && pairing.kind === 'relay') return `${relay.replace(/^http/, 'ws')}/ws?code=${pairing.code}`;
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const path = pairing.kind === 'relay' ? `/ws?code=${pairing.code}` : '/';
  return `${scheme}//${location.host}${path}`;
}

/** The link's socket (address.js) and what it heard. @typedef {{address: string, protocols: string, socket: WebSocket, heard: MessageEvent[]}} EarlySocket */
const page = /** @type {{voxaEarlySocket?: EarlySocket}} */ (globalThis);

/** Closes the link's early socket if no session took it. */
export function dropEarly() {
  page.voxaEarlySocket?.socket.close(1000, 'not-used');
  delete page.voxaEarlySocket;
}

/** How long a relay of a pairing with others may answer without the laptop before the next is tried. */
const ABSENT_MS = 5000;

/**
 * The relays a session's socket goes to in turn: the page's own first, then the pairing's others
 * (docs/PROTOCOL.md, "More than one relay").
 */
export class Relays {
  /** @param {Pairing} pairing */
  constructor(pairing) {
    this.pairing = pairing;
    /** Base URLs; `''` is the page's own origin. */
    this.list = ['', ...(pairing.kind === 'relay' && pairing.relays) || []];
    this.at = 0;
    /** The link's socket, if it goes where this pairing's first would. */
    const early = page.voxaEarlySocket;
    this.early = early && early.address === this.url() && early.protocols === relayProtocols(pairing).join(',') ? early : null;
    if (this.early) delete page.voxaEarlySocket;
  }

  /** The early socket while open or opening (what it heard replayed once handlers are set), else a new one. */
  open() {
    const early = this.early;
    if (!early || early.socket.readyState > WebSocket.OPEN) {
      this.drop();
      return new WebSocket(this.url(), relayProtocols(this.pairing));
    }
    this.early = null;
    const { socket, heard } = early;
    queueMicrotask(() => {
      if (socket.readyState === WebSocket.OPEN) socket.dispatchEvent(new Event('open'));
      for (const { data } of heard) socket.dispatchEvent(new MessageEvent('message', { data }));
    });
    return socket;
  }

  /** The session ended before its first socket: the early one is closed. */
  drop() {
    this.early?.socket.close(1000, 'not-used');
    this.early = null;
  }

  /** The session socket's address on the relay in use. */
  url() {
    return socketUrl(this.pairing, this.list[this.at]);
  }

  /** The host of the relay in use. */
  get host() {
    const relay = this.list[this.at];
    return relay ? new URL(relay).host : location.host;
  }

  /** The socket to the relay in use failed or ended: the next attempt goes to the next one. */
  next() {
    this.at = (this.at + 1) % this.list.length;
  }

  /**
   * The relay in use answers without the laptop (it may reach only another relay): when there
   * are others and it is still `away()` after a while, the socket closes and the next is tried.
   * @param {WebSocket | null} socket
   * @param {() => boolean} away
   */
  absent(socket, away) {
    if (socket && this.list.length > 1) setTimeout(() => away() && socket.close(1000, 'laptop-absent'), ABSENT_MS);
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
 * The next attempt after a socket closed: waits a little for the first few, then by exponential
 * backoff with full jitter (never below a floor), counting the seconds left aloud once a second until it fires.
 */
export class Retry {
  /**
   * @param {(seconds: number) => void} say told the seconds left, at once and every second
   * @param {() => void} fire the attempt
   */
  constructor(say, fire) {
    this.say = say;
    this.fire = fire;
    /** Attempts since the last session that went online. */
    this.attempt = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.ticker = undefined;
  }

  schedule() {
    const slow = this.attempt - QUICK_ATTEMPTS;
    const ceiling = slow < 0 ? QUICK_MS : Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(slow, 16));
    const delay = Math.max(BACKOFF_FLOOR_MS, Math.random() * ceiling);
    this.attempt += 1;
    const at = Date.now() + delay;
    const tell = () => this.say(Math.max(1, Math.ceil((at - Date.now()) / 1000)));
    this.cancel();
    tell();
    this.ticker = setInterval(tell, 1000);
    this.timer = setTimeout(this.fire, delay);
  }

  cancel() {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
  }
}

/**
 * What a close of the session socket means when it leaves the user nothing to wait for: a state
 * of its own and its words; `null` when reconnecting may help.
 * @param {CloseEvent} event
 * @returns {{state: 'replaced' | 'refused' | 'broken', text: string} | null}
 */
export function finalClose(event) {
  if (event.code === 4001) return { state: 'replaced', text: 'this laptop was opened in another window' };
  if (event.code !== 1008) return null;
  if (event.reason === 'bearer-refused' || event.reason === 'pairing-revoked') return { state: 'refused', text: REFUSED_TEXT };
  if (event.reason === 'sealed-session-broken') return { state: 'broken', text: BROKEN_TEXT };
  return null;
}
