// @ts-check
// What the key bar sends: the bytes a terminal sends for keys a phone keyboard lacks (Esc, Tab and
// Shift+Tab, arrows, Page Up and Down), and the Ctrl and Alt modifiers applied to the next key typed.

/** Keys of the bar, in order: label, accessible name, and what it sends (or the modifier it holds). */
export const BAR = /** @type {const} */ ([
  { label: 'Esc', name: 'Escape', send: '\u001b' },
  { label: 'Tab', name: 'Tab', send: '\t' },
  { label: '⇧Tab', name: 'Shift Tab', send: '\u001b[Z' },
  { label: 'Ctrl', name: 'Control', hold: 'ctrl' },
  { label: 'Alt', name: 'Alt', hold: 'alt' },
  { label: '←', name: 'Left', arrow: 'D' },
  { label: '↑', name: 'Up', arrow: 'A' },
  { label: '↓', name: 'Down', arrow: 'B' },
  { label: '→', name: 'Right', arrow: 'C' },
  { label: 'PgUp', name: 'Page Up', send: '\u001b[5~' },
  { label: 'PgDn', name: 'Page Down', send: '\u001b[6~' },
  { label: '|', name: 'Pipe', send: '|' },
  { label: '~', name: 'Tilde', send: '~' },
  { label: '/', name: 'Slash', send: '/' },
]);

/**
 * The bytes of an arrow key: `ESC O x` while the program asked for application cursor keys
 * (vim, less), else `ESC [ x`.
 * @param {string} arrow `A`, `B`, `C` or `D`
 * @param {boolean} application
 */
export function arrowKey(arrow, application) {
  return `\u001b${application ? 'O' : '['}${arrow}`;
}

/**
 * `data` typed with Ctrl and/or Alt held: Ctrl turns a letter (and `@[\]^_` and space) into its
 * control character, Alt prefixes Escape.
 * @param {string} data
 * @param {{ctrl: boolean, alt: boolean}} held
 */
export function withModifiers(data, { ctrl, alt }) {
  let out = data;
  if (ctrl && data.length === 1) {
    const code = data.toUpperCase().charCodeAt(0);
    if (code >= 0x40 && code <= 0x5f) out = String.fromCharCode(code - 0x40);
    else if (data === ' ') out = '\u0000';
    else if (data === '?') out = '\u007f';
  }
  return alt ? `\u001b${out}` : out;
}
