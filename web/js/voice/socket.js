// @ts-check
// The call socket (docs/PROTOCOL.md, "Hosted voice"): while a call the relay hosts runs, a second
// socket beside the page's sealed session, to the relay's `/live`. The relay runs the model, so it
// hears the call; it never speaks to the laptop. Nothing of the pairing crosses this socket: no
// hello, no session frame. The model's function calls arrive here as `tool_call` frames; the page
// runs each inside its sealed session, marked `"caller":"gemini-hosted"` (the laptop's
// `[policy] hosted` decides, a tap answers what it asks), and sends the relay the laptop's
// `tool_result` — a screenshot stays on the page, the relay hears that one was shown. The notes
// the laptop sends for the model (`narrate`) go to the relay as they came. It opens when a call
// starts and closes when the call ends.

import { AUDIO_PREFIX, parseLiveFrame } from '../protocol.js';
import { VOICE_FRAMES } from '../session/events.js';
import { relayProtocols } from '../session/transport.js';

/**
 * @typedef {import('../dom.js').Failure} Failure
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {import('../seal/channel.js').Bytes} Bytes
 * @typedef {import('../session.js').Session} Session
 */

/** How long the socket may take to open before the call gives up. */
const OPEN_TIMEOUT_MS = 15000;
/** Bytes queued on the socket beyond which microphone frames are dropped (about 1.5 s of audio). */
const MAX_BUFFERED_AUDIO = 48 * 1024;
/** The relay's call ids: its prefix, its socket's random part, a number. Nothing else is carried. */
const RELAY_CALL_ID = /^gemini-hosted-[0-9a-f]{8}-[0-9]{1,12}$/;
/** How the laptop audits the calls carried for the relay's model. */
const HOSTED_CALLER = 'gemini-hosted';
/** The tool the relay's model is never offered: only a tap answers an approval in a hosted call. */
const NEVER_OFFERED = new Set(['approve']);
/** Relay calls carried at once; more are refused `busy`. */
const MAX_CARRIED = 64;

/**
 * Why the relay's `/live` cannot be used, by the HTTP status a plain request to it gets.
 * @type {Record<number, string>}
 */
const LIVE_REFUSALS = { 401: 'proxy-token', 403: 'proxy-token', 404: 'no-voice-relay' };

/**
 * Events: `voice` (the call's frames, and pictures its tools took), `audio` (`{data, at}`, the
 * model's voice) and `closed` (the socket ended before the page closed it).
 */
export class CallSocket extends EventTarget {
  /** @param {Session} session the page's sealed session, which carries the model's calls */
  constructor(session) {
    super();
    this.session = session;
    this.pairing = session.pairing;
    /** @type {WebSocket | null} */
    this.socket = null;
    this.online = false;
    this.closed = false;
    this.bytesIn = 0;
    this.bytesOut = 0;
    /** @type {{resolve: () => void, reject: (error: Failure) => void} | null} */
    this.opening = null;
    /** The tools offered to the model: the laptop's, as its sealed `hello_ok` listed them. @type {string[]} */
    this.tools = [];
    /** Relay calls running in the sealed session. @type {Set<string>} */
    this.carried = new Set();
    /** The laptop sends this call's notes while it runs. */
    this.narrating = false;
    this.onSessionFrame = (/** @type {Event} */ event) => {
      const frame = /** @type {CustomEvent} */ (event).detail;
      if (frame.type === 'narrate' && typeof frame.text === 'string') this.sendJson({ type: 'narrate', text: frame.text });
    };
  }

  /**
   * Opens the socket. Resolves once it is open; rejects with `{code, message}` (a code of
   * voice/sentences.js) when it cannot be.
   * @returns {Promise<void>}
   */
  open() {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.fail({ code: 'call-socket', message: 'The relay did not open it in time.' }),
        OPEN_TIMEOUT_MS);
      this.opening = {
        resolve: () => { clearTimeout(timer); resolve(); },
        reject: (error) => { clearTimeout(timer); reject(error); },
      };
      if (this.pairing.kind !== 'relay') {
        this.fail({ code: 'no-voice-laptop' });
        return;
      }
      const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
      let socket;
      try {
        socket = new WebSocket(`${scheme}//${location.host}/live?code=${this.pairing.code}`, relayProtocols(this.pairing));
      } catch {
        this.fail({ code: 'call-socket', message: 'The relay could not be reached.' });
        return;
      }
      this.socket = socket;
      socket.binaryType = 'arraybuffer';
      socket.onopen = () => {
        const opening = this.opening;
        this.opening = null;
        this.online = true;
        this.session.addEventListener('voice', this.onSessionFrame);
        if (opening) opening.resolve();
      };
      socket.onmessage = (event) => this.onMessage(event.data);
      socket.onclose = () => {
        this.online = false;
        if (this.opening) {
          this.refusal().then((error) => this.fail(error));
        } else if (!this.closed) {
          this.close();
          this.dispatchEvent(new CustomEvent('closed'));
        }
      };
    });
  }

  /**
   * `/live` failed before it opened: a plain request says whether the relay refuses it (a proxy
   * token a browser cannot send, or no hosting any more).
   * @returns {Promise<Failure>}
   */
  async refusal() {
    let status = 0;
    try {
      const response = await fetch(`/live?code=${this.pairing.kind === 'relay' ? this.pairing.code : ''}`,
        { cache: 'no-store', credentials: 'omit' });
      status = response.status;
    } catch {
      status = 0;
    }
    const code = LIVE_REFUSALS[status];
    return code ? { code } : { code: 'call-socket', message: 'The relay refused it.' };
  }

  /** @param {Failure} error */
  fail(error) {
    const opening = this.opening;
    this.opening = null;
    this.close();
    if (opening) opening.reject(error);
  }

  /** @param {string | ArrayBuffer} data */
  onMessage(data) {
    if (typeof data !== 'string') {
      this.bytesIn += data.byteLength;
      if (this.online) this.dispatchEvent(new CustomEvent('audio', { detail: { data, at: performance.now() } }));
      return;
    }
    this.bytesIn += data.length;
    const frame = this.online ? parseLiveFrame(data) : null;
    if (!frame) return;
    if (frame.type === 'tool_call') this.carry(frame);
    else if (frame.type === 'cancel') this.cancel(frame);
    else if (VOICE_FRAMES.has(frame.type)) {
      if (frame.type === 'call_started') this.narrate(true);
      this.dispatchEvent(new CustomEvent('voice', { detail: frame }));
    }
  }

  /**
   * One of the model's calls: run in the sealed session as the laptop's hosted caller, its result
   * sent back. Only the relay's own ids and the offered tools are carried.
   * @param {Record<string, any>} frame
   */
  carry(frame) {
    const id = typeof frame.id === 'string' && RELAY_CALL_ID.test(frame.id) ? frame.id : '';
    if (!id || this.carried.has(id)) return;
    const refuse = (/** @type {string} */ code, /** @type {string} */ message) =>
      this.sendJson({ type: 'tool_result', id, ok: false, error: { code, message } });
    const name = typeof frame.name === 'string' ? frame.name : '';
    if (!this.tools.includes(name)) {
      refuse('unknown-tool', 'this call was not offered that tool');
      return;
    }
    if (this.carried.size >= MAX_CARRIED) {
      refuse('busy', 'too many calls are running; try again shortly');
      return;
    }
    const args = frame.args && typeof frame.args === 'object' && !Array.isArray(frame.args) ? frame.args : {};
    const env = typeof frame.env === 'string' && frame.env ? frame.env : undefined;
    /** @type {AgentFrame | undefined} */
    let shown;
    const onImage = (/** @type {AgentFrame} */ image) => {
      shown = image;
      this.dispatchEvent(new CustomEvent('voice', { detail: image }));
    };
    this.carried.add(id);
    this.session.call(name, args, { env, id, caller: HOSTED_CALLER, onImage }).done.then(({ result }) => {
      // The picture stays on the page; the model hears that one was shown.
      const said = shown ? {
        shown_on_phone: true, width: shown.width, height: shown.height,
        message: `The screenshot (${shown.width}x${shown.height}) is shown on the user's phone.`,
      } : result;
      this.sendJson({ type: 'tool_result', id, ok: true, result: said });
    }, (/** @type {{code?: string, message?: string}} */ error) => {
      refuse(error && error.code ? error.code : 'internal', error && error.message ? error.message : 'the call failed');
    }).finally(() => this.carried.delete(id));
  }

  /**
   * The model cancelled a call: the laptop stops it and its `cancelled` goes back as its result.
   * @param {Record<string, any>} frame
   */
  cancel(frame) {
    if (typeof frame.id === 'string' && this.carried.has(frame.id)) this.session.cancel(frame.id);
  }

  /**
   * Asks the laptop for this call's notes (narration, approvals read back), or stops them.
   * @param {boolean} on
   */
  narrate(on) {
    if (this.narrating === on) return;
    this.narrating = on;
    this.session.sendJson({ type: 'narration', on });
  }

  /**
   * @param {string | Bytes} data
   * @returns {boolean}
   */
  send(data) {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    this.bytesOut += typeof data === 'string' ? data.length : data.byteLength;
    socket.send(data);
    return true;
  }

  /**
   * Sends one of the call's JSON frames; false when the socket is not open. `call_start` names
   * the laptop's tools (its sealed `hello_ok` list), which the relay declares to its model.
   * @param {import('../protocol.js').LiveFrame} frame
   */
  sendJson(frame) {
    if (frame.type === 'call_start') {
      const listed = this.session.hello && Array.isArray(this.session.hello.tools) ? this.session.hello.tools : [];
      this.tools = listed.filter((/** @type {unknown} */ name) => typeof name === 'string' && !NEVER_OFFERED.has(name));
      return this.online && this.send(JSON.stringify({ type: 'call_start', tools: this.tools }));
    }
    return this.online && this.send(JSON.stringify(frame));
  }

  /**
   * Sends microphone audio; a slow uplink drops frames instead of queueing seconds of stale audio.
   * @param {Bytes} bytes
   */
  sendAudio(bytes) {
    if (!this.online || !this.socket || bytes[0] !== AUDIO_PREFIX) return false;
    if (this.socket.bufferedAmount > MAX_BUFFERED_AUDIO) return false;
    return this.send(bytes);
  }

  /** Ends the call at the relay: `call_end`, then the socket closes. */
  hangUp() {
    this.sendJson({ type: 'call_end' });
    this.close();
  }

  /** Closes the socket for good; the relay's call ends with it, the laptop's notes stop. */
  close() {
    const opening = this.opening;
    this.opening = null;
    // Closed while it opened (the session went offline, the page left): the call never starts.
    if (opening) opening.reject({ code: 'call-socket', message: 'The call ended before its socket opened.' });
    this.closed = true;
    this.online = false;
    this.session.removeEventListener('voice', this.onSessionFrame);
    this.narrate(false);
    const socket = this.socket;
    this.socket = null;
    if (socket && socket.readyState !== WebSocket.CLOSED) socket.close(1000, 'call ended');
  }
}
