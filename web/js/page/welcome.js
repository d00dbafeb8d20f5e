// @ts-check
// The welcome panel: pair by pasting the link `voxa pair` printed.

import { part, show } from '../dom.js';

/** @typedef {import('../app.js').Context} Context */

export class Welcome {
  /**
   * @param {HTMLElement} root `#welcome`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const link = part(root, 'pair-link', HTMLInputElement);
    const error = part(root, 'pair-error', HTMLElement);
    part(root, 'pair-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      app.pair(link.value);
    });
    store.watch(['view', 'pairError'], ({ view, pairError }) => {
      const shown = view === 'welcome';
      const opened = shown && root.hidden;
      root.hidden = !shown;
      show(error, pairError);
      if (view === 'workspace') link.value = '';
      if (opened) link.focus();
    });
  }
}
