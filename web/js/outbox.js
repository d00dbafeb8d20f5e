// @ts-check
// The outbox (docs/PROTOCOL.md, "Receipts"): what the user sends — a command, a prompt or a
// follow-up to a coding agent, a key in the Shell, an approval, a cancel — is kept, per pairing,
// in the tab's storage (sessionStorage) until the laptop answered it. Sent while the laptop is
// unreachable, it waits (queued); once a session is back and the laptop named the calls it holds,
// each is sent once, in the order it was typed. A frame that may have reached the laptop before
// its socket died is sent again under the same id: the laptop answers it again and never applies
// it twice (a call's id, an `approve`'s or `cancel`'s `receipt`). Each item shows its state —
// queued, sent, applied, or refused with why — quietly, in the list under the connection line
// (what the laptop answers within a second is not listed at all).
//
// Keys typed into the Shell while away are sent in order, once, when they are at most a minute
// old; older ones are dropped with a note (what was on that screen has moved on). Nothing waits
// longer than the laptop remembers ids (10 min): an older item is dropped with a note, never sent
// where it could run twice.

/**
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {import('./protocol.js').ClientFrame} ClientFrame
 * @typedef {'queued' | 'sent' | 'applied' | 'refused'} ItemState
 * @typedef {{id: string, frame: ClientFrame, label: string, state: ItemState, why?: string, at: number,
 *   sentAt?: number, settledAt?: number, waited?: boolean}} Item
 */

/** Tool calls the user types that wait for the laptop instead of failing at once. */
export const QUEUED_TOOLS = new Set(['run_command', 'agent_start', 'agent_send', 'term_input', 'coding_agent']);
/** Items kept at most, and bytes of their frames. */
const MAX_ITEMS = 128;
const MAX_BYTES = 64 * 1024;
/** Longest an item waits: the laptop remembers ids this long (`REMEMBERED_FOR`). */
export const MAX_AGE_MS = 10 * 60 * 1000;
/** Longest a key typed into the Shell waits. */
export const MAX_KEY_AGE_MS = 60 * 1000;
/** Answered items still kept, the newest. */
const SHOWN_SETTLED = 3;
/** How long an applied item stays in the list: long enough to be seen, then it makes room. */
export const SHOWN_APPLIED_MS = 5000;
/**
 * How long an item sent while online may wait for its answer before the list shows it: what the
 * laptop answers at once (a key in the Shell, a quick command) is never listed, so typing does
 * not move the page.
 */
export const QUIET_MS = 1000;

export class Outbox extends EventTarget {
  /** @param {Pairing} pairing */
  constructor(pairing) {
    super();
    this.key = `voxa.outbox.${pairing.kind === 'relay' ? pairing.code : 'local'}`;
    /** @type {Item[]} */
    this.items = load(this.key);
  }

  /**
   * Keeps one frame the user sent (`sent`: it is on the wire already); false when the outbox is
   * full, and then nothing is kept.
   * @param {string} id the call's id, or the frame's `receipt`
   * @param {ClientFrame} frame
   * @param {string} label what the user sees of it
   * @param {boolean} sent
   */
  add(id, frame, label, sent) {
    const open = this.items.filter((item) => item.state === 'queued' || item.state === 'sent');
    const bytes = open.reduce((sum, item) => sum + JSON.stringify(item.frame).length, 0) + JSON.stringify(frame).length;
    if (open.length >= MAX_ITEMS || bytes > MAX_BYTES) return false;
    const now = Date.now();
    /** @type {Item} */
    const item = { id, frame, label: label.slice(0, 80), state: sent ? 'sent' : 'queued', at: now };
    if (sent) item.sentAt = now;
    // Kept while the laptop was away: the list shows it from the start to its answer.
    else item.waited = true;
    this.items.push(item);
    this.changed();
    return true;
  }

  /** @param {string} id */
  has(id) {
    return this.items.some((item) => item.id === id && (item.state === 'queued' || item.state === 'sent'));
  }

  /**
   * The laptop answered item `id`: applied, or refused with why.
   * @param {string} id
   * @param {boolean} ok
   * @param {unknown} [error] the answer's `{code, message}`
   */
  settle(id, ok, error) {
    const item = this.items.find((one) => one.id === id && one.state !== 'applied' && one.state !== 'refused');
    if (!item) return;
    const { code, message } = /** @type {{code?: unknown, message?: unknown}} */ (error || {});
    // A call that ran before and whose result is no longer kept did apply, once.
    item.state = ok || code === 'duplicate-id' ? 'applied' : 'refused';
    item.settledAt = Date.now();
    if (!ok) item.why = typeof message === 'string' ? message.slice(0, 200) : 'refused';
    this.changed();
  }

  /**
   * A session is back and the laptop named the calls it holds (`named`): the open items it does
   * not hold are sent, once, in order (`send` puts a frame on the wire); stale ones are dropped.
   * @param {Set<string>} named
   * @param {(frame: ClientFrame) => boolean} send
   */
  flush(named, send) {
    const now = Date.now();
    for (const item of this.items) {
      if (item.state !== 'queued' && item.state !== 'sent') continue;
      if (named.has(item.id)) {
        item.state = 'sent';
        continue;
      }
      const isKey = item.frame.type === 'tool_call' && item.frame.name === 'term_input';
      if (now - item.at > (isKey ? MAX_KEY_AGE_MS : MAX_AGE_MS)) {
        item.state = 'refused';
        item.why = isKey ? 'not sent: typed more than a minute before the laptop was back'
          : 'not sent: waited more than 10 minutes';
        continue;
      }
      if (!send(item.frame)) break;
      item.state = 'sent';
      item.sentAt = item.sentAt || now;
    }
    this.changed();
  }

  changed() {
    const open = this.items.filter((item) => item.state === 'queued' || item.state === 'sent');
    const settled = this.items.filter((item) => item.state === 'applied' || item.state === 'refused');
    this.items = [...settled.slice(-SHOWN_SETTLED), ...open].sort((a, b) => a.at - b.at);
    try {
      sessionStorage.setItem(this.key, JSON.stringify(this.items));
    } catch {
      // A full or disabled storage keeps the outbox for this page only.
    }
    this.dispatchEvent(new CustomEvent('change'));
  }
}

/**
 * An item's state as the page says it.
 * @param {Item} item
 */
export function stateText(item) {
  if (item.state === 'queued') return 'queued — sent when the laptop is back';
  if (item.state === 'sent') return 'sent';
  if (item.state === 'applied') return 'applied';
  return `refused: ${item.why || 'refused'}`;
}

/**
 * Says in `where` the state of item `id` of `outbox` as it changes, quietly, until it is answered;
 * `refused` runs if the laptop refused it (so it can be answered again).
 * @param {Outbox} outbox
 * @param {string} id
 * @param {HTMLElement} where
 * @param {() => void} refused
 */
export function showReceipt(outbox, id, where, refused) {
  const show = () => {
    const item = outbox.items.find((one) => one.id === id);
    if (!item) return;
    if (item.state === 'applied' || item.state === 'refused') outbox.removeEventListener('change', show);
    // Applied: what the laptop decided is said by its own notice (`approval_resolved`).
    if (item.state === 'applied') return;
    const said = stateText(item);
    where.textContent = item.state === 'sent' ? 'Sending…' : `${said[0].toUpperCase()}${said.slice(1)}`;
    if (item.state === 'refused') refused();
  };
  outbox.addEventListener('change', show);
  show();
}

/**
 * What the user sees of a frame: the command, the prompt, the keys.
 * @param {ClientFrame} frame
 */
export function labelOf(frame) {
  const args = /** @type {Record<string, unknown>} */ (frame.args || {});
  const text = [args.command, args.prompt, args.text, args.message, args.data].find((value) => typeof value === 'string');
  if (frame.type === 'approve') return `${frame.decision === 'deny' ? 'deny' : 'allow'} approval`;
  if (frame.type === 'cancel') return 'stop';
  const shown = typeof text === 'string' ? text.replace(/[\u0000-\u001f\u007f]/g, (c) => (c === '\r' ? '⏎' : '·')) : '';
  return `${frame.name === 'term_input' ? 'keys' : String(frame.name)}${shown ? `: ${shown}` : ''}`;
}

/**
 * Shows the items of the outbox of the session in use in `list` (an `<ol>`, hidden while empty).
 * @param {HTMLElement} list
 * @param {import('./store.js').Store} store
 */
export function watchOutbox(list, store) {
  /** @type {Outbox | null} */
  let shown = null;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let expiry;
  const show = () => {
    clearTimeout(expiry);
    const next = showOutbox(list, shown);
    if (next !== null) expiry = setTimeout(show, Math.max(0, next - Date.now()) + 50);
  };
  store.watch(['session'], ({ session }) => {
    if (shown) shown.removeEventListener('change', show);
    shown = session ? session.outbox : null;
    if (shown) shown.addEventListener('change', show);
    show();
  });
}

/**
 * @param {HTMLElement} list
 * @param {Outbox | null} outbox
 * @returns {number | null} when the first applied item shown is due to leave
 */
function showOutbox(list, outbox) {
  list.replaceChildren();
  const now = Date.now();
  const all = outbox ? outbox.items : [];
  // What waits (queued, or sent and not answered within QUIET_MS) or was refused stays until it is
  // answered or replaced; applied items that were shown leave after a moment (the screen shows
  // what they did); what the laptop answered at once is never listed.
  const waited = (/** @type {Item} */ item) => item.waited === true || (item.settledAt || now) - item.at >= QUIET_MS;
  const items = all.filter((item) => item.state === 'queued' || item.state === 'refused'
    || (item.state === 'sent' && waited(item))
    || (item.state === 'applied' && waited(item) && now - (item.settledAt || 0) < SHOWN_APPLIED_MS));
  list.hidden = items.length === 0;
  for (const item of items) {
    const entry = document.createElement('li');
    entry.dataset.state = item.state;
    entry.textContent = `${item.label} — ${stateText(item)}`;
    list.append(entry);
  }
  // The next change: a shown applied item leaving, or a sent one waiting long enough to be shown.
  const due = [
    ...items.filter((item) => item.state === 'applied').map((item) => (item.settledAt || 0) + SHOWN_APPLIED_MS),
    ...all.filter((item) => item.state === 'sent' && !waited(item)).map((item) => item.at + QUIET_MS),
  ];
  return due.length ? Math.min(...due) : null;
}

/**
 * @param {string} key
 * @returns {Item[]}
 */
function load(key) {
  try {
    const stored = JSON.parse(sessionStorage.getItem(key) || '[]');
    if (!Array.isArray(stored)) return [];
    return stored.filter((item) => item && typeof item.id === 'string' && item.frame && typeof item.frame.type === 'string'
      && typeof item.label === 'string' && typeof item.at === 'number'
      && ['queued', 'sent', 'applied', 'refused'].includes(item.state)).slice(-MAX_ITEMS);
  } catch {
    return [];
  }
}
