// @ts-check
// An approval as a card (docs/PROTOCOL.md, "Approvals"): what it is in one line, the full command
// or diff, the time left, and Allow / Allow for session / Deny (or a question's options). Shared
// by the approvals list (approvals/panel.js) and the agent view's conversation
// (agent/conversation.js), which each build their cards here and answer through `answer`.

import { el } from './dom.js';
import { showReceipt } from './outbox.js';
import { machineName } from './store.js';

/**
 * @typedef {import('./session.js').Session} Session
 * @typedef {import('./protocol.js').AgentFrame} AgentFrame
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
  restart: 'voxa restarted', withdrawn: 'withdrawn', grant: 'by a session grant',
});
/** Coding-agent sessions' titles by id: a card names its session by title (agent/panel.js fills it). */
const titles = new Map();

/**
 * The laptop's environments: a card of one names its machine (approvals/panel.js fills it).
 * @type {import('./store.js').Environment[]}
 */
let machines = [];

/**
 * Learns sessions' titles, and names them so on every card shown.
 * @param {Iterable<[string, string]>} named session id and title
 */
export function nameSessions(named) {
  for (const [id, title] of named) if (title) titles.set(id, title);
  renameCards();
}

/**
 * Learns the laptop's environments, and names their machines so on every card shown.
 * @param {import('./store.js').Environment[]} listed
 */
export function nameMachines(listed) {
  machines = listed;
  renameCards();
}

function renameCards() {
  for (const node of document.querySelectorAll('.approval-from')) {
    const { session, env } = /** @type {HTMLElement} */ (node).dataset;
    node.textContent = sourceText(session ? { session } : {}, env || '');
  }
}

/**
 * A session's title, else its id.
 * @param {string} id
 */
export function sessionName(id) {
  return titles.get(id) || id;
}
/** Longest input shown on a card, in characters; the rest is cut with a note. */
const MAX_SHOWN = 20000;
/**
 * A frame's member as text: `''` unless it is a string.
 * @param {unknown} value
 */
export function textOf(value) {
  return typeof value === 'string' ? value : '';
}

/** @param {number} ms */
function clock(ms) {
  const seconds = Math.ceil(ms / 1000);
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, '0')}`;
}

/**
 * Who asks, in words, with the machine it runs on when that is not this laptop.
 * @param {any} from the approval's `source`
 * @param {string} env the environment it came from (`''`: this laptop)
 */
function sourceText(from, env) {
  const what = from && typeof from.session === 'string'
    ? titles.has(from.session) ? `session “${titles.get(from.session)}”` : `coding agent session ${from.session}`
    : from && typeof from.call === 'string' ? `tool call ${from.call}` : '';
  if (!env) return what || 'this laptop';
  return what ? `${what} on ${machineName(machines, env)}` : machineName(machines, env);
}

/**
 * The full action: the diff of an edit, the command line, or the input as JSON.
 * @param {AgentFrame} frame
 */
function detail(frame) {
  // A question shows its questions and options; its input is only those again.
  if (Array.isArray(frame.questions) && frame.questions.length > 0) return null;
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
  const from = frame.source && typeof frame.source.session === 'string' ? frame.source.session : '';
  const env = typeof frame.env === 'string' ? frame.env : '';
  const grants = frame.allow_session === true && typeof frame.grant_allows === 'string' && frame.grant_allows
    ? el('p', { class: 'grant-allows muted' }, `Allow for session lets through ${frame.grant_allows}, until you revoke it.`)
    : null;
  const actions = el('div', { class: 'row approval-actions' },
    questions.length === 0 ? button('Allow', 'allow', 'allow') : null,
    frame.allow_session === true ? button('Allow for session', 'allow_session', 'secondary') : null,
    button('Deny', 'deny', 'danger'));
  card.node = el('li', { class: 'approval-card', 'data-risk': risk, 'data-approval': id, 'aria-labelledby': summaryId },
    el('div', { class: 'approval-head' },
      el('span', { class: 'risk' }, questions.length > 0 ? 'Question' : RISKS[risk] || risk),
      left),
    el('p', { class: 'approval-summary', id: summaryId }, textOf(frame.summary) || textOf(frame.tool)),
    el('p', { class: 'muted' }, questions.length > 0 ? '' : `${textOf(frame.tool)} · `,
      el('span', { class: 'approval-from', 'data-session': from || undefined, 'data-env': env || undefined },
        sourceText(frame.source, env))),
    ...questions.map((/** @type {any} */ question) => questionOf(card, question, onAnswer)),
    detail(frame),
    grants,
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
  const asked = textOf(question && question.question);
  const options = Array.isArray(question && question.options) ? question.options : [];
  return el('fieldset', { class: 'approval-question' },
    el('legend', {}, asked),
    ...options.map((/** @type {any} */ option) => {
      const label = textOf(option && option.label);
      const node = el('button', {
        type: 'button', class: 'secondary', 'aria-pressed': 'false',
        title: textOf(option && option.description) || undefined,
        onclick: () => {
          card.answers[asked] = label;
          for (const other of node.parentElement ? node.parentElement.querySelectorAll('button') : []) {
            other.setAttribute('aria-pressed', String(other === node));
          }
          const every = (Array.isArray(card.frame.questions) ? card.frame.questions : [])
            .every((/** @type {any} */ q) => textOf(q && q.question) in card.answers);
          if (every) onAnswer(card, 'allow');
        },
      }, label);
      card.buttons.push(node);
      return node;
    }));
}

/**
 * Sends the user's decision (through the outbox: queued while the laptop is away, sent once); the
 * card goes once the laptop says it was decided, and says meanwhile where the answer is.
 * @param {Session} session
 * @param {Card} card
 * @param {string} decision
 */
export function answer(session, card, decision) {
  /** @type {import('./protocol.js').ClientFrame} */
  const frame = { type: 'approve', approval: card.frame.approval, decision };
  // An environment's approval is answered there, through the laptop.
  if (typeof card.frame.env === 'string' && card.frame.env) frame.env = card.frame.env;
  const message = card.message.value.trim();
  if (message) frame.message = message;
  if (Object.keys(card.answers).length > 0) frame.answers = { ...card.answers };
  const id = session.sendOnce(frame);
  if (!id) {
    card.status.textContent = 'Not sent: the laptop is not connected. It stays open; answer once it is back.';
    return;
  }
  for (const button of card.buttons) button.disabled = true;
  showReceipt(session.outbox, id, card.status, () => {
    for (const button of card.buttons) button.disabled = false;
  });
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
  const chosen = resolved.answers && typeof resolved.answers === 'object'
    ? Object.values(resolved.answers).filter((v) => typeof v === 'string') : [];
  if (resolved.decision !== 'deny' && chosen.length > 0) {
    return `Answered: ${chosen.join(', ')}${DECIDERS[resolved.by] ? ` — ${DECIDERS[resolved.by]}` : ''}`;
  }
  const verdict = resolved.decision === 'deny' ? 'Denied'
    : resolved.decision === 'allow_session' ? 'Allowed for this session' : 'Allowed';
  const by = DECIDERS[resolved.by] || textOf(resolved.by);
  // A person's words are shown; the laptop's own (expiry, restart) are said by `by` already.
  const words = ['phone', 'voice', 'cli'].includes(resolved.by) && resolved.message ? `: ${textOf(resolved.message)}` : '';
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
