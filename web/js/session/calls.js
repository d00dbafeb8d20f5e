// @ts-check
// Tool calls matched by id (docs/PROTOCOL.md, "Calls outlive the connection"): the calls this page
// started and those it adopted, their progress, pictures and results. Calls belong to the
// pairing, not to the socket: a session that ends leaves them pending, and the next session's
// `calls` answer names the ones the laptop still holds (replayed from their start) and those
// other devices started.

import { QUEUED_TOOLS, labelOf } from '../outbox.js';
import { randomHex } from './hello.js';

/**
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {import('../pairings.js').Pairing} Pairing
 * @typedef {{code: string, message: string}} CallFailure
 * @typedef {{result: Record<string, any>, image: AgentFrame | undefined}} CallOutcome
 * @typedef {{id: string, done: Promise<CallOutcome>}} RunningCall
 * @typedef {{env?: string, onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void,
 *   id?: string, caller?: string}} CallOptions `id` and `caller`: a call carried for the relay's model (voice/socket.js)
 * @typedef {{onProgress?: (chunk: string) => void, onImage?: (image: AgentFrame) => void, onReplay?: () => void}} CallHandlers
 * @typedef {CallHandlers & {resolve: (outcome: CallOutcome) => void, reject: (error: CallFailure) => void,
 *   image?: AgentFrame}} Pending
 * @typedef {{id: string, name: string, args?: Record<string, unknown>, env?: string, started: number}} CallEntry
 * @typedef {{entry: CallEntry, finished: boolean, call: RunningCall}} AdoptedCall
 */

/** Finished calls this tab remembers having shown, so a reconnect does not show them again. */
const SEEN_MAX = 64;
/** Longest call id taken from the laptop's `calls` answer. */
const MAX_CALL_ID_LEN = 128;

const OFFLINE = { code: 'offline', message: 'the laptop is not connected' };

export class Calls {
  /**
   * @param {Pairing} pairing
   * @param {import('../outbox.js').Outbox} outbox where the calls the user typed wait for the laptop
   */
  constructor(pairing, outbox) {
    this.outbox = outbox;
    /** The ids the last `calls` answer named. @type {Set<string>} */
    this.lastNamed = new Set();
    /** @type {Map<string, Pending>} */
    this.pending = new Map();
    this.nextId = 1;
    /** This page's call ids: calls outlive the socket, so they must not collide with another tab's. */
    this.idPrefix = `w${randomHex(4)}-`;
    /** Where this tab keeps the ids of the finished calls it showed. */
    this.seenKey = `voxa.calls.seen.${pairing.kind === 'relay' ? pairing.code : 'local'}`;
    /** Waiting for the `calls` answer that names every call the laptop kept for this pairing. */
    this.asked = false;
  }

  /** @returns {string[]} */
  seen() {
    try {
      const stored = JSON.parse(sessionStorage.getItem(this.seenKey) || '[]');
      return Array.isArray(stored) ? stored.filter((id) => typeof id === 'string').slice(-SEEN_MAX) : [];
    } catch {
      return [];
    }
  }

  /** @param {string} id */
  rememberSeen(id) {
    const seen = this.seen().filter((other) => other !== id);
    seen.push(id);
    try {
      sessionStorage.setItem(this.seenKey, JSON.stringify(seen.slice(-SEEN_MAX)));
    } catch {
      // A full or disabled storage only means the call may be shown again after a reload.
    }
  }

  /**
   * Starts one call: `send` puts its `tool_call` on the wire (false when it cannot). A call the
   * user typed (QUEUED_TOOLS) waits in the outbox while the laptop is unreachable.
   * @param {string} name
   * @param {Record<string, unknown>} args
   * @param {CallOptions} options
   * @param {(frame: import('../protocol.js').ClientFrame) => boolean} send
   * @returns {RunningCall}
   */
  start(name, args, { env, onProgress, onImage, id = `${this.idPrefix}${this.nextId++}`, caller }, send) {
    /** @type {Promise<CallOutcome>} */
    const done = new Promise((resolve, reject) => {
      /** @type {import('../protocol.js').ClientFrame} */
      const frame = { type: 'tool_call', id, name, args };
      if (env) frame.env = env;
      if (caller) frame.caller = caller;
      const kept = !caller && QUEUED_TOOLS.has(name);
      const sent = send(frame);
      if (!(kept && this.outbox.add(id, frame, labelOf(frame), sent)) && !sent) {
        reject(OFFLINE);
        return;
      }
      this.pending.set(id, { resolve, reject, onProgress, onImage });
    });
    return { id, done };
  }

  /** @param {string} id */
  has(id) {
    return this.pending.has(id);
  }

  /**
   * A call this page did not start (or started before a reload): its frames are matched by id
   * like its own. Handlers go on it through `watch`.
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
   * @param {CallHandlers} handlers
   */
  watch(id, handlers) {
    const call = this.pending.get(id);
    if (call) Object.assign(call, handlers);
  }

  /** @param {CallFailure} error */
  failAll(error) {
    for (const [, call] of this.pending) call.reject(error);
    this.pending.clear();
  }

  /**
   * The laptop names calls of this pairing. The first answer after `calls` was asked names all
   * it kept: a pending call it does not name is gone. Returns the calls this page did not hold.
   * @param {AgentFrame} frame
   * @returns {AdoptedCall[]}
   */
  named(frame) {
    const running = Array.isArray(frame.running) ? frame.running.filter(isEntry) : [];
    const finished = Array.isArray(frame.finished) ? frame.finished.filter(isEntry) : [];
    const named = new Set([...running, ...finished].map((entry) => entry.id));
    if (this.asked) {
      this.asked = false;
      this.lastNamed = named;
      for (const [id, call] of this.pending) {
        // What waits in the outbox is sent once this answer is read (session/events.js).
        if (named.has(id) || this.outbox.has(id)) continue;
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
    return adopted;
  }

  /**
   * A frame of a pending call (`tool_progress`, `image`, `tool_result`); false when it belongs to
   * no call of this page.
   * @param {AgentFrame} frame
   */
  take(frame) {
    if (frame.type === 'tool_result') this.outbox.settle(frame.id, frame.ok === true, frame.error);
    const call = this.pending.get(frame.id);
    if (!call) return false;
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
    return true;
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
  return typeof id === 'string' && id.length > 0 && id.length <= MAX_CALL_ID_LEN && typeof name === 'string';
}
