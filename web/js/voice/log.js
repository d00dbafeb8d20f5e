// @ts-check
// The conversation of a call (docs/PROTOCOL.md, "Voice"): live transcripts (partials grow a line,
// the final text replaces it), the model's tools as they run, and the screenshots they took. An
// `approve` voice could not give (the user's words did not say yes: `no-spoken-consent`) is said
// on its line and on the approval's card, which stays open for a tap.

import { atBottom, base64Bytes, el } from '../dom.js';

/** Transcript lines, tool lines and pictures kept on screen during one call. */
const MAX_LOG_ITEMS = 300;
/** What an approval's card says when voice heard no clear yes for it. */
export const NO_SPOKEN_CONSENT = 'Voice did not hear a clear yes from you for this, so it is still waiting: '
  + 'tap Allow or Deny.';

/**
 * The text part of a conversation line.
 * @param {Element} line
 */
function saidOf(line) {
  const said = line.querySelector('.said');
  if (!(said instanceof HTMLElement)) throw new Error('a conversation line without its text');
  return said;
}

/** @typedef {import('../protocol.js').AgentFrame} AgentFrame */

export class Conversation {
  /** @param {HTMLElement} log `#call-log` */
  constructor(log) {
    this.log = log;
    /** @type {{user: HTMLElement | null, model: HTMLElement | null}} */
    this.lines = { user: null, model: null };
    /** @type {string[]} */
    this.images = [];
    /** @type {Map<string, HTMLElement>} */
    this.tools = new Map();
  }

  clear() {
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
   * @param {AgentFrame} frame
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

  /** @param {AgentFrame} frame */
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
      return;
    }
    const ok = frame.ok !== false;
    said.textContent = ok ? `${name} — done` : `${name} — failed`;
    line.dataset.state = ok ? 'ok' : 'failed';
    this.tools.delete(frame.id);
    if (frame.code === 'no-spoken-consent' && typeof frame.approval === 'string') {
      said.textContent = `${name} — not given: no clear yes was heard; the approval waits for your tap`;
      line.dataset.state = 'waiting';
      showUnheard(frame.approval);
    }
  }

  /** @param {AgentFrame} frame */
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
}

/**
 * Says on every card of `approval` (approvals/panel.js) that voice heard no clear yes for it.
 * @param {string} approval
 */
function showUnheard(approval) {
  for (const card of document.querySelectorAll('.approval-card')) {
    if (!(card instanceof HTMLElement) || card.dataset.approval !== approval) continue;
    const status = card.querySelector('.approval-status');
    if (status) status.textContent = NO_SPOKEN_CONSENT;
    card.dataset.voice = 'unheard';
  }
}
