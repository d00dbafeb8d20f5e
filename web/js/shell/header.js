// @ts-check
// The header: the connection line (with Reconnect), the laptop and environment pickers, and the
// notice an error outside any call shows.

import { el, part, show } from '../dom.js';
import * as pairings from '../pairings.js';

/**
 * @typedef {import('../store.js').Store} Store
 * @typedef {import('../app.js').App} App
 * @typedef {{store: Store, app: App}} Context
 */

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

/** The laptop picker, shown once two or more laptops are paired. */
export class LaptopPicker {
  /**
   * @param {HTMLElement} root `#laptop-pick`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const select = part(root, 'laptop', HTMLSelectElement);
    select.addEventListener('change', () => app.switchTo(select.value));
    store.watch(['pairings', 'pairing'], ({ pairings: list, pairing }) => {
      const labels = list.map((p) => pairings.label(p));
      // Two laptops with one name are told apart by their codes.
      const shown = list.map((p, i) => (labels.indexOf(labels[i]) !== labels.lastIndexOf(labels[i]) && p.kind === 'relay'
        ? `${labels[i]} · ${p.code.slice(0, 4)}` : labels[i]));
      select.replaceChildren(...list.map((p, i) => el('option', { value: p.id, text: shown[i] })));
      if (pairing) select.value = pairing.id;
      root.hidden = list.length < 2;
    });
  }
}

/** The environment picker, shown when the laptop routes calls to other machines. */
export class EnvironmentPicker {
  /**
   * @param {HTMLElement} root `#env-pick`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const select = part(root, 'env', HTMLSelectElement);
    select.addEventListener('change', () => app.chooseEnv(select.value));
    store.watch(['environments', 'env'], ({ environments, env }) => {
      select.replaceChildren(el('option', { value: '', text: 'This laptop' }),
        ...environments.map((e) => el('option', { value: e.envKey, text: e.name })));
      select.value = env;
      root.hidden = environments.length === 0;
    });
  }
}

/** An error the laptop reported outside any call, until the connection comes back. */
export class Notice {
  /**
   * @param {HTMLElement} root `#notice`
   * @param {Context} context
   */
  constructor(root, { store }) {
    store.watch(['notice'], ({ notice }) => show(root, notice));
  }
}
