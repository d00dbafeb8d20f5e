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

export class NewLaptop {
  /**
   * @param {HTMLDialogElement} root `#new-laptop`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const name = part(root, 'new-laptop-name', HTMLElement);
    const twin = part(root, 'new-laptop-twin', HTMLElement);
    const state = part(root, 'new-laptop-state', HTMLElement);
    const add = part(root, 'new-laptop-add', HTMLButtonElement);
    part(root, 'new-laptop-no', HTMLButtonElement).addEventListener('click', () => app.dismiss());
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
      const named = Boolean(asking.name) && known.includes(asking.name.toLowerCase());
      show(twin, named ? `You already have a laptop named ${asking.name}. This is a different one.` : '');
      // Named like one of yours: adding it takes a second look, not the obvious tap.
      add.classList.toggle('danger', named);
      const dead = DEAD_ENDS.includes(asking.state);
      state.textContent = asking.state === 'introduced' ? 'It proved it holds this pairing.'
        : dead ? `It cannot be added: ${asking.text}.` : `Not online yet (${asking.text}); its name shows once it is.`;
      add.disabled = dead;
      if (!root.open) {
        root.showModal();
        // The safe choice has the focus: "Add" takes a deliberate tap.
        part(root, 'new-laptop-no', HTMLButtonElement).focus();
      }
    });
  }
}
