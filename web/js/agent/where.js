// @ts-check
// Where a new session runs: a folder of the workspace, chosen in a folder picker over `list_dir`
// (folders only), and an agent, chosen among those the laptop lists as installed
// (`agent_sessions`' `agents`). `agent_start` gets them as `cwd` and `agent`.

import { el, part, refusalIn } from '../dom.js';

/** @typedef {import('../app.js').App} App */

export class Where {
  /**
   * @param {HTMLElement} root `#panel-agent`
   * @param {App} app
   */
  constructor(root, app) {
    this.app = app;
    this.kind = part(root, 'agent-kind', HTMLSelectElement);
    this.folderButton = part(root, 'agent-folder', HTMLButtonElement);
    this.picker = part(root, 'folder-picker', HTMLElement);
    this.path = part(root, 'folder-path', HTMLElement);
    this.list = part(root, 'folder-list', HTMLUListElement);
    this.error = part(root, 'coder-error', HTMLElement);
    /** The folder chosen, relative to the workspace ('.' for the workspace itself). */
    this.folder = '.';
    /** The folder the picker shows. */
    this.browsing = '.';
    this.folderButton.addEventListener('click', () => {
      this.picker.hidden = !this.picker.hidden;
      if (!this.picker.hidden) this.browse(this.folder);
    });
    part(root, 'folder-up', HTMLButtonElement).addEventListener('click', () => this.browse(parent(this.browsing)));
    part(root, 'folder-choose', HTMLButtonElement).addEventListener('click', () => this.choose(this.browsing));
    this.showFolder();
  }

  /**
   * The agents the laptop can start; the one chosen stays when it is still listed.
   * @param {unknown} agents
   */
  offer(agents) {
    const names = Array.isArray(agents) ? agents.filter((a) => typeof a === 'string' && a).slice(0, 32) : [];
    const chosen = this.kind.value;
    this.kind.replaceChildren(...names.map((name) => el('option', { value: name }, name)));
    if (names.includes(chosen)) this.kind.value = chosen;
    this.kind.disabled = names.length < 2;
    // With no agent to name, an empty box would only take room from the folder.
    this.kind.hidden = names.length === 0;
  }

  /** `agent_start`'s `agent` and `cwd` for the choices made. */
  args() {
    /** @type {Record<string, string>} */
    const args = {};
    if (this.kind.value) args.agent = this.kind.value;
    if (this.folder !== '.') args.cwd = this.folder;
    return args;
  }

  /** @param {string} dir */
  async browse(dir) {
    const outcome = await this.app.attempt('list_dir', { path: dir }, refusalIn(this.error)).done;
    if (!outcome) return;
    this.browsing = dir;
    this.path.textContent = dir === '.' ? 'workspace' : dir;
    const entries = Array.isArray(outcome.result.entries) ? outcome.result.entries : [];
    const folders = entries.filter((/** @type {any} */ e) => e && e.kind === 'dir' && typeof e.name === 'string')
      .map((/** @type {any} */ e) => e.name).sort((/** @type {string} */ a, /** @type {string} */ b) => a.localeCompare(b));
    const rows = folders.map((/** @type {string} */ name) => el('li', {},
      el('button', { type: 'button', class: 'secondary', 'aria-label': `${name} (folder)`, onclick: () => this.browse(join(dir, name)) },
        `▸ ${name}`)));
    if (rows.length === 0) rows.push(el('li', { class: 'muted' }, 'No folders here.'));
    this.list.replaceChildren(...rows);
  }

  /** @param {string} dir */
  choose(dir) {
    this.folder = dir;
    this.picker.hidden = true;
    this.showFolder();
  }

  showFolder() {
    this.folderButton.textContent = `Folder: ${this.folder === '.' ? 'workspace' : this.folder}`;
  }
}

/** @param {string} dir */
function parent(dir) {
  const cut = dir.lastIndexOf('/');
  return cut > 0 ? dir.slice(0, cut) : '.';
}

/**
 * @param {string} dir
 * @param {string} name
 */
function join(dir, name) {
  return dir === '.' ? name : `${dir}/${name}`;
}
