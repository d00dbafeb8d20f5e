// @ts-check
// What the Files panel does besides reading and saving: a new file, rename, delete to the trash
// (with Undo) and restore from it, upload from the phone and download to it, with progress.

import { el, formatBytes, sentence, show } from '../dom.js';
import { download, finishUpload, save, upload } from './transfer.js';

/** @typedef {import('./panel.js').Files} Files */
/** @typedef {import('../dom.js').Failure} Failure */

/**
 * @param {string} dir
 * @param {string} name
 */
export function join(dir, name) {
  return dir === '.' || dir === '' ? name : `${dir.replace(/\/+$/, '')}/${name}`;
}

/** @param {string} dir */
export function parent(dir) {
  const cut = dir.replace(/\/+$/, '').lastIndexOf('/');
  return cut <= 0 ? '.' : dir.slice(0, cut);
}

/** @param {string} path */
const baseName = (path) => path.split('/').pop() || path;

export class Actions {
  /**
   * @param {Files} files
   * @param {HTMLElement} root `#panel-files`
   */
  constructor(files, root) {
    this.files = files;
    /** @type {'new' | 'rename' | null} */
    this.asking = null;
    const button = (/** @type {string} */ text, /** @type {() => void} */ onclick, secondary = true) =>
      el('button', { type: 'button', class: secondary ? 'secondary' : '', text, onclick });
    this.newButton = button('New file', () => this.ask('new'));
    // Never shown: "Upload" opens it.
    this.picker = el('input', { type: 'file', id: 'file-upload', hidden: true });
    this.picker.addEventListener('change', () => this.sendPicked());
    this.uploadButton = button('Upload', () => this.picker.click());
    this.trashButton = button('Trash', () => this.showTrash());
    // The form that asks for a name: a new file's, or a new path for the open one.
    this.field = el('input', { 'aria-label': 'New file name', autocomplete: 'off', autocapitalize: 'off', spellcheck: 'false' });
    this.submit = el('button', { type: 'submit', text: 'Create' });
    this.form = el('form', { class: 'row ask', hidden: true },
      el('label', { class: 'grow' }, this.field), this.submit, button('Back', () => this.unask()));
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.answer();
    });
    this.progress = el('progress', { max: '1', value: '0', hidden: true, 'aria-label': 'Transfer' });
    this.status = el('p', { class: 'muted', role: 'status', hidden: true });
    this.choice = el('div', { class: 'row', hidden: true });
    this.trashList = el('ul', { class: 'entries', 'aria-label': 'Trash' });
    this.trash = el('section', { class: 'trash', hidden: true },
      el('div', { class: 'row' }, el('strong', { class: 'grow', text: 'Trash' }), button('Close trash', () => { this.trash.hidden = true; })),
      this.trashList);
    root.querySelector('.path-row')?.after(
      el('div', { class: 'row file-actions' }, this.newButton, this.uploadButton, this.trashButton, this.picker),
      this.form, this.progress, this.status, this.choice, this.trash);
    this.renameButton = button('Rename', () => this.ask('rename'));
    this.downloadButton = button('Download', () => this.fetchOpen());
    this.deleteButton = button('Delete', () => this.remove());
    files.saved.parentElement?.after(el('div', { class: 'row file-actions' }, this.renameButton, this.downloadButton, this.deleteButton));
  }

  /**
   * Says something in the status line, with buttons to choose from (none: the choice goes).
   * @param {string} text
   * @param {HTMLButtonElement[]} [choices]
   */
  say(text, choices = []) {
    show(this.status, text);
    this.choice.replaceChildren(...choices);
    this.choice.hidden = choices.length === 0;
  }

  /** @param {Failure} error */
  fail(error) {
    this.progress.hidden = true;
    this.say(sentence(error));
  }

  /** @param {'new' | 'rename'} what */
  ask(what) {
    const open = this.files.open;
    if (what === 'rename' && !open) return;
    this.asking = what;
    this.field.setAttribute('aria-label', what === 'new' ? 'New file name' : 'New path');
    this.submit.textContent = what === 'new' ? 'Create' : 'Move';
    this.field.value = what === 'rename' && open ? open.path : '';
    this.form.hidden = false;
    this.field.focus();
  }

  unask() {
    this.asking = null;
    this.form.hidden = true;
  }

  async answer() {
    const name = this.field.value.trim();
    const { app } = this.files;
    if (!name) return;
    try {
      if (this.asking === 'new') {
        const path = name.includes('/') ? name : join(this.files.dir, name);
        await app.call('write_file', { path, content: '', version: 'new' }).done;
        this.unask();
        await this.files.browse(parent(path));
        await this.files.openFile(path);
        this.say(`Created ${path}.`);
      } else if (this.asking === 'rename' && this.files.open) {
        const from = this.files.open.path;
        const { result } = await app.call('move_file', { from, to: name }).done;
        this.unask();
        this.files.open.path = result.to;
        this.files.name.textContent = result.to;
        await this.files.browse(parent(result.to));
        this.say(`Moved ${from} to ${result.to}.`);
      }
    } catch (error) {
      this.fail(/** @type {Failure} */ (error));
    }
  }

  /** Deletes the open file (to the trash), with Undo. */
  async remove() {
    const open = this.files.open;
    if (!open) return;
    try {
      const { result } = await this.files.app.call('delete_file', { path: open.path }).done;
      this.files.closeFile();
      await this.files.browse(this.files.dir);
      this.say(`Moved ${open.path} to the trash.`, [el('button', {
        type: 'button', class: 'secondary', text: 'Undo', onclick: () => this.restore(result.trash),
      })]);
    } catch (error) {
      this.fail(/** @type {Failure} */ (error));
    }
  }

  /** @param {string} id */
  async restore(id) {
    try {
      const { result } = await this.files.app.call('restore_file', { id }).done;
      await this.files.browse(parent(result.path));
      this.say(`Restored ${result.path}.`);
      if (!this.trash.hidden) await this.showTrash();
    } catch (error) {
      this.fail(/** @type {Failure} */ (error));
    }
  }

  async showTrash() {
    try {
      const { result } = await this.files.app.call('list_trash', {}).done;
      /** @type {{id: string, path: string, kind: string, size: number, deleted_ms: number}[]} */
      const items = Array.isArray(result.items) ? result.items : [];
      const rows = items.map((item) => el('li', {}, el('button', {
        type: 'button', 'aria-label': `Restore ${item.path}`, onclick: () => this.restore(item.id),
      }, el('span', { class: 'name', text: item.path }),
      el('span', { class: 'size', text: `${item.kind === 'dir' ? 'folder' : formatBytes(item.size)} · ${new Date(item.deleted_ms).toLocaleString()}` }))));
      if (rows.length === 0) rows.push(el('li', { class: 'empty', text: 'The trash is empty.' }));
      this.trashList.replaceChildren(...rows);
      this.trash.hidden = false;
    } catch (error) {
      this.fail(/** @type {Failure} */ (error));
    }
  }

  /**
   * Shows a transfer's progress.
   * @param {string} verb
   * @param {string} name
   * @param {number} done
   * @param {number} total
   */
  moving(verb, name, done, total) {
    this.progress.hidden = false;
    this.progress.max = Math.max(total, 1);
    this.progress.value = done;
    this.say(`${verb} ${name}: ${formatBytes(done)} of ${formatBytes(total)}`);
  }

  async sendPicked() {
    const file = this.picker.files && this.picker.files[0];
    this.picker.value = '';
    if (!file) return;
    const path = join(this.files.dir, file.name);
    const { app } = this.files;
    try {
      this.moving('Uploading', file.name, 0, file.size);
      await upload(app, file, path, (sent, total) => this.moving('Uploading', file.name, sent, total));
      this.uploaded(path);
    } catch (error) {
      const failure = /** @type {Failure} */ (error);
      if (failure.code !== 'conflict') return this.fail(failure);
      this.progress.hidden = true;
      this.say(`${file.name} already exists here; nothing was replaced.`, [
        el('button', { type: 'button', text: 'Replace it', onclick: () => finishUpload(app, path, file.size)
          .then(() => this.uploaded(path), (/** @type {Failure} */ err) => this.fail(err)) }),
        el('button', { type: 'button', class: 'secondary', text: 'Keep the laptop\'s', onclick: () => this.say('Kept the laptop\'s file.') }),
      ]);
    }
    return undefined;
  }

  /** @param {string} path */
  uploaded(path) {
    this.progress.hidden = true;
    this.say(`Uploaded ${path}.`);
    this.files.browse(this.files.dir);
  }

  /** Downloads the open file to the phone. */
  async fetchOpen() {
    const open = this.files.open;
    if (!open) return;
    const name = baseName(open.path);
    try {
      this.moving('Downloading', name, 0, open.size);
      const blob = await download(this.files.app, open.path, open.size, (got, total) => this.moving('Downloading', name, got, total));
      save(blob, name);
      this.progress.hidden = true;
      this.say(`Downloaded ${name} (${formatBytes(blob.size)}).`);
    } catch (error) {
      this.fail(/** @type {Failure} */ (error));
    }
  }

  refresh() {
    const online = this.files.online;
    for (const button of [this.newButton, this.uploadButton, this.trashButton]) button.disabled = !online;
    const open = !!this.files.open;
    for (const button of [this.renameButton, this.downloadButton, this.deleteButton]) button.disabled = !online || !open;
  }
}
