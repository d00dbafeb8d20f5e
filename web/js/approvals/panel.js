// @ts-check
// Approvals: a card for every action waiting for the user (docs/PROTOCOL.md, "Approvals") — what
// it is in one line, the full command or diff, the time left, and Allow / Allow for session /
// Deny; a badge and the page title say how many wait. The page follows the laptop once online,
// so the laptop sends every open approval (again after a reconnect) and every decision, whoever
// made it.

import { el, part } from '../dom.js';

/**
 * @typedef {import('../shell/header.js').Context} Context
 * @typedef {import('../session.js').Session} Session
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {{frame: AgentFrame, node: HTMLLIElement, left: HTMLElement, buttons: HTMLButtonElement[],
 *   message: HTMLInputElement, status: HTMLElement, answers: Record<string, string>}} Card
 */

/** What each risk class means, in words on the card. */
const RISKS = /** @type {Record<string, string>} */ ({
  read: 'Reads files',
  write: 'Changes files',
  exec: 'Runs a program',
  network: 'Reaches the network',
  outside: 'Outside the workspace',
});
/** Who decided, in words. */
const DECIDERS = /** @type {Record<string, string>} */ ({
  phone: 'on a phone', voice: 'by voice', cli: 'on the laptop', timeout: 'nobody answered in time',
  restart: 'voxa restarted', withdrawn: 'withdrawn',
});
/** Longest input shown on a card, in characters; the rest is cut with a note. */
const MAX_SHOWN = 20000;
/** How long a decided card stays, saying how it ended, before it goes. */
const RESOLVED_LINGER_MS = 2500;

export class Approvals {
  /**
   * @param {{panel: HTMLElement, badge: HTMLElement}} roots `#approvals` and `#approvals-badge`
   * @param {Context} context
   */
  constructor({ panel, badge }, { store }) {
    this.panel = panel;
    this.badge = badge;
    this.list = part(panel, 'approval-list', HTMLOListElement);
    this.announce = part(panel, 'approvals-news', HTMLElement);
    /** @type {Map<string, Card>} */
    this.cards = new Map();
    /** @type {Session | null} */
    this.session = null;
    this.online = false;
    this.view = 'starting';
    this.title = document.title;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.ticker = undefined;
    this.onFrame = (/** @type {Event} */ event) => this.frame(/** @type {CustomEvent} */ (event).detail);
    store.watch(['session'], ({ session }) => {
      if (this.session) this.session.removeEventListener('approval', this.onFrame);
      this.session = session;
      if (session) session.addEventListener('approval', this.onFrame);
      this.clear();
    });
    // Each new connection follows again (the agent view sends the `follow`, agent/panel.js): the
    // laptop then sends every approval still open.
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
    });
    /** The coding-agent session the agent view shows: its approvals are answered there. */
    this.shownSession = '';
    store.watch(['view', 'tab', 'agentSession'], ({ view, tab, agentSession }) => {
      this.view = view;
      this.shownSession = tab === 'agent' ? agentSession : '';
      this.refresh();
    });
  }

  /** @param {AgentFrame} frame */
  frame(frame) {
    if (typeof frame.approval !== 'string') return;
    if (frame.type === 'approval') this.open(frame);
    else if (frame.type === 'approval_resolved') this.resolved(frame);
  }

  /** @param {AgentFrame} frame */
  open(frame) {
    const id = frame.approval;
    const known = this.cards.get(id);
    if (known) {
      known.frame = frame;
      return;
    }
    const card = this.card(frame);
    this.cards.set(id, card);
    this.list.append(card.node);
    this.announce.textContent = `Approval needed: ${text(frame.summary)}`;
    this.tick();
    this.refresh();
  }

  /** @param {AgentFrame} frame */
  resolved(frame) {
    const card = this.cards.get(frame.approval);
    if (!card) return;
    this.cards.delete(frame.approval);
    this.announce.textContent = `${text(card.frame.summary)}: ${settle(card, frame)}`;
    setTimeout(() => card.node.remove(), RESOLVED_LINGER_MS);
    this.refresh();
  }

  /** @param {AgentFrame} frame */
  card(frame) {
    return approvalCard(frame, (card, decision) => {
      if (this.session) answer(this.session, card, decision);
    });
  }

  /** Updates every card's time left, once a second while any waits. */
  tick() {
    const now = Date.now();
    for (const card of this.cards.values()) showTimeLeft(card, now);
    if (this.cards.size > 0 && this.ticker === undefined) this.ticker = setInterval(() => this.tick(), 1000);
    if (this.cards.size === 0 && this.ticker !== undefined) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  }

  /** Forgets the previous laptop's cards. */
  clear() {
    this.cards.clear();
    this.list.replaceChildren();
    this.announce.textContent = '';
    this.tick();
    this.refresh();
  }

  refresh() {
    const waiting = this.cards.size;
    let shown = 0;
    for (const node of this.list.children) {
      const card = [...this.cards.values()].find((c) => c.node === node);
      const from = card && card.frame.source;
      const inline = Boolean(this.shownSession) && Boolean(from) && from.session === this.shownSession;
      /** @type {HTMLElement} */ (node).hidden = inline;
      if (!inline) shown += 1;
    }
    this.panel.hidden = this.view !== 'workspace' || shown === 0;
    this.badge.hidden = waiting === 0;
    this.badge.textContent = waiting === 1 ? '1 approval waiting' : `${waiting} approvals waiting`;
    document.title = waiting > 0 ? `(${waiting}) Approval waiting — ${this.title}` : this.title;
    for (const card of this.cards.values()) {
      if (card.status.textContent !== 'Sending…') for (const button of card.buttons) button.disabled = !this.online;
    }
  }
}

/** @param {unknown} value */
function text(value) {
  return typeof value === 'string' ? value : '';
}

/** @param {number} ms */
function clock(ms) {
  const seconds = Math.ceil(ms / 1000);
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, '0')}`;
}

/** @param {any} from */
function source(from) {
  if (from && typeof from.session === 'string') return `coding agent session ${from.session}`;
  if (from && typeof from.call === 'string') return `tool call ${from.call}`;
  return 'this laptop';
}

/**
 * The full action: the diff of an edit, the command line, or the input as JSON.
 * @param {AgentFrame} frame
 */
function detail(frame) {
  const input = frame.input && typeof frame.input === 'object' ? frame.input : {};
  let label = 'Details';
  let shown = '';
  if (typeof frame.diff === 'string' && frame.diff) {
    label = 'Diff';
    shown = frame.diff;
  } else if (typeof input.command === 'string') {
    label = 'Full command';
    shown = input.command + (typeof input.cwd === 'string' ? `\n(in ${input.cwd})` : '');
  } else if (typeof input.content === 'string' && typeof (input.path || input.file_path) === 'string') {
    label = 'New content';
    shown = `${input.path || input.file_path}\n\n${input.content}`;
  } else if (Object.keys(input).length > 0) {
    shown = JSON.stringify(input, null, 2);
  }
  if (!shown) return null;
  const cut = shown.length > MAX_SHOWN ? `${shown.slice(0, MAX_SHOWN)}\n… (${shown.length - MAX_SHOWN} more characters)` : shown;
  const pre = el('pre', { class: 'approval-detail', tabindex: '0', 'aria-label': label });
  if (label === 'Diff') {
    for (const line of cut.split('\n')) {
      const kind = line.startsWith('+') && !line.startsWith('+++') ? 'add'
        : line.startsWith('-') && !line.startsWith('---') ? 'del' : '';
      pre.append(el('span', { class: kind || undefined }, `${line}\n`));
    }
  } else {
    pre.textContent = cut;
  }
  return el('details', { class: 'approval-more', open: shown.length <= 400 ? true : undefined },
    el('summary', {}, label), pre);
}

/**
 * An approval's card: what it is, the full action, the time left, and Allow / Allow for session
 * / Deny (or a question's options). `onAnswer` gets each decision the user makes; the approvals
 * panel and the agent view's conversation (agent/conversation.js) both build theirs here.
 * @param {AgentFrame} frame
 * @param {(card: Card, decision: string) => void} onAnswer
 * @returns {Card}
 */
export function approvalCard(frame, onAnswer) {
  const id = frame.approval;
  const risk = typeof frame.risk === 'string' ? frame.risk : 'exec';
  const summaryId = `${id}-summary-${cardsMade += 1}`;
  const left = el('span', { class: 'left', role: 'timer', 'aria-label': 'Time left' });
  const message = el('input', {
    type: 'text', 'aria-label': 'Message', placeholder: 'Why (optional, the asker reads it)', autocomplete: 'off',
    maxlength: '4000',
  });
  const status = el('p', { class: 'approval-status', role: 'status' });
  /** @type {Card} */
  const card = { frame, node: el('li'), left, buttons: [], message, status, answers: {} };
  const button = (/** @type {string} */ name, /** @type {string} */ decision, /** @type {string} */ kind) => {
    const node = el('button', {
      type: 'button', class: kind, 'aria-describedby': summaryId, onclick: () => onAnswer(card, decision),
    }, name);
    card.buttons.push(node);
    return node;
  };
  const questions = Array.isArray(frame.questions) ? frame.questions : [];
  const actions = el('div', { class: 'row approval-actions' },
    questions.length === 0 ? button('Allow', 'allow', 'allow') : null,
    frame.allow_session === true ? button('Allow for session', 'allow_session', 'secondary') : null,
    button('Deny', 'deny', 'danger'));
  card.node = el('li', { class: 'approval-card', 'data-risk': risk, 'data-approval': id, 'aria-labelledby': summaryId },
    el('div', { class: 'approval-head' },
      el('span', { class: 'risk' }, RISKS[risk] || risk),
      left),
    el('p', { class: 'approval-summary', id: summaryId }, text(frame.summary) || text(frame.tool)),
    el('p', { class: 'muted' }, `${text(frame.tool)} · ${source(frame.source)}`),
    ...questions.map((/** @type {any} */ question) => questionOf(card, question, onAnswer)),
    detail(frame),
    el('label', { class: 'approval-message' }, el('span', { class: 'sr-only' }, 'Message'), message),
    actions,
    status);
  return card;
}
/** Cards built so far: each card's ids are its own, even when two show the same approval. */
let cardsMade = 0;

/**
 * A question of a coding agent: its options are buttons named by their labels.
 * @param {Card} card
 * @param {any} question
 * @param {(card: Card, decision: string) => void} onAnswer
 */
function questionOf(card, question, onAnswer) {
  const asked = text(question && question.question);
  const options = Array.isArray(question && question.options) ? question.options : [];
  return el('fieldset', { class: 'approval-question' },
    el('legend', {}, asked),
    ...options.map((/** @type {any} */ option) => {
      const label = text(option && option.label);
      const node = el('button', {
        type: 'button', class: 'secondary', 'aria-pressed': 'false',
        title: text(option && option.description) || undefined,
        onclick: () => {
          card.answers[asked] = label;
          for (const other of node.parentElement ? node.parentElement.querySelectorAll('button') : []) {
            other.setAttribute('aria-pressed', String(other === node));
          }
          const every = (Array.isArray(card.frame.questions) ? card.frame.questions : [])
            .every((/** @type {any} */ q) => text(q && q.question) in card.answers);
          if (every) onAnswer(card, 'allow');
        },
      }, label);
      card.buttons.push(node);
      return node;
    }));
}

/**
 * Sends the user's decision; the card goes once the laptop says it was decided.
 * @param {Session} session
 * @param {Card} card
 * @param {string} decision
 */
export function answer(session, card, decision) {
  /** @type {import('../protocol.js').ClientFrame} */
  const frame = { type: 'approve', approval: card.frame.approval, decision };
  const message = card.message.value.trim();
  if (message) frame.message = message;
  if (Object.keys(card.answers).length > 0) frame.answers = { ...card.answers };
  if (!session.sendJson(frame)) {
    card.status.textContent = 'Not sent: the laptop is not connected. It stays open; answer once it is back.';
    return;
  }
  for (const button of card.buttons) button.disabled = true;
  card.status.textContent = 'Sending…';
}

/**
 * Marks a card decided (`approval_resolved`) and returns what it says, e.g. "Allowed — on a phone".
 * @param {Card} card
 * @param {AgentFrame} frame
 */
export function settle(card, frame) {
  const said = verdict(frame);
  card.node.dataset.state = 'resolved';
  for (const button of card.buttons) button.disabled = true;
  card.message.disabled = true;
  card.left.textContent = '';
  card.status.textContent = said;
  return said;
}

/**
 * How an approval was decided, in words.
 * @param {Record<string, any>} resolved an `approval_resolved` frame or event
 */
export function verdict(resolved) {
  const verdict = resolved.decision === 'deny' ? 'Denied' : 'Allowed';
  const by = DECIDERS[resolved.by] || text(resolved.by);
  // A person's words are shown; the laptop's own (expiry, restart) are said by `by` already.
  const words = ['phone', 'voice', 'cli'].includes(resolved.by) && resolved.message ? `: ${text(resolved.message)}` : '';
  return `${verdict}${by ? ` — ${by}` : ''}${words}`;
}

/**
 * A card's time left, as shown: "4:59 left".
 * @param {Card} card
 * @param {number} now Unix ms
 */
export function showTimeLeft(card, now) {
  const left = Math.max(0, Number(card.frame.expires_at) - now);
  card.left.textContent = left > 0 ? `${clock(left)} left` : 'expiring…';
}
