// @ts-check
// Voice calls (see docs/PROTOCOL.md, "Voice"): `call_start`, the microphone as 0x01 + PCM16LE
// 16 kHz frames, the laptop's 24 kHz voice played as it arrives, live transcripts, tool activity,
// screenshots, mute, typed `say`, and push-to-talk (`audio_end` on release).
//
// A call speaks on a *link*: any EventTarget with `sendJson(frame)`, `sendAudio(bytes)`, `online`,
// `bytesIn`/`bytesOut`, that dispatches `voice` (call frames) and `audio` (binary frames): the
// sealed session when the laptop hosts the call, else a call socket to the relay's `/live`
// (socket.js), opened for the call and closed when it ends. The session stays sealed beside it.

import { part, show } from '../dom.js';
import { Call, freshStats } from './call.js';
import { Conversation } from './log.js';
import { CALL_HOSTS, UNHOSTED, callSentence, clockText } from './sentences.js';
import { CallSocket } from './socket.js';

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
    this.section = buttons;
    this.callButton = part(buttons, 'call', HTMLButtonElement);
    this.endButton = part(buttons, 'end-call', HTMLButtonElement);
    this.muteButton = part(buttons, 'mute', HTMLButtonElement);
    this.note = part(buttons, 'call-note', HTMLElement);
    this.closeButton = part(panel, 'call-close', HTMLButtonElement);
    this.panel = panel;
    this.conversation = new Conversation(part(panel, 'call-log', HTMLElement));
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
    const socket = new CallSocket(session);
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
    this.conversation.clear();
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
    this.conversation.finishLines();
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
        if (call) this.conversation.onTranscript(frame);
        return;
      case 'turn_complete':
        this.conversation.finishLines();
        return;
      case 'interrupted':
        if (call) call.interrupt();
        this.conversation.finishLine('model', true);
        return;
      case 'tool_activity':
        if (call) this.conversation.onToolActivity(frame);
        return;
      case 'image':
        if (call) this.conversation.onImage(frame);
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
      this.conversation.addLine('user', text, true, 'typed');
    }
  }

  reset() {
    this.finish();
    this.conversation.clear();
    this.panel.hidden = true;
    show(this.error);
  }
}
