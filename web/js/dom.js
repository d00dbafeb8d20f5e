// Small DOM and formatting helpers shared by the panels.

/** The element with this id. */
export const byId = (id) => document.getElementById(id);

/** Creates an element with properties (`text`, `class`, attributes) and children. */
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

/** Shows or hides an element, setting its text when shown. */
export function show(node, text) {
  if (text === undefined || text === null || text === '') {
    node.hidden = true;
    node.textContent = '';
  } else {
    node.hidden = false;
    node.textContent = text;
  }
}

/** Sizes as people read them: 812 B, 4.2 KiB, 1.5 MiB. */
export function formatBytes(bytes) {
  if (!Number.isFinite(bytes)) return '';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** Durations as people read them: 35 ms, 2.4 s, 3 min 5 s. */
export function formatDuration(ms) {
  if (!Number.isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60000);
  return `${minutes} min ${Math.round((ms % 60000) / 1000)} s`;
}

// What each error code means, as a sentence (codes from docs/PROTOCOL.md).
const SENTENCES = {
  'unknown-tool': 'This laptop does not offer that tool.',
  'invalid-args': 'The request was not understood.',
  'outside-workspace': 'That path is outside the workspace.',
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
  'executor-unauthenticated': 'That environment refused the call.',
  'offline': 'The laptop is offline.',
};

/** An error as a sentence with its code, from `sentences`: "That path is outside the workspace: … (outside-workspace)". */
export function sentence(error, sentences = SENTENCES) {
  const code = (error && error.code) || 'internal';
  const base = sentences[code] || 'The call failed.';
  const message = error && typeof error.message === 'string' ? error.message.trim() : '';
  const detail = message && message !== base ? ` ${base.endsWith('.') ? '' : '— '}${message}` : '';
  return `${base}${detail} (${code})`;
}

/** Bytes of a base64 string. */
export function base64Bytes(data) {
  const binary = atob(data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** True when the view is scrolled to (near) its bottom. */
export const atBottom = (node) => node.scrollHeight - node.scrollTop - node.clientHeight < 40;
