// @ts-check
// The call socket (docs/PROTOCOL.md, "Hosted voice"): while a call the relay hosts runs, a second
// socket beside the page's sealed session, to the relay's `/live`, with a place of its own on the
// code. The relay runs the model, so it must read what this socket carries: its hello is
// protocol 2 (the proofs are made here; the token never crosses the relay), and it carries the
// call only — `call_start`, microphone and speaker audio, `say`, `audio_end`, `call_end` and the
// call's own frames. Everything else, approvals of the call's tools included, stays on the sealed
// session. It opens when a call starts and closes when the call ends.

import { AUDIO_PREFIX, PROTOCOL, parseAgentFrame, parseNotice } from '../protocol.js';
import { VOICE_FRAMES } from '../session/events.js';
import { CLIENT, helloProof, randomHex, sameText } from '../session/hello.js';
import { relayProtocols } from '../session/transport.js';

/**
 * @typedef {import('../dom.js').Failure} Failure
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {import('../seal/channel.js').Bytes} Bytes
 */

/** The call socket's client name, so `status` tells it from the sealed session beside it. */
const CALL_CLIENT = `${CLIENT} hosted-call`;
/** How long the socket may take to open and prove the laptop before the call gives up. */
const OPEN_TIMEOUT_MS = 15000;
/** Bytes queued on the socket beyond which microphone frames are dropped (about 1.5 s of audio). */
const MAX_BUFFERED_AUDIO = 48 * 1024;

/**
 * Why the relay's `/live` cannot be used, by the HTTP status a plain request to it gets.
 * @type {Record<number, string>}
 */
const LIVE_REFUSALS = { 401: 'proxy-token', 403: 'proxy-token', 404: 'no-voice-relay' };

/**
 * Events: `voice` (the call's frames), `audio` (`{data, at}`, the model's voice) and `closed`
 * (the socket ended before the page closed it).
 */
export class CallSocket extends EventTarget {
  /**
   * @param {import('../pairings.js').Pairing} pairing a relay pairing
   * @param {CryptoKey} key the pairing token as the hello proofs' key
   */
  constructor(pairing, key) {
    super();
    this.pairing = pairing;
    this.key = key;
    /** @type {WebSocket | null} */
    this.socket = null;
    this.online = false;
    this.closed = false;
    this.bytesIn = 0;
    this.bytesOut = 0;
    /** @type {{resolve: () => void, reject: (error: Failure) => void} | null} */
    this.opening = null;
    /** @type {{agentNonce: string, clientNonce: string} | null} */
    this.challenge = null;
  }

  /**
   * Opens the socket and says hello. Resolves once the laptop's `hello_ok` proved it holds the
   * pairing; rejects with `{code, message}` (a code of voice/panel.js's sentences) when not.
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
      let opened = false;
      socket.onopen = () => { opened = true; };
      socket.onmessage = (event) => this.onMessage(event.data);
      socket.onclose = () => {
        this.online = false;
        if (this.opening) {
          if (opened) this.fail({ code: 'call-socket', message: 'The relay closed it before the laptop answered.' });
          else this.refusal().then((error) => this.fail(error));
        } else if (!this.closed) {
          this.closed = true;
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
    if (parseNotice(data)) return;
    const frame = parseAgentFrame(data);
    if (!frame) return;
    if (this.opening) {
      this.hello(frame).catch(() => this.fail({ code: 'call-socket', message: 'Its hello failed.' }));
    } else if (VOICE_FRAMES.has(frame.type) || frame.type === 'image') {
      this.dispatchEvent(new CustomEvent('voice', { detail: frame }));
    }
  }

  /**
   * The hello of protocol 2, the proofs made here (docs/PROTOCOL.md, "Session start").
   * @param {AgentFrame} frame
   */
  async hello(frame) {
    const socket = this.socket;
    if (!socket) return;
    if (frame.type === 'challenge') {
      const agentNonce = typeof frame.nonce === 'string' ? frame.nonce : '';
      if (frame.protocol !== PROTOCOL || !/^[0-9a-f]{32}$/.test(agentNonce)) {
        this.fail({ code: 'call-socket', message: 'This laptop speaks another protocol version: update voxa.' });
        return;
      }
      const challenge = { agentNonce, clientNonce: randomHex(16) };
      this.challenge = challenge;
      const proof = await helloProof(this.key, 'client', agentNonce, challenge.clientNonce);
      if (this.challenge !== challenge || socket.readyState !== WebSocket.OPEN) return;
      this.send(JSON.stringify({ type: 'hello', protocol: PROTOCOL, nonce: challenge.clientNonce, proof, client: CALL_CLIENT }));
    } else if (frame.type === 'hello_ok' && this.challenge) {
      const { agentNonce, clientNonce } = this.challenge;
      this.challenge = null;
      const expected = await helloProof(this.key, 'agent', agentNonce, clientNonce);
      if (!sameText(frame.proof, expected)) {
        this.fail({ code: 'call-socket', message: 'This is not your laptop: it could not prove it holds the pairing.' });
        return;
      }
      const opening = this.opening;
      this.opening = null;
      this.online = true;
      if (opening) opening.resolve();
    } else if (frame.type === 'error') {
      // A laptop with `[security] require_sealed` refuses every hello the relay can read.
      if (frame.code === 'sealed-session-required') {
        this.fail({ code: 'sealed-required' });
        return;
      }
      const why = typeof frame.code === 'string' && /^[a-z-]{1,40}$/.test(frame.code) ? ` (${frame.code})` : '';
      this.fail({ code: 'call-socket', message: `The laptop refused its hello${why}.` });
    }
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
   * Sends one of the call's JSON frames; false when the socket is not open.
   * @param {import('../protocol.js').ClientFrame} frame
   */
  sendJson(frame) {
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

  /** Closes the socket for good; the relay's call ends with it. */
  close() {
    const opening = this.opening;
    this.opening = null;
    // Closed while it opened (the session went offline, the page left): the call never starts.
    if (opening) opening.reject({ code: 'call-socket', message: 'The call ended before its socket opened.' });
    this.closed = true;
    this.online = false;
    this.challenge = null;
    const socket = this.socket;
    this.socket = null;
    if (socket && socket.readyState !== WebSocket.CLOSED) socket.close(1000, 'call ended');
  }
}
