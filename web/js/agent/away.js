// @ts-check
// "While you were away" (docs/PROTOCOL.md, "Coding-agent sessions"): back after AWAY_MS, a card
// per session that did something meanwhile; "Review changes" shows its edits since it began, file
// by file, and sends a comment as its next prompt (`agent_send`, through the outbox). Counted from
// the events the page replays and when it last looked at each session (localStorage, no secret).

import { el, part, refusalIn, show } from '../dom.js';
import { diffView } from './conversation.js';

/**
 * @typedef {import('./panel.js').Coder} Coder
 * @typedef {{at: number, diff: string, file: string}} Edit
 */

/** Away this long (or a session's events since the page looked span this long), the card shows. */
export const AWAY_MS = 10 * 60 * 1000;
/** Edits and turns kept per session, and sessions' marks, at most. */
const MAX_KEPT = 500;
/** How often a visible page marks what it shows as looked at. */
const LOOK_EVERY_MS = 60 * 1000;

/** What one session did, from its events: the edits that happened, and its turns. */
export class Tally {
  constructor() {
    /** @type {Map<string, Edit>} edits asked, until their result */
    this.asked = new Map();
    /** @type {Edit[]} */
    this.edits = [];
    /** @type {{at: number, cost: number}[]} */
    this.turns = [];
  }

  /** @param {{at: number, event: Record<string, any>}} frame */
  add({ at, event }) {
    const id = String(event.tool_use_id);
    const edit = this.asked.get(id);
    if (event.kind === 'tool_use' && typeof event.diff === 'string' && event.diff) {
      const input = event.input || {};
      this.asked.set(id, { at, diff: event.diff, file: [input.file_path, input.path, event.summary].find((f) => typeof f === 'string') || '' });
    } else if (event.kind === 'tool_result' && edit) {
      this.asked.delete(id);
      if (event.ok === true) this.edits.push({ ...edit, at });
    } else if (event.kind === 'turn_end') {
      this.turns.push({ at, cost: Number.isFinite(event.cost_usd) ? event.cost_usd : 0 });
    }
    for (const list of [this.edits, this.turns]) if (list.length > MAX_KEPT) list.shift();
  }

  /**
   * Each file the edits since `since` changed (its path inside `cwd` relative to it): its diff
   * lines in order, and those added and removed.
   * @param {number} since Unix ms
   * @param {string} cwd
   */
  files(since, cwd) {
    /** @type {Map<string, {lines: string[], added: number, removed: number}>} */
    const files = new Map();
    const named = (/** @type {string} */ path) => {
      const bare = path.replace(/^[ab]\//, '');
      const name = cwd && bare.startsWith(`${cwd}/`) ? bare.slice(cwd.length + 1) : bare;
      if (!files.has(name)) files.set(name, { lines: [], added: 0, removed: 0 });
      return /** @type {{lines: string[], added: number, removed: number}} */ (files.get(name));
    };
    for (const edit of this.edits.filter((e) => e.at >= since)) {
      const lines = edit.diff.replace(/\n$/, '').split('\n');
      let file = null;
      for (let i = 0; i < lines.length; i += 1) {
        const line = lines[i];
        const plus = line.startsWith('--- ') && (lines[i + 1] || '').startsWith('+++ ') ? lines[i + 1].slice(4) : '';
        if (plus) {
          file = named(plus === '/dev/null' ? line.slice(4) : plus);
          i += 1;
          continue;
        }
        file = file || named(edit.file);
        file.lines.push(line);
        if (line.startsWith('+')) file.added += 1;
        else if (line.startsWith('-')) file.removed += 1;
      }
    }
    return files;
  }
}

export class Away {
  /**
   * @param {HTMLElement} root `#panel-agent`
   * @param {Coder} coder
   */
  constructor(root, coder) {
    this.coder = coder;
    this.cards = part(root, 'away', HTMLElement);
    this.review = part(root, 'agent-review', HTMLElement);
    this.reviewTitle = part(root, 'review-title', HTMLElement);
    this.reviewFiles = part(root, 'review-files', HTMLElement);
    this.comment = part(root, 'review-comment', HTMLTextAreaElement);
    this.send = part(root, 'review-send', HTMLButtonElement);
    this.error = part(root, 'review-error', HTMLElement);
    /** @type {Record<string, number>} when the page last looked at each session ('': at all) */
    this.since = {};
    /** Sessions whose card shows, until it is dismissed or reviewed. */
    this.open = new Set();
    this.reviewing = '';
    this.key = '';
    /** @type {Map<string, Tally>} */
    this.tallies = new Map();
    part(root, 'review-back', HTMLButtonElement).addEventListener('click', () => this.close());
    part(root, 'review-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.sendComment();
    });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'hidden') this.look();
      else this.load();
    });
    addEventListener('pagehide', () => this.look());
    setInterval(() => {
      if (document.visibilityState === 'visible') this.look();
    }, LOOK_EVERY_MS);
  }

  /** @param {{session: string, at: number, event: Record<string, any>}} frame an event panel.js applied */
  add(frame) {
    if (!this.tallies.has(frame.session)) this.tallies.set(frame.session, new Tally());
    /** @type {Tally} */ (this.tallies.get(frame.session)).add(frame);
  }

  /** Reads the marks of the laptop in use. */
  load() {
    const pairing = this.coder.store.state.pairing;
    this.key = pairing ? `voxa.looked.${pairing.id}` : '';
    this.since = {};
    if (this.coder.convos.size === 0) this.tallies.clear();
    try {
      const stored = JSON.parse((this.key && localStorage.getItem(this.key)) || '{}');
      for (const [id, at] of Object.entries(stored)) if (typeof at === 'number') this.since[id] = at;
    } catch {
      // No mark.
    }
    this.render();
  }

  /**
   * Marks the sessions the page shows (all but those whose card waits) as looked at now.
   * @param {string[]} [only] just these
   */
  look(only) {
    if (!this.key) return;
    const now = Date.now();
    const ids = only || ['', ...this.coder.convos.keys()].filter((id) => !this.open.has(id));
    for (const id of ids) this.since[id] = now;
    const kept = Object.entries(this.since).sort((a, b) => b[1] - a[1]).slice(0, MAX_KEPT);
    this.since = Object.fromEntries(kept);
    try {
      localStorage.setItem(this.key, JSON.stringify(this.since));
    } catch {
      // Storage full: the card shows less often.
    }
  }

  /**
   * What a session did since the page last looked; null when it is not worth a card.
   * @param {string} id
   */
  summary(id) {
    const convo = this.coder.convos.get(id);
    const tally = this.tallies.get(id);
    if (!convo || !tally) return null;
    const since = this.since[id] ?? this.since[''] ?? Date.now();
    const listed = this.coder.listed.get(id);
    const turns = tally.turns.filter((t) => t.at >= since);
    const edits = tally.edits.filter((e) => e.at >= since);
    const first = Math.min(...turns.map((t) => t.at), ...edits.map((e) => e.at));
    const pending = convo.pending;
    const away = Date.now() - since >= AWAY_MS || convo.lastAt - first >= AWAY_MS;
    if (!this.open.has(id) && (!away || (turns.length === 0 && edits.length === 0 && pending === 0))) return null;
    const files = tally.files(since, (listed && listed.cwd) || '');
    const sum = (/** @type {number[]} */ n) => n.reduce((a, b) => a + b, 0);
    const all = [...files.values()];
    return { turns: turns.length, files: all.length, added: sum(all.map((f) => f.added)),
      removed: sum(all.map((f) => f.removed)), pending, cost: sum(turns.map((t) => t.cost)) };
  }

  /** The cards, one per session that did something while the page was away. */
  render() {
    const cards = [];
    for (const id of this.coder.convos.keys()) {
      const s = this.summary(id);
      if (!s) continue;
      this.open.add(id);
      const listed = this.coder.listed.get(id);
      const title = (listed && listed.title) || id;
      const facts = [
        plural(s.turns, 'turn finished', 'turns finished'),
        s.files ? `${plural(s.files, 'file changed', 'files changed')} (+${s.added} −${s.removed})` : '',
        s.pending ? plural(s.pending, 'approval waiting', 'approvals waiting') : '',
        s.cost > 0 ? `$${s.cost.toFixed(4)}` : '',
      ].filter(Boolean).join(' · ');
      cards.push(el('li', { class: 'away-card', 'data-session': id },
        el('strong', { class: 'session-title' }, title),
        el('p', { class: 'away-facts' }, facts),
        el('div', { class: 'row' },
          el('button', { type: 'button', class: 'secondary', onclick: () => this.show(id) }, 'Review changes'),
          el('button', { type: 'button', class: 'link', 'aria-label': `Dismiss ${title}`, onclick: () => this.dismiss(id) }, 'Dismiss'))));
    }
    this.cards.hidden = cards.length === 0;
    const list = this.cards.querySelector('ol');
    if (list) list.replaceChildren(...cards);
  }

  /** @param {string} id */
  dismiss(id) {
    this.open.delete(id);
    this.look([id]);
    this.render();
  }

  /**
   * Every edit of the session since it began, file by file, and the comment box.
   * @param {string} id
   */
  show(id) {
    const tally = this.tallies.get(id);
    if (!tally) return;
    const listed = this.coder.listed.get(id);
    this.reviewing = id;
    this.reviewTitle.textContent = `Changes in ${(listed && listed.title) || id}`;
    const files = [...tally.files(0, (listed && listed.cwd) || '')];
    this.reviewFiles.replaceChildren(...files.map(([name, file]) => el('details', { class: 'review-file', open: true },
      el('summary', {}, el('strong', {}, name), ' ', el('span', { class: 'muted' }, `+${file.added} −${file.removed}`)),
      diffView(file.lines.join('\n')))));
    if (files.length === 0) this.reviewFiles.append(el('p', { class: 'muted' }, 'No file changed in this session.'));
    show(this.error);
    this.coder.listView.hidden = true;
    this.review.hidden = false;
    scrollTo(0, 0);
  }

  close() {
    this.reviewing = '';
    this.review.hidden = true;
    this.coder.listView.hidden = Boolean(this.coder.shown);
  }

  async sendComment() {
    const id = this.reviewing;
    const words = this.comment.value.trim();
    if (!id || !words) return;
    this.send.disabled = true;
    const env = this.coder.envOf.get(id) || '';
    const outcome = await this.coder.app.attempt('agent_send', { session: id, text: words }, refusalIn(this.error), { env }).done;
    this.send.disabled = false;
    if (!outcome || this.reviewing !== id) return;
    this.comment.value = '';
    this.dismiss(id);
    this.close();
    this.coder.store.set({ agentSession: id });
  }
}

/**
 * @param {number} n
 * @param {string} one
 * @param {string} many
 */
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
