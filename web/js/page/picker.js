// @ts-check
// The machine picker: one button in the header names the machine in use and opens a sheet that
// lists every laptop paired in this browser and, under each, the environments it routes calls to.
// Choosing one switches to it; each laptop can be renamed (in this browser only) or forgotten,
// after a question, and "Add a laptop" pairs another.

import { el, part } from '../dom.js';
import * as pairings from '../pairings.js';

/**
 * @typedef {import('../app.js').Context} Context
 * @typedef {import('../pairings.js').Pairing} Pairing
 * @typedef {import('../store.js').State} State
 */

/**
 * Labels as the picker shows them: two laptops with one name are told apart by their codes.
 * @param {Pairing[]} list
 * @returns {Map<string, string>} pairing id → label
 */
export function labels(list) {
  const plain = list.map((p) => pairings.label(p));
  return new Map(list.map((p, i) => {
    const twin = plain.indexOf(plain[i]) !== plain.lastIndexOf(plain[i]);
    return [p.id, twin && p.kind === 'relay' ? `${plain[i]} · ${p.code.slice(0, 4)}` : plain[i]];
  }));
}

/**
 * The environments a laptop lists in the picker: the live list for the one in use, the remembered
 * one for the others.
 * @param {Pairing} pairing
 * @param {Readonly<State>} state
 */
function environmentsOf(pairing, state) {
  const inUse = state.pairing && state.pairing.id === pairing.id;
  return inUse ? state.environments : pairing.environments || [];
}

export class MachinePicker {
  /**
   * @param {HTMLElement} root `#machine-pick`: the header button and its sheet
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.store = store;
    this.app = app;
    this.root = root;
    this.button = part(root, 'machine', HTMLButtonElement);
    this.name = part(root, 'machine-name', HTMLElement);
    this.sheet = part(root, 'machines', HTMLDialogElement);
    this.list = part(root, 'machine-list', HTMLElement);
    /** The laptop being renamed, or asked about forgetting (its id); `''` for none. */
    this.renaming = '';
    this.asking = '';
    this.button.addEventListener('click', () => this.open());
    part(root, 'machines-close', HTMLButtonElement).addEventListener('click', () => this.sheet.close());
    part(root, 'machines-add', HTMLButtonElement).addEventListener('click', () => {
      this.sheet.close();
      app.showWelcome();
    });
    // A tap on the dimmed page around the sheet closes it, as a tap outside a phone's sheet does.
    this.sheet.addEventListener('click', (event) => {
      const box = this.sheet.getBoundingClientRect();
      const outside = event.clientX < box.left || event.clientX > box.right || event.clientY < box.top || event.clientY > box.bottom;
      if (event.target === this.sheet && outside) this.sheet.close();
    });
    this.sheet.addEventListener('close', () => {
      this.renaming = '';
      this.asking = '';
      this.button.setAttribute('aria-expanded', 'false');
      if (this.root.isConnected && !this.button.hidden) this.button.focus();
    });
    store.watch(['view', 'pairings', 'pairing', 'environments', 'env', 'online'], (state) => {
      this.showButton(state);
      if (this.sheet.open) this.render();
    });
  }

  /** @param {Readonly<State>} state */
  showButton(state) {
    const { pairing } = state;
    // Shown with the welcome view too ("Add a laptop"), so the way back is where it always is.
    this.button.hidden = !pairing || state.view === 'starting';
    if (!pairing) return;
    const laptop = labels(state.pairings).get(pairing.id) || pairings.label(pairing);
    const env = state.env && state.environments.find((e) => e.envKey === state.env);
    const shown = env ? `${laptop} › ${env.name}` : laptop;
    this.name.textContent = shown;
    this.button.setAttribute('aria-label', `Machine: ${shown}`);
    this.root.dataset.env = env ? 'true' : 'false';
  }

  open() {
    this.renaming = '';
    this.asking = '';
    this.render();
    this.sheet.showModal();
    this.button.setAttribute('aria-expanded', 'true');
    const current = this.list.querySelector('[aria-current="true"]');
    if (current instanceof HTMLElement) current.focus();
  }

  /**
   * Lists the laptops again, then puts the focus on `focus` (a `data-focus` value) when given.
   * @param {string} [focus]
   */
  render(focus) {
    const state = this.store.state;
    const named = labels(state.pairings);
    this.list.replaceChildren(...state.pairings.map((pairing, index) => this.laptop(pairing, index, named, state)));
    if (focus) {
      const target = this.list.querySelector(`[data-focus="${focus}"]`);
      if (target instanceof HTMLElement) target.focus();
    }
  }

  /**
   * One laptop: its button, its environments, and what can be done with it.
   * @param {Pairing} pairing
   * @param {number} index
   * @param {Map<string, string>} named
   * @param {Readonly<State>} state
   */
  laptop(pairing, index, named, state) {
    const label = named.get(pairing.id) || pairings.label(pairing);
    const inUse = !!state.pairing && state.pairing.id === pairing.id;
    const here = inUse && !state.env;
    const detail = [inUse ? (state.online ? 'in use · online' : 'in use') : '',
      pairing.alias && pairing.name ? pairing.name : '',
      pairing.kind === 'relay' ? `code ${pairing.code.slice(0, 4)}…` : 'this machine'].filter(Boolean).join(' · ');
    const detailId = `machine-detail-${index}`;
    const choose = el('button', {
      type: 'button', class: 'machine-choice', 'aria-label': label, 'aria-current': here ? 'true' : undefined,
      'aria-describedby': detailId, 'data-focus': `choose-${index}`,
      onclick: () => this.choose(pairing.id, ''),
    }, el('span', { class: 'machine-label', text: label }), el('span', { class: 'machine-detail muted', id: detailId, text: detail }));

    const environments = environmentsOf(pairing, state);
    const nested = environments.length === 0 ? null : el('ul', { class: 'machine-envs', 'aria-label': `Environments of ${label}` },
      ...environments.map((env) => el('li', {}, el('button', {
        type: 'button', class: 'machine-choice env',
        'aria-label': `${env.name} on ${label}`,
        'aria-current': inUse && state.env === env.envKey ? 'true' : undefined,
        onclick: () => this.choose(pairing.id, env.envKey),
      }, el('span', { class: 'machine-label', text: env.name }), el('span', { class: 'machine-detail muted', text: 'environment' })))));

    let tail;
    if (this.renaming === pairing.id) tail = this.renameForm(pairing, index, label);
    else if (this.asking === pairing.id) tail = this.forgetQuestion(pairing, index, label);
    else {
      tail = el('div', { class: 'row machine-actions' },
        el('button', {
          type: 'button', class: 'secondary', 'aria-label': `Rename ${label}`, 'data-focus': `rename-${index}`,
          text: 'Rename', onclick: () => { this.renaming = pairing.id; this.asking = ''; this.render(`name-${index}`); },
        }),
        el('button', {
          type: 'button', class: 'danger', 'aria-label': `Forget ${label}`, 'data-focus': `forget-${index}`,
          text: 'Forget this laptop', onclick: () => { this.asking = pairing.id; this.renaming = ''; this.render(`keep-${index}`); },
        }));
    }
    return el('li', { class: 'machine-item', 'data-in-use': String(inUse) }, choose, nested, tail);
  }

  /**
   * The rename form: a textbox with the name, Save and Cancel. An empty name gives the laptop its
   * host name back.
   * @param {Pairing} pairing
   * @param {number} index
   * @param {string} label
   */
  renameForm(pairing, index, label) {
    const input = el('input', {
      type: 'text', 'aria-label': `Name for ${label}`, 'data-focus': `name-${index}`, maxlength: String(pairings.ALIAS_MAX),
      placeholder: pairing.name || pairings.label({ ...pairing, alias: undefined }), autocomplete: 'off', enterkeyhint: 'done',
    });
    input.value = pairing.alias || pairing.name || '';
    const done = () => { this.renaming = ''; this.render(`rename-${index}`); };
    const form = el('form', {
      class: 'row machine-rename',
      onsubmit: (/** @type {SubmitEvent} */ event) => {
        event.preventDefault();
        this.app.rename(pairing.id, input.value);
        done();
      },
    },
    el('label', { class: 'grow' }, input),
    el('button', { type: 'submit', text: 'Save' }),
    el('button', { type: 'button', class: 'secondary', text: 'Cancel', onclick: done }));
    // Escape in the textbox ends the rename, not the whole sheet.
    input.addEventListener('keydown', (event) => {
      if (event.key !== 'Escape') return;
      event.preventDefault();
      done();
    });
    return form;
  }

  /**
   * "Forget …?" with its two answers: forgetting cannot be undone from the phone.
   * @param {Pairing} pairing
   * @param {number} index
   * @param {string} label
   */
  forgetQuestion(pairing, index, label) {
    const questionId = `forget-question-${index}`;
    return el('div', { class: 'confirm', role: 'group', 'aria-labelledby': questionId },
      el('p', {
        id: questionId, class: 'forget-question',
        text: `Forget ${label}? This browser will need its pairing link again (on the laptop: voxa pair).`,
      }),
      el('div', { class: 'row' },
        el('button', {
          type: 'button', class: 'danger', text: 'Forget it',
          onclick: () => {
            this.asking = '';
            const inUse = this.store.state.pairing && this.store.state.pairing.id === pairing.id;
            this.app.forget(pairing.id);
            // Forgetting the laptop in use moves to the next one (or to pairing): the sheet shows it.
            if (inUse || this.store.state.pairings.length === 0) this.sheet.close();
            else this.render('choose-0');
          },
        }),
        el('button', {
          type: 'button', class: 'secondary', text: 'Keep it', 'data-focus': `keep-${index}`,
          onclick: () => { this.asking = ''; this.render(`forget-${index}`); },
        })));
  }

  /**
   * Switches to a laptop (and an environment of it) and closes the sheet.
   * @param {string} id
   * @param {string} envKey
   */
  choose(id, envKey) {
    this.sheet.close();
    this.app.switchTo(id, envKey);
  }
}
