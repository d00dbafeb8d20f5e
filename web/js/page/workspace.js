// @ts-check
// The workspace: the tool tabs and the panel each one shows (a panel hides itself when its tab is
// not chosen: it watches `tab`).

import { part } from '../dom.js';

/** @typedef {import('../app.js').Context} Context */

export class Workspace {
  /**
   * @param {HTMLElement} root `#workspace`
   * @param {Context} context
   */
  constructor(root, { store }) {
    const nav = part(root, 'tabs', HTMLElement);
    const tabs = [...nav.querySelectorAll('button')];
    for (const tab of tabs) tab.addEventListener('click', () => store.set({ tab: tab.id.replace(/^tab-/, ''), approvalsOpen: false }));
    store.watch(['view'], ({ view }) => { root.hidden = view !== 'workspace'; });
    store.watch(['tab'], ({ tab }) => {
      for (const button of tabs) button.setAttribute('aria-pressed', String(button.id === `tab-${tab}`));
    });
  }
}
