// @ts-check
// The header: the connection line (with Reconnect) and the notice an error outside any call
// shows. The machine picker in it is picker.js.

import { el, part, show } from '../dom.js';

/** @typedef {import('../app.js').Context} Context */

/**
 * Keeps `--bar-height` (on the document) at the header's height, so what sticks below it (the
 * tabs) sits right under it however many lines the header takes.
 * @param {HTMLElement} bar
 */
export function shareHeight(bar) {
  const set = () => document.documentElement.style.setProperty('--bar-height', `${bar.offsetHeight}px`);
  new ResizeObserver(set).observe(bar);
  set();
}

/** The live region "Connection": the state in words, and Reconnect when waiting helps no more. */
export class ConnectionLine {
  /**
   * @param {HTMLElement} root `#connection`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const text = part(root, 'connection-text', HTMLElement);
    const reconnect = part(root, 'reconnect', HTMLButtonElement);
    const mark = part(root, 'seal-mark', HTMLElement);
    reconnect.addEventListener('click', () => app.reconnect());
    store.watch(['connection'], ({ connection }) => {
      root.dataset.state = connection.state;
      text.textContent = connection.text;
      reconnect.hidden = !['replaced', 'reconnecting', 'broken'].includes(connection.state);
      // Sealed: the relay carries only ciphertext (docs/PROTOCOL.md, "Sealed sessions").
      mark.hidden = connection.state !== 'online';
      mark.dataset.sealed = String(connection.sealed === true);
      mark.textContent = connection.sealed ? 'sealed' : 'not sealed';
      mark.title = connection.sealed ? 'End to end: the relay carries only ciphertext it cannot read or change'
        : 'Not sealed: the relay can read this session';
    });
  }
}

/**
 * An error outside any call, in the header (it covers nothing), until it is dismissed or the
 * connection comes back.
 */
export class Notice {
  /**
   * @param {HTMLElement} root `#notice`
   * @param {Context} context
   */
  constructor(root, { store }) {
    const text = part(root, 'notice-text', HTMLElement);
    part(root, 'notice-close', HTMLButtonElement).addEventListener('click', () => store.set({ notice: '' }));
    store.watch(['notice'], ({ notice }) => {
      show(text, notice);
      root.hidden = text.hidden;
    });
  }
}

/**
 * The laptop's word that the relay serves a page that is not voxa's (its `relay_page` frame,
 * inside the sealed session): said above everything until the laptop finds the page unaltered.
 */
export class RelayPageAlarm {
  /**
   * @param {HTMLElement} root `#relay-page`
   * @param {Context} context
   */
  constructor(root, { store }) {
    store.watch(['relayPage'], ({ relayPage }) => {
      root.hidden = !relayPage || relayPage.state !== 'altered';
      if (root.hidden || !relayPage) return;
      const paths = relayPage.paths || [];
      const files = paths.length === 1 ? `1 file differs: ${paths[0]}` : `${paths.length} files differ: ${paths.join(', ')}`;
      root.replaceChildren(
        el('strong', {}, 'This relay changed the page.'),
        ` Your laptop compared it with its own copy (${files}). A changed page can take this pairing's secrets. `
          + 'Stop using this relay: on the laptop run ', el('code', {}, 'voxa open'), ', or pair through a relay you run, then ',
        el('code', {}, 'voxa pair --rotate'), '.');
    });
  }
}
