// @ts-check
// The session start (docs/PROTOCOL.md, "Sealed sessions (protocol 3)"): the page's answer to the
// agent's challenge — always the sealed hello, whatever the challenge offers, so a relay cannot
// talk the page down to protocol 2 — and the check of the agent's `hello_ok`, whose message 2
// opens only for an agent that holds the pairing's token. The protocol-2 proofs (HMAC over both
// nonces) are here too, for a socket that still speaks them.
//
// A link's pairing ticket keys the hello in place of the token (`"ticket":true`, docs/PROTOCOL.md
// "A pairing link's ticket"): the laptop spends it, and its first sealed frame hands the token.

import * as pairings from '../pairings.js';
import { PROTOCOL, SEALED_PROTOCOL, parseAgentFrame } from '../protocol.js';
import { startHello } from '../seal/channel.js';
import { fromBase64, toBase64 } from '../seal/noise.js';

/**
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {import('../seal/channel.js').Channel} Channel
 * @typedef {import('../seal/channel.js').Bytes} Bytes
 * @typedef {Awaited<ReturnType<typeof startHello>>} SealedHello
 */

/** How the page names itself in its hello (`client`). */
export const CLIENT = 'voxa-web/1';

const encoder = new TextEncoder();

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
 * Whether a challenge is one this page answers: protocol 2's challenge (which offers 3) with a
 * well-formed nonce.
 * @param {AgentFrame} frame
 */
export function answerable(frame) {
  return frame.protocol === PROTOCOL && typeof frame.nonce === 'string' && /^[0-9a-f]{32}$/.test(frame.nonce);
}

/**
 * The sealed hello answering `challenge`, and the handshake that reads the answer to it.
 * @param {string} secret the auth token, or the link's pairing ticket when `ticket`
 * @param {AgentFrame} challenge an answerable challenge
 * @param {boolean} [ticket] the hello is keyed by a pairing ticket
 * @returns {Promise<{hello: Record<string, unknown>, sealing: SealedHello}>}
 */
export async function sealedHello(secret, challenge, ticket = false) {
  const sealing = await startHello(secret, challenge.nonce);
  const hello = { type: 'hello', protocol: SEALED_PROTOCOL, noise: toBase64(sealing.message), client: CLIENT,
    ...(ticket ? { ticket: true } : {}) };
  return { hello, sealing };
}

/** What the page says of a refused ticket, by the laptop's code. */
const TICKET_REFUSALS = {
  'ticket-used': 'this link was used already — run voxa pair for a new one (if it was not you, run voxa pair --rotate)',
  'ticket-expired': 'this link has expired — run voxa pair for a new one',
};

/**
 * The sentence for a refused ticket (an `error` frame's code, or a close's reason on the loopback
 * socket); `null` for any other code.
 * @param {unknown} code
 */
export function ticketRefusal(code) {
  return code === 'ticket-used' || code === 'ticket-expired' ? TICKET_REFUSALS[code] : null;
}

/**
 * The agent's `hello_ok` checked: message 2 opened (its payload is the `hello_ok` itself) and the
 * session's channel. `null` when it does not check out: this is not the paired laptop.
 * @param {AgentFrame} frame
 * @param {SealedHello} sealing
 * @returns {Promise<{hello: AgentFrame, channel: Channel} | null>}
 */
export async function checkAgent(frame, sealing) {
  if (frame.protocol !== SEALED_PROTOCOL || typeof frame.noise !== 'string') return null;
  try {
    const { payload, channel } = await sealing.finish(fromBase64(frame.noise));
    const hello = parseAgentFrame(payload);
    return hello && hello.type === 'hello_ok' ? { hello, channel } : null;
  } catch {
    return null;
  }
}

/**
 * One session start on one socket: the sealed hello answering the agent's challenge, then the
 * check of its `hello_ok`. Sealed messages the agent sends while message 2 is being read are held
 * and handed over with the result, to be opened first.
 */
export class SessionStart {
  /**
   * @param {string} secret the auth token, or the link's pairing ticket when `ticket`
   * @param {WebSocket} socket
   * @param {boolean} [ticket] the hello is keyed by a pairing ticket
   */
  constructor(secret, socket, ticket = false) {
    this.secret = secret;
    this.ticket = ticket;
    this.socket = socket;
    /** @type {SealedHello | null} */
    this.sealing = null;
    /** @type {{message: Bytes, at: number}[] | null} */
    this.early = null;
    this.abandoned = false;
  }

  /**
   * Sends the sealed hello answering `challenge` (unless the start was abandoned meanwhile).
   * @param {AgentFrame} challenge an answerable challenge
   */
  async answer(challenge) {
    const { hello, sealing } = await sealedHello(this.secret, challenge, this.ticket);
    this.sealing = sealing;
    if (!this.abandoned && this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(hello));
  }

  /**
   * Holds a sealed message that came while `hello_ok` is being checked; false when none is.
   * @param {Bytes} message
   * @param {number} at
   */
  hold(message, at) {
    if (!this.early) return false;
    this.early.push({ message, at });
    return true;
  }

  /**
   * Checks the agent's `hello_ok` (once): the session's channel, its hello and the messages held
   * meanwhile when the agent proved the pairing; `null` when it did not; `undefined` when this
   * start is over (abandoned, or no hello was sent yet).
   * @param {AgentFrame} frame
   * @returns {Promise<{hello: AgentFrame, channel: Channel, early: {message: Bytes, at: number}[]} | null | undefined>}
   */
  async check(frame) {
    const sealing = this.sealing;
    if (!sealing || this.abandoned) return undefined;
    this.sealing = null;
    this.early = [];
    const checked = await checkAgent(frame, sealing);
    const early = this.early || /** @type {{message: Bytes, at: number}[]} */ ([]);
    this.early = null;
    if (this.abandoned) return undefined;
    return checked && { ...checked, early };
  }

  abandon() {
    this.abandoned = true;
    this.early = null;
  }
}

/**
 * A challenge starts a new session on `session`'s socket: the sealed hello answers it.
 * @param {import('../session.js').Session} session
 * @param {AgentFrame} frame
 */
export async function answerChallenge(session, frame) {
  if (!answerable(frame)) {
    session.finish('impostor', 'this laptop speaks another protocol version — update voxa');
    return;
  }
  // A new challenge starts a new session; the calls in flight are asked for again once it is open.
  session.goOffline({ code: 'offline', message: 'the laptop restarted the session' });
  session.sealEnded = false;
  if (!session.socket || !session.key) return;
  const ticket = session.pairing.ticket;
  session.starting = new SessionStart(ticket || session.pairing.token, session.socket, Boolean(ticket));
  await session.starting.answer(frame);
}

/**
 * The laptop proved the pairing: a held session says so and waits for `admit()`, any other
 * goes online. A session a ticket opened waits first for the token (`paired`).
 * @param {import('../session.js').Session} session
 * @param {import('../protocol.js').AgentFrame} hello
 */
export function introduce(session, hello) {
  if (session.pairing.ticket) {
    // The ticket is spent; the token comes in the session's first frame.
    session.introducing = hello;
    session.setState('hello', 'laptop answered — receiving the pairing…');
    return;
  }
  session.hello = hello;
  if (session.held) {
    performance.mark('voxa:introduced');
    session.setState('hello', 'laptop answered — waiting for you to add it');
    session.dispatchEvent(new CustomEvent('introduced', { detail: hello }));
    return;
  }
  session.goOnline(hello);
}

/**
 * The laptop handed the pairing's token in the session its ticket opened: the ticket is gone,
 * and the session goes on as a token's would.
 * @param {import('../session.js').Session} session
 * @param {unknown} token
 */
export function paired(session, token) {
  const pairing = pairings.withToken(session.pairing, token);
  const hello = session.introducing;
  session.introducing = null;
  if (!pairing || !hello || !session.socket) {
    if (session.socket) session.breakSeal(session.socket);
    return;
  }
  session.pairing = pairing;
  session.dispatchEvent(new CustomEvent('paired', { detail: pairing }));
  importToken(pairing.token).then((key) => { session.key = key; }, () => {});
  introduce(session, hello);
}
