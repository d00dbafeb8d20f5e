// @ts-check
// Voice calls (see docs/PROTOCOL.md, "Voice"): `call_start`, the microphone as 0x01 + PCM16LE
// 16 kHz frames, the laptop's 24 kHz voice played as it arrives, live transcripts, tool activity,
// screenshots, mute, typed `say`, and push-to-talk (`audio_end` on release).
//
// A call speaks on a *link*: any EventTarget with `sendJson(frame)`, `sendAudio(bytes)`, `online`,
// `bytesIn`/`bytesOut`, that dispatches `voice` (call frames) and `audio` (binary frames): the
// sealed session when the laptop hosts the call, else a call socket to the relay's `/live`
// (socket.js), opened for the call and closed when it ends. The session stays sealed beside it.

import { atBottom, base64Bytes, el, part, sentence, show } from '../dom.js';
import { Call, freshStats } from './call.js';
import { CallSocket } from './socket.js';

/** Transcript lines, tool lines and pictures kept on screen during one call. */
const MAX_LOG_ITEMS = 300;

/**
 * The text part of a conversation line.
 * @param {Element} line
 */
function saidOf(line) {
  const said = line.querySelector('.said');
  if (!(said instanceof HTMLElement)) throw new Error('a conversation line without its text');
  return said;
}

/**
 * What each call_error code means, as a sentence, when the laptop hosts the call: every code of
 * protocol.js (the type says so), and the page's own.
 * @type {Record<import('../protocol.js').CallErrorCode | 'mic-denied' | 'no-mic' | 'no-audio' | 'offline'
 *   | 'call-socket' | 'no-voice-laptop' | 'no-voice-relay' | 'proxy-token' | 'sealed-required', string>}
 */
const CALL_ERRORS = {
  'bad-key': 'The laptop\'s Gemini API key was refused. Check GEMINI_API_KEY on the laptop.',
  'gemini-refused': 'Gemini refused the call\'s request.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the laptop asked for.',
  'gemini-unavailable': 'Gemini is busy or out of quota right now; try again in a minute.',
  'gemini-unreachable': 'The laptop cannot reach Gemini. Check its internet connection.',
  'gemini-closed': 'Gemini ended the call and it could not be resumed.',
  'busy': 'The call is not keeping up; try again in a moment.',
  'unavailable': 'This laptop does not host voice calls. Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-call': 'No call is running on the laptop.',
  'at-capacity': 'As many calls as allowed are running; try again later.',
  'too-many-calls': 'This network runs or just started as many relay calls as its operator allows; try again in a minute.',
  'budget-spent': 'The relay\'s voice minutes for today are spent; they come back at midnight UTC.',
  'mic-denied': 'The microphone is blocked. Allow it for this page in the browser\'s site settings.',
  'no-mic': 'No microphone was found.',
  'no-audio': 'This browser cannot run a voice call here (it needs https and Web Audio).',
  'offline': 'The call ended: the laptop went offline.',
  'call-socket': 'The relay\'s socket for this call did not open, or closed; try the call again.',
  'no-voice-laptop': 'There is no voice on this laptop: it does not host calls itself. '
    + 'Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-voice-relay': 'There is no voice on this relay, and this laptop does not host calls itself. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY, or pair it through a relay that hosts voice.',
  'proxy-token': 'This relay hosts voice only for apps that send it a token, which a browser cannot do. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY to call from here.',
  'sealed-required': 'This laptop accepts only sealed sessions, and a call the relay hosts cannot be sealed '
    + '(the relay runs the model, so it must hear the call); this session stays sealed. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY to call from here.',
};

// The same codes when the relay hosts the call (at `/live`): the key and the limits are its operator's.
const RELAY_CALL_ERRORS = {
  ...CALL_ERRORS,
  'bad-key': 'The relay\'s Gemini API key was refused. Tell the relay\'s operator.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the relay asked for.',
  'gemini-unreachable': 'The relay cannot reach Gemini right now; try again in a minute.',
  'unavailable': 'The relay cannot start a call until the laptop has answered this page.',
  'no-call': 'No call is running on the relay.',
  'at-capacity': 'The relay is running as many calls as its operator allows; try again later.',
};

/**
 * Where a call runs, as the call panel says it when the call starts: a call the relay hosts is
 * heard by the relay (it is not sealed).
 * @type {Record<'laptop' | 'relay', string>}
 */
const CALL_HOSTS = { laptop: 'on the laptop', relay: 'the relay runs the model and hears this call' };

/** A call_error (or a page-side failure) as a sentence with its code; `host` is who runs the call. */
/**
 * @param {Failure} error
 * @param {string} [host]
 */
export const callSentence = (error, host = 'laptop') =>
  sentence(error, host === 'relay' ? RELAY_CALL_ERRORS : CALL_ERRORS);

/** The refusals that say the relay's hosted voice cannot serve this laptop at all. */
const UNHOSTED = new Set(['proxy-token', 'no-voice-relay', 'sealed-required']);

/** "1:05" for 65 s; "1:02:03" past an hour. */
/** @param {number} seconds */
function clockText(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const mm = String(Math.floor((s % 3600) / 60));
  const ss = String(s % 60).padStart(2, '0');
  return s >= 3600 ? `${Math.floor(s / 3600)}:${mm.padStart(2, '0')}:${ss}` : `${mm}:${ss}`;
}

/**
 * @typedef {import('../session.js').Session} Link
 * @typedef {import('../store.js').VoiceOffer} VoiceOffer
 * @typedef {import('../app.js').Context} Context
 * @typedef {import('../dom.js').Failure} Failure
 */

export class Voice {
  /**
   * @param {{buttons: HTMLElement, panel: HTMLElement}} roots `#voice` (Call, Mute, End call in
   *   the header) and `#call-panel` (the conversation)
   * @param {Context} context
   */
  constructor({ buttons, panel }, { store }) {
    this.store = store;
    /** @type {Link | null} */
    this.link = null;
    /** @type {Call | null} */
    this.call = null;
    /** @type {VoiceOffer | null} */
    this.offer = null;
    this.last = freshStats();
    this.muted = false;
    this.talking = false;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.timer = undefined;
    /** @type {{user: HTMLElement | null, model: HTMLElement | null}} */
    this.lines = { user: null, model: null };
    /** @type {string[]} */
    this.images = [];
    /** @type {Map<string, HTMLElement>} */
    this.tools = new Map();
    this.section = buttons;
    this.callButton = part(buttons, 'call', HTMLButtonElement);
    this.endButton = part(buttons, 'end-call', HTMLButtonElement);
    this.muteButton = part(buttons, 'mute', HTMLButtonElement);
    this.note = part(buttons, 'call-note', HTMLElement);
    this.closeButton = part(panel, 'call-close', HTMLButtonElement);
    this.panel = panel;
    this.log = part(panel, 'call-log', HTMLElement);
    this.pushToTalk = part(panel, 'push-to-talk', HTMLInputElement);
    this.talkButton = part(panel, 'talk', HTMLButtonElement);
    this.level = part(panel, 'call-level', HTMLElement);
    this.status = part(panel, 'call-status', HTMLElement);
    this.hostLine = part(panel, 'call-host', HTMLElement);
    this.duration = part(panel, 'call-duration', HTMLElement);
    this.error = part(panel, 'call-error', HTMLElement);
    this.sayField = part(panel, 'say', HTMLInputElement);
    this.sayButton = part(panel, 'say-send', HTMLButtonElement);
    this.callButton.addEventListener('click', () => this.start());
    this.endButton.addEventListener('click', () => this.end());
    this.closeButton.addEventListener('click', () => this.close());
    this.muteButton.addEventListener('click', () => this.setMuted(!this.muted));
    this.pushToTalk.addEventListener('change', () => this.setPushToTalk());
    part(panel, 'say-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.say();
    });
    this.wireTalkButton();
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible' && this.call) this.call.onVisible();
    });
    for (const kind of ['touchend', 'click']) {
      document.addEventListener(kind, () => this.call && this.call.onTap(), { capture: true, passive: true });
    }
    // Figures for the tests and the bench: the running call's, else the last one's.
    Object.defineProperty(globalThis, 'voxaVoice', { get: () => (this.call ? this.call.stats : this.last) });
    // Another laptop: a running call ends and the conversation goes.
    store.watch(['session'], ({ session }) => {
      this.reset();
      this.attach(session);
    });
    store.watch(['voice'], ({ voice }) => this.setOffer(voice));
  }

  /**
   * Speaks on `link` from now on (the session socket, to the laptop or to `/live`); a running call ends.
   * @param {Link | null} link
   */
  attach(link) {
    if (this.link && this.link !== link) this.finish({ code: 'offline' });
    this.link = link;
    this.offer = null;
    this.refresh();
    if (!link) return;
    this.listen(link);
    link.addEventListener('state', (event) => {
      if (/** @type {CustomEvent} */ (event).detail.state !== 'online' && this.call) {
        // A call the relay hosts would outlive the laptop's session: it is ended there too.
        this.call.link.hangUp();
        this.finish({ code: 'offline' });
      }
      this.refresh();
    });
    this.refresh();
  }

  /**
   * Takes the call's frames and voice from `link` while the running call speaks on it (or, for
   * a `call_error` out of a call, while none runs).
   * @param {Link | CallSocket} link
   */
  listen(link) {
    const ours = () => !this.call || this.call.link === link;
    link.addEventListener('voice', (event) => {
      if (ours()) this.onFrame(/** @type {CustomEvent} */ (event).detail);
    });
    link.addEventListener('audio', (event) => {
      const { detail } = /** @type {CustomEvent} */ (event);
      if (this.call && this.call.link === link) this.call.onAudio(detail.data, detail.at);
    });
  }

  /**
   * A socket of its own for a call the relay hosts, beside the sealed session (socket.js).
   * @param {Link} session
   */
  callSocket(session) {
    const socket = new CallSocket(session.pairing, /** @type {CryptoKey} */ (session.key));
    this.listen(socket);
    socket.addEventListener('closed', () => {
      if (this.call && this.call.link === socket) this.finish({ code: 'call-socket', message: 'The relay closed it.' });
    });
    return socket;
  }

  /**
   * The relay's hosted voice cannot serve this laptop: "Call" says why from now on.
   * @param {Link} session
   * @param {string} reason a code of UNHOSTED
   */
  refuseHosting(session, reason) {
    session.liveRefused = reason;
    if (this.link === session) this.store.set({ voice: { reason } });
  }

  /**
   * Who hosts calls on this link: `{host: 'laptop'}` (self-hosted), `{host: 'relay'}` (`/live`),
   * or `{reason}` (a code of CALL_ERRORS) saying why there is no voice, which "Call" then shows.
   * @param {VoiceOffer | null} offer
   */
  setOffer(offer) {
    this.offer = offer;
    this.refresh();
  }

  /** Who runs the call: its sentences name the laptop or the relay. */
  host() {
    return (this.offer && 'host' in this.offer && this.offer.host) || 'laptop';
  }

  refresh() {
    const online = !!(this.link && this.link.online);
    this.section.hidden = !this.offer && !this.call;
    // Plainly, before anyone taps: no voice here (Call then says why and how to get it).
    const none = !!this.offer && !('host' in this.offer);
    this.note.hidden = !none || !!this.call;
    this.callButton.classList.toggle('none', none);
    this.closeButton.hidden = !!this.call;
    this.callButton.hidden = !!this.call;
    this.callButton.disabled = !online;
    this.endButton.hidden = !this.call;
    this.muteButton.hidden = !this.call;
    this.muteButton.setAttribute('aria-pressed', String(this.muted));
    this.talkButton.hidden = !this.pushToTalk.checked;
    this.sayField.disabled = !(this.call && this.call.live);
    this.sayButton.disabled = !(this.call && this.call.live);
  }

  /** True while microphone frames should go out: always hands-free, only while held with push-to-talk. */
  sending() {
    return !this.pushToTalk.checked || this.talking;
  }

  start() {
    if (this.call || !this.link || !this.link.online) return;
    this.clearLog();
    if (!this.offer || !('host' in this.offer)) {
      // No voice here: the panel says why, in a sentence.
      this.panel.hidden = false;
      this.panel.dataset.voice = 'none';
      this.setStatus('No voice calls here');
      this.hostLine.textContent = '';
      show(this.error, callSentence({ code: (this.offer && this.offer.reason) || 'no-voice-laptop' }));
      return;
    }
    delete this.panel.dataset.voice;
    // Where the call runs matters: the relay's operator can hear a call the relay hosts.
    this.hostLine.textContent = CALL_HOSTS[this.offer.host];
    show(this.error);
    this.setMuted(false);
    const session = this.link;
    // A call the relay hosts speaks on a socket of its own; the session stays sealed.
    const socket = this.offer.host === 'relay' ? this.callSocket(session) : null;
    const call = new Call(this, socket || session);
    this.call = call;
    this.panel.hidden = false;
    this.setStatus('Starting the call…');
    this.refresh();
    call.begin(socket ? socket.open() : undefined).catch((error) => {
      if (this.call !== call) return;
      this.finish(error && error.code ? error : { code: 'no-audio' });
      if (socket && error && UNHOSTED.has(error.code)) this.refuseHosting(session, error.code);
    });
  }

  /** Closes the call panel (no call runs: it showed why there is no voice, or how the last call ended). */
  close() {
    if (this.call) return;
    this.panel.hidden = true;
    this.callButton.focus();
  }

  /** "End call": the laptop closes the Gemini session; the page stops at once. */
  end() {
    if (!this.call) return;
    this.call.link.sendJson({ type: 'call_end' });
    this.finish();
  }

  /**
   * Ends the call on the page, with a reason when it failed.
   * @param {Failure | null} [error]
   * @param {number} [duration] seconds, as the host counted them
   */
  finish(error, duration) {
    const call = this.call;
    if (!call) return;
    const seconds = duration ?? call.seconds();
    call.tearDown();
    // The call socket lives as long as its call.
    if (call.link instanceof CallSocket) call.link.close();
    this.last = call.stats;
    this.call = null;
    this.talking = false;
    clearInterval(this.timer);
    this.timer = undefined;
    this.finishLines();
    this.level.style.setProperty('--level', '0');
    this.setStatus(seconds > 0 ? `Call ended after ${clockText(seconds)}` : 'Call ended');
    this.duration.textContent = '';
    if (error) show(this.error, callSentence(error, this.host()));
    this.refresh();
  }

  /** @param {import('../protocol.js').AgentFrame} frame */
  onFrame(frame) {
    const call = this.call;
    switch (frame.type) {
      case 'call_started':
        if (!call) return;
        call.onStarted();
        this.setStatus(this.pushToTalk.checked ? 'Hold to talk' : 'Listening');
        this.timer = setInterval(() => this.tick(), 1000);
        this.tick();
        this.refresh();
        return;
      case 'call_error':
        if (call) this.finish(/** @type {Failure} */ (frame));
        else show(this.error, callSentence(/** @type {Failure} */ (frame), this.host()));
        return;
      case 'call_ended':
        if (call) this.finish(null, Number(frame.duration_s) || undefined);
        return;
      case 'transcript':
        if (call) this.onTranscript(frame);
        return;
      case 'turn_complete':
        this.finishLines();
        return;
      case 'interrupted':
        if (call) call.interrupt();
        this.finishLine('model', true);
        return;
      case 'tool_activity':
        if (call) this.onToolActivity(frame);
        return;
      case 'image':
        if (call) this.onImage(frame);
        return;
      default:
    }
  }

  tick() {
    if (this.call && this.call.live) this.duration.textContent = clockText(this.call.seconds());
  }

  /** @param {string} text */
  setStatus(text) {
    this.status.textContent = text;
  }

  /** @param {boolean} playing */
  showSpeaking(playing) {
    if (!this.call || !this.call.live) return;
    const idle = this.pushToTalk.checked ? (this.talking ? 'Listening' : 'Hold to talk') : 'Listening';
    this.setStatus(playing ? 'Speaking' : this.muted ? 'Muted' : idle);
  }

  /** @param {number} level */
  showLevel(level) {
    const shown = this.muted || !this.sending() ? 0 : Math.min(1, level * 4);
    this.level.style.setProperty('--level', shown.toFixed(2));
  }

  /** @param {boolean} muted */
  setMuted(muted) {
    this.muted = muted;
    this.refresh();
    this.showSpeaking(false);
  }

  setPushToTalk() {
    this.talking = false;
    this.refresh();
    this.showSpeaking(false);
  }

  wireTalkButton() {
    /** @param {PointerEvent | KeyboardEvent} event */
    const down = (event) => {
      event.preventDefault();
      if (event instanceof PointerEvent) this.talkButton.setPointerCapture(event.pointerId);
      this.setTalking(true);
    };
    const up = () => this.setTalking(false);
    this.talkButton.addEventListener('pointerdown', down);
    this.talkButton.addEventListener('pointerup', up);
    this.talkButton.addEventListener('pointercancel', up);
    this.talkButton.addEventListener('lostpointercapture', up);
    this.talkButton.addEventListener('contextmenu', (event) => event.preventDefault());
    this.talkButton.addEventListener('keydown', (event) => {
      if ((event.key === ' ' || event.key === 'Enter') && !event.repeat) {
        event.preventDefault();
        this.setTalking(true);
      }
    });
    this.talkButton.addEventListener('keyup', (event) => {
      if (event.key === ' ' || event.key === 'Enter') this.setTalking(false);
    });
  }

  /**
   * Push-to-talk: frames flow while held; the release ends the utterance with `audio_end`.
   * @param {boolean} talking
   */
  setTalking(talking) {
    if (talking === this.talking) return;
    this.talking = talking;
    this.talkButton.setAttribute('aria-pressed', String(talking));
    if (!talking && this.call && this.call.live) {
      this.call.link.sendJson({ type: 'audio_end' });
      this.call.stats.audioEnds += 1;
    }
    this.showSpeaking(false);
  }

  say() {
    const field = this.sayField;
    const text = field.value.trim();
    if (!text || !this.call || !this.call.live) return;
    if (this.call.link.sendJson({ type: 'say', text })) {
      field.value = '';
      this.addLine('user', text, true, 'typed');
    }
  }

  // --- the conversation log -----------------------------------------------------------------

  clearLog() {
    for (const url of this.images) URL.revokeObjectURL(url);
    this.images = [];
    this.tools.clear();
    this.lines = { user: null, model: null };
    this.log.replaceChildren();
  }

  /** @param {HTMLElement} node */
  append(node) {
    const follow = atBottom(this.log);
    this.log.append(node);
    for (let first = this.log.firstElementChild; first && this.log.childElementCount > MAX_LOG_ITEMS;
      first = this.log.firstElementChild) {
      const image = first.querySelector('img');
      if (image && image.src.startsWith('blob:')) URL.revokeObjectURL(image.src);
      first.remove();
    }
    if (follow) this.log.scrollTop = this.log.scrollHeight;
  }

  /**
   * @param {'user' | 'model'} role
   * @param {string} text
   * @param {boolean} final
   * @param {string} [note]
   */
  addLine(role, text, final, note) {
    const line = el('li', { class: `line ${role}${final ? '' : ' partial'}` },
      el('span', { class: 'who', text: role === 'user' ? 'You' : 'Laptop' }),
      el('span', { class: 'said', text }));
    if (note) line.dataset.note = note;
    this.append(line);
    return line;
  }

  /**
   * Partials grow the speaker's current line; the final text replaces it.
   * @param {import('../protocol.js').AgentFrame} frame
   */
  onTranscript(frame) {
    /** @type {'user' | 'model'} */
    const role = frame.role === 'user' ? 'user' : 'model';
    const text = typeof frame.text === 'string' ? frame.text : '';
    // A new user utterance closes the model's line and the other way round.
    this.finishLine(role === 'user' ? 'model' : 'user');
    let line = this.lines[role];
    if (!line) {
      line = this.addLine(role, '', false);
      this.lines[role] = line;
    }
    const said = saidOf(line);
    if (frame.final) {
      said.textContent = text;
      this.finishLine(role);
    } else {
      said.textContent += text;
    }
    const follow = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 80;
    if (follow) this.log.scrollTop = this.log.scrollHeight;
  }

  /**
   * @param {'user' | 'model'} role
   * @param {boolean} [cut] the speaker was interrupted
   */
  finishLine(role, cut) {
    const line = this.lines[role];
    if (!line) return;
    line.classList.remove('partial');
    if (cut) line.classList.add('cut');
    if (!saidOf(line).textContent) line.remove();
    this.lines[role] = null;
  }

  finishLines() {
    this.finishLine('user');
    this.finishLine('model');
  }

  /** @param {import('../protocol.js').AgentFrame} frame */
  onToolActivity(frame) {
    const name = typeof frame.name === 'string' ? frame.name : 'tool';
    let line = this.tools.get(frame.id);
    if (!line) {
      line = el('li', { class: 'line tool' }, el('span', { class: 'who', text: 'Tool' }), el('span', { class: 'said' }));
      this.tools.set(frame.id, line);
      this.append(line);
    }
    const said = saidOf(line);
    if (frame.state === 'started') {
      said.textContent = `${name} — running…`;
      line.dataset.state = 'running';
    } else {
      const ok = frame.ok !== false;
      said.textContent = ok ? `${name} — done` : `${name} — failed`;
      line.dataset.state = ok ? 'ok' : 'failed';
      this.tools.delete(frame.id);
    }
  }

  /** @param {import('../protocol.js').AgentFrame} frame */
  onImage(frame) {
    if (typeof frame.data !== 'string') return;
    const mime = typeof frame.mime === 'string' && frame.mime.startsWith('image/') ? frame.mime : 'image/png';
    let url;
    try {
      url = URL.createObjectURL(new Blob([base64Bytes(frame.data)], { type: mime }));
    } catch {
      return;
    }
    this.images.push(url);
    const image = el('img', { src: url, alt: `Screenshot during the call, ${frame.width} × ${frame.height}` });
    this.append(el('li', { class: 'line picture' }, image));
  }

  reset() {
    this.finish();
    this.clearLog();
    this.panel.hidden = true;
    show(this.error);
  }
}
