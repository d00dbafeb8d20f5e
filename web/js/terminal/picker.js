// @ts-check
// The Shell's terminal picker: the terminals of this laptop and of each of its environments, in
// one list, each named with its machine ("buildbox · t-1a2b…"). It shows once there is a choice
// (more than one terminal, or one on another machine); choosing one attaches the Shell to it
// (terminal/panel.js), and calls and frames then go to that machine.

import { el } from '../dom.js';
import { machineName } from '../store.js';

/**
 * @typedef {import('../store.js').Store} Store
 * @typedef {import('../session.js').Session} Session
 * @typedef {{term: string, env: string, exited: boolean}} Listed
 */

export class TerminalPicker {
  /**
   * @param {HTMLSelectElement} select `#shell-pick`
   * @param {Store} store
   */
  constructor(select, store) {
    this.select = select;
    this.store = store;
    /** @type {Listed[]} what the last listing found */
    this.listed = [];
  }

  /**
   * Lists the terminals of every machine (one that cannot be reached lists none) and offers the
   * running ones and `current`.
   * @param {Session} session
   * @param {{id: string, env: string}} current the terminal on screen
   * @returns {Promise<Listed[]>}
   */
  async list(session, current) {
    const machines = ['', ...(this.store.state.environments || []).map((e) => e.envKey)];
    const lists = await Promise.all(machines.map(async (env) => {
      try {
        const { result } = await session.call('term_list', {}, env ? { env } : {}).done;
        const listed = result && Array.isArray(result.terminals) ? result.terminals : [];
        return listed.filter((/** @type {any} */ t) => t && typeof t.term === 'string')
          .map((/** @type {any} */ t) => ({ term: String(t.term), env, exited: Boolean(t.exited) }));
      } catch {
        return [];
      }
    }));
    this.listed = lists.flat();
    this.choose(current);
    return this.listed;
  }

  /**
   * Offers what the last listing found, `current` chosen.
   * @param {{id: string, env: string}} current the terminal on screen
   */
  choose(current) {
    const environments = this.store.state.environments || [];
    const here = (/** @type {Listed} */ t) => t.term === current.id && t.env === current.env;
    const shown = this.listed.filter((t) => !t.exited || here(t));
    this.select.replaceChildren(...shown.map((t) => el('option', {
      value: JSON.stringify([t.env, t.term]),
      selected: here(t) ? true : undefined,
      text: `${machineName(environments, t.env)} · ${t.term}${t.exited ? ' (ended)' : ''}`,
    })));
    // One terminal of this laptop alone needs no choosing: the status line names it.
    this.select.hidden = !(shown.length > 1 || shown.some((t) => t.env));
  }

  /** The terminal chosen: its id and machine. */
  chosen() {
    const [env, id] = JSON.parse(this.select.value);
    return { id: String(id), env: String(env) };
  }

  clear() {
    this.listed = [];
    this.select.replaceChildren();
    this.select.hidden = true;
  }
}
