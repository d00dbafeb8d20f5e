// @ts-check
// Small DOM and formatting helpers shared by the panels.

/**
 * @typedef {import('./protocol.js').ErrorCode} ErrorCode
 * A refusal as the page shows it: a wire code, or `offline` (the page's own: no connection).
 * @typedef {{code?: string, message?: string}} Failure
 */

/**
 * A panel's own control: the element with this id inside `root`, of this type. Throws when the
 * page lacks it, so a renamed control fails at load, not on first use.
 * @template {Element} T
 * @param {ParentNode} root
 * @param {string} id
 * @param {{new (): T, prototype: T}} type
 * @returns {T}
 */
export function part(root, id, type) {
  const node = root.querySelector(`#${id}`);
  if (!(node instanceof type)) throw new Error(`the page has no ${type.name} #${id}`);
  return node;
}

/**
 * A panel's root: the element with this id in the document.
 * @param {string} id
 * @returns {HTMLElement}
 */
export const root = (id) => part(document, id, HTMLElement);

/**
 * Creates an element with properties (`text`, `class`, `on…` listeners, attributes) and children.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, any>} [props]
 * @param {...(Node | string | null | undefined)} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'text') node.textContent = value;
    else if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

/**
 * Shows or hides an element, setting its text when shown.
 * @param {HTMLElement} node
 * @param {string | null} [text]
 */
export function show(node, text) {
  if (text === undefined || text === null || text === '') {
    node.hidden = true;
    node.textContent = '';
  } else {
    node.hidden = false;
    node.textContent = text;
  }
}

/**
 * Sizes as people read them: 812 B, 4.2 KiB, 1.5 MiB.
 * @param {number} bytes
 */
export function formatBytes(bytes) {
  if (!Number.isFinite(bytes)) return '';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/**
 * Durations as people read them: 35 ms, 2.4 s, 3 min 5 s.
 * @param {number} ms
 */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60000);
  return `${minutes} min ${Math.round((ms % 60000) / 1000)} s`;
}

/**
 * What each error code means, as a sentence: every code of protocol.js (the type says so), and
 * the page's own `offline`.
 * @type {Record<ErrorCode | 'offline', string>}
 */
const SENTENCES = {
  'unknown-tool': 'This laptop does not offer that tool.',
  'invalid-args': 'The request was not understood.',
  'outside-workspace': 'That path is outside the workspace.',
  'protected-path': 'That path belongs to voxa itself and is off limits.',
  'not-found': 'That does not exist.',
  'timeout': 'It took too long and was stopped.',
  'cancelled': 'Cancelled.',
  'too-large': 'That is too large.',
  'denied-by-policy': 'The laptop\'s policy does not allow this.',
  'duplicate-id': 'A call with the same id is already running.',
  'busy': 'The laptop is busy; try again in a moment.',
  'unavailable': 'That is not available on this laptop.',
  'internal': 'Something went wrong on the laptop.',
  'bad-frame': 'The laptop did not understand a message.',
  'bearer-refused': 'The laptop refused this pairing.',
  'unauthenticated-call': 'The laptop wanted a hello first.',
  'host-token-required': 'That needs the laptop\'s host token.',
  'unknown-environment': 'That environment is unknown.',
  'environment-not-paired': 'That environment is not paired.',
  'pairing-revoked': 'That pairing was revoked.',
  'environment-unreachable': 'That environment cannot be reached.',
  'environment-identity-mismatch': 'That environment could not prove who it is.',
  'sealed-session-broken': 'The relay altered or dropped part of the sealed session, so it was closed; nothing altered ran, and a call already running goes on on the laptop. Reconnect.',
  'sealed-session-stalled': 'Nothing came through the sealed session for 25 s, so it was closed; a call already running goes on on the laptop.',
  'sealed-session-required': 'The laptop accepts sealed sessions only, and this client cannot seal.',
  'executor-unauthenticated': 'That environment refused the call.',
  'conflict': 'That changed on the laptop meanwhile; nothing was replaced.',
  'no-spoken-consent': 'Voice did not hear a clear yes from you, so nothing ran; the approval waits for your tap.',
  'ticket-used': 'This link was used already: run voxa pair for a new one.',
  'ticket-expired': 'This link has expired: run voxa pair for a new one.',
  'offline': 'The laptop is offline.',
};

/**
 * An error as a sentence with its code, from `sentences`: "That path is outside the workspace: … (outside-workspace)".
 * @param {Failure | null | undefined} error
 * @param {Readonly<Record<string, string>>} [sentences]
 */
export function sentence(error, sentences = SENTENCES) {
  const code = (error && error.code) || 'internal';
  const base = sentences[code] || 'The call failed.';
  const message = error && typeof error.message === 'string' ? error.message.trim() : '';
  const detail = message && message !== base ? ` ${base.endsWith('.') ? '' : '— '}${message}` : '';
  return `${base}${detail} (${code})`;
}

/**
 * Bytes of a base64 string.
 * @param {string} data
 */
export function base64Bytes(data) {
  const binary = atob(data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * True when the view is scrolled to (near) its bottom.
 * @param {Element} node
 */
export const atBottom = (node) => node.scrollHeight - node.scrollTop - node.clientHeight < 40;

/**
 * A refusal shown in `node`: hidden now, and filled with the sentence by the function returned
 * (what `App.attempt` takes).
 * @param {HTMLElement} node
 * @returns {(text: string) => void}
 */
export function refusalIn(node) {
  show(node);
  return (text) => show(node, text);
}
