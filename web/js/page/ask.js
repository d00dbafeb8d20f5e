// @ts-check
// "Add this laptop?": asked when a link pairs with a laptop this browser does not know
// (docs/SECURITY.md, "A new pairing is asked for"). The laptop proves the pairing in a held
// session and so tells its name; nothing else is sent to it before "Add", and "Not now" leaves it.
// A laptop named like one already paired is said to be another one.

import { part, show } from '../dom.js';
import * as pairings from '../pairings.js';

/** @typedef {import('../app.js').Context} Context */

/** States of the held session in which adding it could never work. */
const DEAD_ENDS = ['refused', 'impostor', 'insecure', 'broken', 'replaced'];

export class AskPairing {
  /**
   * @param {HTMLDialogElement} root `#ask`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const name = part(root, 'ask-name', HTMLElement);
    const twin = part(root, 'ask-twin', HTMLElement);
    const state = part(root, 'ask-state', HTMLElement);
    const add = part(root, 'ask-add', HTMLButtonElement);
    part(root, 'ask-no', HTMLButtonElement).addEventListener('click', () => app.dismiss());
    add.addEventListener('click', () => app.add());
    // Escape (or the phone's back gesture) is "Not now".
    root.addEventListener('cancel', (event) => {
      event.preventDefault();
      app.dismiss();
    });
    store.watch(['asking'], ({ asking }) => {
      if (!asking) {
        if (root.open) root.close();
        return;
      }
      name.textContent = asking.name || asking.label;
      const known = pairings.all().filter((p) => p.id !== asking.pairing.id).map((p) => pairings.label(p).toLowerCase());
      show(twin, asking.name && known.includes(asking.name.toLowerCase())
        ? `You already have a laptop named ${asking.name}. This is a different one.` : '');
      const dead = DEAD_ENDS.includes(asking.state);
      state.textContent = asking.state === 'introduced' ? 'It proved it holds this pairing.'
        : dead ? `It cannot be added: ${asking.text}.` : `Not online yet (${asking.text}); its name shows once it is.`;
      add.disabled = dead;
      if (!root.open) {
        root.showModal();
        // The safe choice has the focus: "Add" takes a deliberate tap.
        part(root, 'ask-no', HTMLButtonElement).focus();
      }
    });
  }
}
