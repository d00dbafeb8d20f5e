// @ts-check
// One coding-agent session as a conversation: the prompts, the agent's text as it streams (then
// its markdown), a card per tool it used (the command and its output, the diff of an edit),
// approvals and questions with their buttons while they are open, and each turn's time and cost.
// Built from the session's `agent_event`s in seq order, each applied once (docs/PROTOCOL.md,
// "Coding-agent sessions"); every field is hostile input and goes in as text.

import { approvalCard, settle, showTimeLeft, verdict } from '../approval-card.js';
import { el, formatDuration } from '../dom.js';
import { renderMarkdown } from './markdown.js';

/**
 * @typedef {import('../approval-card.js').Card} Card
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {{session: string, seq: number, at: number, event: Record<string, any>}} SessionEvent
 * @typedef {{node: HTMLLIElement, mark: HTMLElement, output: HTMLElement}} ToolCard
 */

/** Longest tool input or output shown on a card, in characters. */
const MAX_SHOWN = 20000;
/** Events kept per session in the page; the oldest are dropped past it (the laptop keeps them all). */
const MAX_EVENTS = 4000;

/** @param {unknown} value */
const text = (value) => (typeof value === 'string' ? value : '');

/** @param {string} shown */
const cut = (shown) => (shown.length > MAX_SHOWN
  ? `${shown.slice(0, MAX_SHOWN)}\n… (${shown.length - MAX_SHOWN} more characters)` : shown);

export class Conversation {
  /**
   * @param {string} id the session's id
   * @param {(card: Card, decision: string) => void} onAnswer sends a decision of an approval card
   */
  constructor(id, onAnswer) {
    this.id = id;
    this.onAnswer = onAnswer;
    /** The last seq applied: what the next `follow` names. */
    this.seq = 0;
    this.state = '';
    /** Unix ms of the last event. */
    this.lastAt = 0;
    this.root = el('ol', { class: 'convo', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'polite' });
    /** @type {{node: HTMLElement, body: HTMLElement, written: string} | null} the text being written */
    this.streaming = null;
    /** The last whole text of the running turn: its `turn_end` result says it again. */
    this.lastText = '';
    /** @type {Map<string, ToolCard>} */
    this.tools = new Map();
    /**
     * Approvals, open or decided; `folded` is the tool card closed while the approval is open;
     * `answers` a question's chosen options, once either announcement of its decision carried them.
     * @type {Map<string, {node: HTMLLIElement, note: HTMLElement, card: Card | null, folded: HTMLDetailsElement | null, answers?: any}>}
     */
    this.approvals = new Map();
    /** @type {Map<string, AgentFrame>} open approvals the laptop sent before their event arrived */
    this.early = new Map();
  }

  /** Approvals open in this session. */
  get pending() {
    let open = 0;
    for (const approval of this.approvals.values()) if (approval.card && !approval.card.node.dataset.state) open += 1;
    return open;
  }

  /**
   * Applies one event; false when it was applied already (a replay after a reconnect).
   * @param {SessionEvent} frame
   */
  add(frame) {
    if (!(frame.seq > this.seq)) return false;
    this.seq = frame.seq;
    this.lastAt = Number(frame.at) || this.lastAt;
    const event = frame.event && typeof frame.event === 'object' ? frame.event : {};
    switch (event.kind) {
      case 'state':
        this.state = text(event.state);
        if (this.state === 'ended' || this.state === 'failed') this.endStreaming();
        if (this.state === 'failed') this.note('note error', 'The session failed.');
        break;
      case 'user':
        this.endStreaming();
        this.lastText = '';
        this.append(el('li', { class: 'msg user' },
          el('span', { class: 'who' }, event.by === 'phone' ? 'You' : `You (${text(event.by) || 'elsewhere'})`),
          el('p', { class: 'said' }, text(event.text))));
        break;
      case 'text':
        this.agentText(text(event.text), event.partial === true);
        break;
      case 'tool_use':
        this.endStreaming();
        this.toolUse(event);
        break;
      case 'tool_result':
        this.toolResult(event);
        break;
      case 'approval':
        this.endStreaming();
        this.approvalAsked(event);
        break;
      case 'approval_resolved':
        this.approvalDecided(event);
        break;
      case 'turn_end':
        this.endStreaming();
        this.turnEnd(event);
        break;
      case 'error':
        this.endStreaming();
        this.note('note error', `${text(event.message)} (${text(event.code)})`);
        break;
      default:
        break;
    }
    while (this.root.childElementCount > MAX_EVENTS && this.root.firstElementChild) this.root.firstElementChild.remove();
    return true;
  }

  /** @param {HTMLElement} node */
  append(node) {
    this.root.append(node);
  }

  /**
   * @param {string} kind
   * @param {string} said
   */
  note(kind, said) {
    this.append(el('li', { class: kind }, said));
  }

  /**
   * The agent's text: pieces as it writes (shown as they come), then the whole block, rendered.
   * @param {string} piece
   * @param {boolean} partial
   */
  agentText(piece, partial) {
    if (partial) {
      if (!this.streaming) {
        const body = el('div', { class: 'md streaming' });
        const node = el('li', { class: 'msg agent' }, body);
        this.append(node);
        this.streaming = { node, body, written: '' };
      }
      this.streaming.written += piece;
      this.streaming.body.textContent = this.streaming.written;
      return;
    }
    const body = this.streaming ? this.streaming.body : el('div', { class: 'md' });
    if (!this.streaming) this.append(el('li', { class: 'msg agent' }, body));
    body.classList.remove('streaming');
    body.replaceChildren(renderMarkdown(piece));
    this.streaming = null;
    this.lastText = piece;
  }

  /** Text that was written but never completed (the turn was interrupted) stays as written. */
  endStreaming() {
    if (this.streaming) this.streaming.body.classList.remove('streaming');
    this.streaming = null;
  }

  /** @param {Record<string, any>} event */
  toolUse(event) {
    const input = event.input && typeof event.input === 'object' ? event.input : {};
    const mark = el('span', { class: 'tool-mark', 'aria-label': 'running' }, '…');
    const output = el('pre', { class: 'tool-output', 'aria-label': 'Output', hidden: true });
    let body;
    if (typeof event.diff === 'string' && event.diff) body = diffView(cut(event.diff));
    else if (typeof input.command === 'string') body = el('pre', { class: 'tool-input', 'aria-label': 'Command' }, cut(input.command));
    else if (Object.keys(input).length > 0) body = el('pre', { class: 'tool-input', 'aria-label': 'Input' }, cut(JSON.stringify(input, null, 2)));
    const node = el('li', { class: 'tool' },
      el('details', { class: 'tool-card', open: typeof event.diff === 'string' && event.diff ? true : undefined },
        el('summary', {}, mark, ' ', el('strong', {}, text(event.name)), ' ', el('span', { class: 'tool-summary' }, text(event.summary))),
        body || null,
        output));
    this.tools.set(text(event.tool_use_id), { node, mark, output });
    this.append(node);
  }

  /** @param {Record<string, any>} event */
  toolResult(event) {
    const tool = this.tools.get(text(event.tool_use_id));
    if (!tool) return;
    const ok = event.ok === true;
    tool.mark.textContent = ok ? '✓' : '✗';
    tool.mark.setAttribute('aria-label', ok ? 'done' : 'failed');
    tool.node.dataset.ok = String(ok);
    const shown = text(event.output);
    tool.output.hidden = !shown;
    tool.output.textContent = cut(shown);
  }

  /** @param {Record<string, any>} event */
  approvalAsked(event) {
    const id = text(event.approval);
    if (!id || this.approvals.has(id)) return;
    const note = el('p', { class: 'approval-note' }, `Asked: ${text(event.summary) || text(event.tool)}`);
    const node = el('li', { class: 'asked' }, note);
    this.approvals.set(id, { node, note, card: null, folded: null });
    this.append(node);
    const early = this.early.get(id);
    if (early) {
      this.early.delete(id);
      this.open(early);
    }
  }

  /** @param {Record<string, any>} event */
  approvalDecided(event) {
    const known = this.approvals.get(text(event.approval));
    this.early.delete(text(event.approval));
    if (!known) return;
    // A decision is announced twice (the session's event, with a question's answers, and the
    // laptop's `approval_resolved`, without): whichever comes last, the note keeps the answers.
    known.answers = event.answers ?? known.answers;
    const decided = { ...event, answers: known.answers };
    known.note.textContent = `${known.note.textContent.replace(/ — .*$/, '')} — ${verdict(decided)}`;
    known.note.hidden = false;
    if (known.folded) known.folded.open = true;
    known.folded = null;
    if (known.card) {
      settle(known.card, /** @type {AgentFrame} */ (/** @type {unknown} */ (decided)));
      known.card.node.remove();
      known.card = null;
    }
  }

  /**
   * An open approval of this session, as the laptop sends it to followers: its card, with buttons.
   * @param {AgentFrame} frame
   */
  open(frame) {
    const known = this.approvals.get(frame.approval);
    if (!known) {
      // Its event comes with the replay, after the open approvals: the card waits for its place.
      this.early.set(frame.approval, frame);
      return;
    }
    if (known.card) {
      known.card.frame = frame;
      return;
    }
    const card = approvalCard(frame, this.onAnswer);
    card.node.classList.add('inline');
    known.card = card;
    // While the card is open it says what is asked, with the diff or command: the tool's own
    // card just above folds away, and opens again once it is decided.
    known.note.hidden = true;
    const tool = [...this.tools.values()].pop();
    if (tool && tool.node.nextElementSibling === known.node) {
      const details = tool.node.querySelector('details');
      if (details && details.open) {
        details.open = false;
        known.folded = details;
      }
    }
    known.node.append(el('ol', { class: 'approval-list' }, card.node));
    showTimeLeft(card, Date.now());
  }

  /**
   * An `approval_resolved` frame: the same as its event, which may come later.
   * @param {AgentFrame} frame
   */
  resolved(frame) {
    this.approvalDecided(frame);
  }

  /** @param {number} now */
  tick(now) {
    for (const approval of this.approvals.values()) if (approval.card) showTimeLeft(approval.card, now);
  }

  /** @param {boolean} online */
  enable(online) {
    for (const approval of this.approvals.values()) {
      if (approval.card && approval.card.status.textContent !== 'Sending…') {
        for (const button of approval.card.buttons) button.disabled = !online;
      }
    }
  }

  /** @param {Record<string, any>} event */
  turnEnd(event) {
    const ok = event.ok === true;
    const interrupted = !ok && event.interrupted === true;
    const facts = [ok ? 'Done' : interrupted ? 'Interrupted' : 'Failed'];
    const ms = Number(event.duration_ms);
    if (Number.isFinite(ms) && ms > 0) facts.push(formatDuration(ms));
    if (typeof event.cost_usd === 'number' && Number.isFinite(event.cost_usd)) facts.push(`$${event.cost_usd.toFixed(4)}`);
    const result = text(event.result);
    // The final answer is the turn's last text already: shown once.
    const extra = result && !interrupted && result.trim() !== this.lastText.trim()
      ? el('div', { class: ok ? 'md' : 'md turn-error' }, renderMarkdown(result)) : null;
    const outcome = interrupted ? 'interrupted' : String(ok);
    this.append(el('li', { class: 'turn-end', 'data-ok': outcome }, extra, el('p', { class: 'turn-facts' }, facts.join(' · '))));
    this.lastText = '';
  }
}

/**
 * A unified diff, one line per row, added and removed lines marked (and said, for screen readers).
 * @param {string} diff
 */
export function diffView(diff) {
  const pre = el('pre', { class: 'diff', 'aria-label': 'Diff', tabindex: '0' });
  for (const line of diff.replace(/\n$/, '').split('\n')) {
    const kind = line.startsWith('+++') || line.startsWith('---') ? 'file'
      : line.startsWith('@@') ? 'hunk' : line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : '';
    pre.append(el('span', { class: kind || undefined }, `${line}\n`));
  }
  return pre;
}
