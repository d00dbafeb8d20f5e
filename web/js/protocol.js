// @ts-check
// The wire protocol's names as the page knows them (docs/PROTOCOL.md): the error codes, the
// call_error codes, the `type` of every JSON frame in each direction, and the numbers and marks of
// the wire. A Rust test (tests/it/web.rs, `protocol_js_names_what_the_rust_protocol_names`) reads
// every `export const` of this file and holds each against src/protocol — a list against its enum
// in both directions, a number against its constant — so a code or frame added on either side,
// or a constant added here that names nothing there, fails the build until the other says it
// too. Keep each list in this form: `export const NAME = /** @type {const} */ ([`, one quoted name
// per entry, `]);`.

/** Version of the challenge, and of the plain hello (scripts on the loopback socket). */
export const PROTOCOL = 2;

/** Version of the sealed hello the page says everywhere else (docs/PROTOCOL.md, "Sealed sessions"). */
export const SEALED_PROTOCOL = 3;

/** Prefix byte of an audio frame, both ways (docs/PROTOCOL.md, "Voice"). */
export const AUDIO_PREFIX = 0x01;

/**
 * First character of the relay's own notices to a phone: a text frame `"\u0001" + JSON`
 * (docs/PROTOCOL.md, "Relay framing"). No frame of the application protocol starts with it.
 */
export const NOTICE_PREFIX = '\u0001';

/** `code` of an `error` frame or of a failed `tool_result`. */
export const ERROR_CODES = /** @type {const} */ ([
  'unknown-tool',
  'invalid-args',
  'outside-workspace',
  'protected-path',
  'not-found',
  'timeout',
  'cancelled',
  'too-large',
  'denied-by-policy',
  'duplicate-id',
  'busy',
  'unavailable',
  'internal',
  'bad-frame',
  'host-token-required',
  'unknown-environment',
  'environment-not-paired',
  'pairing-revoked',
  'bearer-refused',
  'unauthenticated-call',
  'executor-unauthenticated',
  'environment-unreachable',
  'environment-identity-mismatch',
  'sealed-session-broken',
  'sealed-session-stalled',
  'sealed-session-required',
  'conflict',
  'no-spoken-consent',
  'ticket-used',
  'ticket-expired',
]);

/** `code` of a `call_error` frame. */
export const CALL_ERROR_CODES = /** @type {const} */ ([
  'bad-key',
  'gemini-refused',
  'gemini-not-found',
  'gemini-unavailable',
  'gemini-unreachable',
  'gemini-closed',
  'busy',
  'unavailable',
  'no-call',
  'at-capacity',
  'too-many-calls',
  'budget-spent',
]);

/** `type` of the frames a client sends to an agent. */
export const CLIENT_FRAMES = /** @type {const} */ ([
  'hello',
  'bearer',
  'tool_call',
  'cancel',
  'cancel_all',
  'calls',
  'status',
  'call_start',
  'call_end',
  'say',
  'audio_end',
  'narration',
  'follow',
  'unfollow',
  'approve',
  'grants',
  'revoke',
  'push_subscribe',
  'push_unsubscribe',
  'term_ack',
  'tick',
]);

/** `type` of the frames an agent (or a relay hosting a call) sends. */
export const AGENT_FRAMES = /** @type {const} */ ([
  'challenge',
  'hello_ok',
  'pairing',
  'identity',
  'tool_progress',
  'tool_result',
  'image',
  'error',
  'status',
  'call_started',
  'call_error',
  'transcript',
  'turn_complete',
  'interrupted',
  'tool_activity',
  'call_ended',
  'narrate',
  'approval',
  'approval_resolved',
  'receipt',
  'grants',
  'push_subscribed',
  'calls',
  'term_snapshot',
  'term_output',
  'term_exit',
  'tick',
  'agent_event',
  'relay_page',
  'environment',
]);

/** `type` of the frames a page sends the relay hosting its call, at `/live` (docs/PROTOCOL.md, "Hosted voice"). */
export const LIVE_FRAMES = /** @type {const} */ ([
  'call_start',
  'say',
  'audio_end',
  'call_end',
  'tool_result',
  'narrate',
]);

/**
 * `type` of the frames a relay hosting a call sends the page at `/live`: the call's frames (of
 * AGENT_FRAMES) and the model's calls, in the form the page sends them on in its sealed session.
 */
const LIVE_CALL_FRAMES = new Set(['call_started', 'call_error', 'call_ended', 'transcript', 'turn_complete',
  'interrupted', 'tool_activity', 'error', 'tool_call', 'cancel']);

/** @typedef {typeof ERROR_CODES[number]} ErrorCode */
/** @typedef {typeof CALL_ERROR_CODES[number]} CallErrorCode */
/** @typedef {typeof CLIENT_FRAMES[number]} ClientFrameType */
/** @typedef {typeof AGENT_FRAMES[number]} AgentFrameType */

/**
 * A frame as it arrived: its `type` checked against AGENT_FRAMES, every other member still
 * unchecked network input.
 * @typedef {{type: AgentFrameType} & Record<string, any>} AgentFrame
 */

/**
 * A client frame as the page sends it.
 * @typedef {{type: ClientFrameType} & Record<string, unknown>} ClientFrame
 */

/**
 * A frame as the page sends it to the relay hosting its call, at `/live`.
 * @typedef {{type: typeof LIVE_FRAMES[number]} & Record<string, unknown>} LiveFrame
 */

/** @type {ReadonlySet<string>} */
const AGENT_FRAME_SET = new Set(AGENT_FRAMES);

/**
 * The frame in a text message from the agent, or `null` for anything that is not a JSON object
 * with a known `type` (AGENT_FRAMES; anything else is dropped, as docs/PROTOCOL.md asks of unknown frames).
 * @param {string} text
 * @returns {AgentFrame | null}
 */
export function parseAgentFrame(text) {
  let frame;
  try {
    frame = JSON.parse(text);
  } catch {
    return null;
  }
  if (!frame || typeof frame !== 'object' || !AGENT_FRAME_SET.has(frame.type)) return null;
  return frame;
}

/**
 * The frame in a text message from the relay at `/live`, or `null` for anything else (a frame of
 * the pairing included: none may come there).
 * @param {string} text
 * @returns {Record<string, any> | null}
 */
export function parseLiveFrame(text) {
  let frame;
  try {
    frame = JSON.parse(text);
  } catch {
    return null;
  }
  if (!frame || typeof frame !== 'object' || !LIVE_CALL_FRAMES.has(frame.type)) return null;
  return frame;
}

/**
 * A presence notice from the relay: `"\u0001{"type":"presence","peer":"agent","state":…}"`.
 * Also reads the older in-band form `{"type":"__peer",…}` a relay of the previous framing sends.
 * `null` for any other text.
 * @param {string} text
 * @returns {{peer: string, state: 'joined' | 'left'} | null}
 */
export function parseNotice(text) {
  let notice;
  const legacy = text.startsWith('{') && text.includes('"__peer"');
  if (!text.startsWith(NOTICE_PREFIX) && !legacy) return null;
  try {
    notice = JSON.parse(legacy ? text : text.slice(NOTICE_PREFIX.length));
  } catch {
    return null;
  }
  if (!notice || typeof notice !== 'object') return null;
  if (notice.type !== (legacy ? '__peer' : 'presence')) return null;
  if (typeof notice.peer !== 'string' || (notice.state !== 'joined' && notice.state !== 'left')) return null;
  return { peer: notice.peer, state: notice.state };
}
