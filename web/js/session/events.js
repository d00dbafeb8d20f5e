// @ts-check
// What a session tells the page, as events on the `Session` (an EventTarget), and the one way a
// panel listens to them: `onSession` moves its listeners to each new session as the laptop in
// use changes, so no panel keeps hearing the laptop it left.
//
// Events (their `detail`):
//   state       {state, text, attempt, sealed}  where the connection stands (session.js)
//   hello       the laptop's `hello_ok`, each time a session goes online
//   introduced  the `hello_ok` of a held session, whose laptop proved the pairing (app.js asks
//               "Add this laptop?" with its name)
//   error       an `error` frame outside any call
//   approval    `approval`, `approval_resolved` (for whoever follows)
//   status      the laptop's `status` answer
//   term        `term_snapshot`, `term_output`, `term_exit` of the terminals this page watches
//   agent_event a coding-agent session's event
//   relay_page  what the laptop found comparing the relay's page with its own
//   environment whether the laptop reaches one of its environments (for whoever follows)
//   calls       calls this page did not start, adopted (`AdoptedCall[]`)
//   voice       a call's frames, and pictures a call's tools took
//   audio       `{data, at}`: a call's audio, with its prefix byte

/**
 * @typedef {import('../store.js').Store} Store
 * @typedef {import('../session.js').Session} Session
 * @typedef {'state' | 'hello' | 'introduced' | 'error' | 'approval' | 'status' | 'term' | 'agent_event' | 'relay_page' | 'calls'
 *   | 'environment' | 'voice' | 'audio'} SessionEventName
 */

/**
 * Frames handed on as events while the session is online, by `type`: the event each is
 * dispatched as. (Call frames go to the call they belong to; the hello's own are the session's.)
 * @type {Readonly<Record<string, SessionEventName>>}
 */
export const EVENT_OF_FRAME = Object.freeze({
  error: 'error',
  approval: 'approval',
  approval_resolved: 'approval',
  grants: 'approval',
  status: 'status',
  term_snapshot: 'term',
  term_output: 'term',
  term_exit: 'term',
  agent_event: 'agent_event',
  relay_page: 'relay_page',
  environment: 'environment',
});

/** Frames of a voice call, handed to whoever speaks on the socket (voice/panel.js). */
export const VOICE_FRAMES = new Set(['call_started', 'call_error', 'call_ended', 'transcript', 'turn_complete',
  'interrupted', 'tool_activity', 'narrate']);

/**
 * Hands one frame of an online session on: as the event it is dispatched as, to the call it
 * belongs to (session/calls.js), or to a voice call.
 * @param {Session} session
 * @param {import('../protocol.js').AgentFrame} frame
 */
export function handOn(session, frame) {
  const tell = (/** @type {SessionEventName} */ name, /** @type {unknown} */ detail) =>
    session.dispatchEvent(new CustomEvent(name, { detail }));
  if (frame.type === 'calls') {
    const first = session.calls.asked;
    const adopted = session.calls.named(frame);
    if (adopted.length) tell('calls', adopted);
    // The laptop said what it holds: what waits in the outbox goes now, once (outbox.js).
    if (first) session.outbox.flush(session.calls.lastNamed, (sent) => session.sendJson(sent));
  } else if (frame.type === 'receipt') {
    session.outbox.settle(String(frame.id), frame.ok === true, frame.error);
  } else if (frame.type in EVENT_OF_FRAME) {
    tell(EVENT_OF_FRAME[frame.type], frame);
  } else if (!session.calls.take(frame) && (VOICE_FRAMES.has(frame.type) || frame.type === 'image')) {
    // Voice frames, and pictures a voice call's tools took (their ids are not ours).
    tell('voice', frame);
  }
}

/**
 * Listens to the session in use: each handler (event name → what to do with the event's
 * `detail`) is moved to every new session the store names, and `changed(session, previous)`
 * runs after each move (and once at the start) so the panel can forget the previous laptop.
 * @param {Store} store
 * @param {Partial<Record<SessionEventName, (detail: any) => void>>} handlers
 * @param {(session: Session | null, previous: Session | null) => void} [changed]
 */
export function onSession(store, handlers, changed) {
  const listeners = Object.entries(handlers).map(([name, handle]) =>
    /** @type {const} */ ([name, (/** @type {Event} */ event) => handle(/** @type {CustomEvent} */ (event).detail)]));
  /** @type {Session | null} */
  let current = null;
  store.watch(['session'], ({ session }) => {
    const previous = current;
    for (const [name, listener] of listeners) {
      if (previous) previous.removeEventListener(name, listener);
      if (session) session.addEventListener(name, listener);
    }
    current = session;
    if (changed) changed(session, previous);
  });
}
