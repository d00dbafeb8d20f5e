// @ts-check
// Files: browse the workspace, open a text file (size and truncation shown), edit and save it
// with the version it was read at (a change on the laptop meanwhile is shown beside yours, and
// you choose), view images; new file, rename, delete to the trash and restore, upload and
// download with progress. Refusals appear as sentences with their code.

import { base64Bytes, el, formatBytes, part, refusalIn, sentence, show } from '../dom.js';
import { showWithTab } from '../tabs.js';
import { Conflict } from './conflict.js';
import { Actions, join, parent } from './actions.js';

/** @typedef {import('../app.js').Context} Context */
/** @typedef {{path: string, truncated: boolean, editable: boolean, version: string | undefined, size: number}} OpenFile */

/** @type {Record<string, string>} */
const IMAGE_TYPES = {
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp',
  bmp: 'image/bmp', ico: 'image/x-icon', svg: 'image/svg+xml', avif: 'image/avif',
};
/** @type {Record<string, string>} */
const KIND_MARK = { dir: '▸', file: '·', symlink: '↪' };

export class Files {
  /**
   * @param {HTMLElement} root `#panel-files`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.app = app;
    this.store = store;
    this.dir = store.state.filesPath || '.';
    /** @type {OpenFile | null} */
    this.open = null;
    /** @type {string | null} */
    this.imageUrl = null;
    this.online = false;
    /** Whether this laptop's workspace was listed since the page chose it. */
    this.loaded = false;
    this.list = part(root, 'files-list', HTMLElement);
    this.error = part(root, 'files-error', HTMLElement);
    this.text = part(root, 'file-text', HTMLTextAreaElement);
    this.image = part(root, 'file-image', HTMLImageElement);
    this.saveButton = part(root, 'file-save', HTMLButtonElement);
    this.refreshButton = part(root, 'files-refresh', HTMLButtonElement);
    this.upButton = part(root, 'files-up', HTMLButtonElement);
    this.path = part(root, 'files-path', HTMLElement);
    this.view = part(root, 'file-view', HTMLElement);
    this.name = part(root, 'file-name', HTMLElement);
    this.meta = part(root, 'file-meta', HTMLElement);
    this.note = part(root, 'file-note', HTMLElement);
    this.saved = part(root, 'file-saved', HTMLElement);
    this.conflict = new Conflict(this);
    this.text.after(this.conflict.root);
    this.actions = new Actions(this, root);
    this.upButton.addEventListener('click', () => this.browse(parent(this.dir)));
    this.refreshButton.addEventListener('click', () => this.browse(this.dir));
    part(root, 'file-close', HTMLButtonElement).addEventListener('click', () => this.closeFile());
    this.saveButton.addEventListener('click', () => this.save());
    this.text.addEventListener('input', () => show(this.saved, 'edited — not saved'));
    showWithTab(root, store, 'files');
    store.watch(['session'], () => {
      this.reset();
      this.loaded = false;
    });
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
    });
    // The workspace is listed once the laptop answers, and again whenever the panel is shown.
    store.watch(['hello'], ({ hello, tab }) => {
      if (hello && (!this.loaded || tab === 'files')) {
        this.loaded = true;
        this.browse(this.dir);
      }
    });
    store.watch(['tab'], ({ tab, online }) => {
      if (tab === 'files' && online) this.browse(this.dir);
    });
    let env = store.state.env;
    store.watch(['env'], (state) => {
      if (state.env === env) return;
      env = state.env;
      this.reset();
      if (state.online) this.browse('.');
    });
  }

  /**
   * Lists a folder of the workspace.
   * @param {string} dir
   */
  async browse(dir) {
    this.upButton.disabled = dir === '.';
    const outcome = await this.app.attempt('list_dir', { path: dir }, refusalIn(this.error)).done;
    if (!outcome) return;
    const { result } = outcome;
    this.dir = dir;
    this.store.set({ filesPath: dir });
    this.path.textContent = dir === '.' ? 'workspace' : dir;
    /** @type {{name: string, kind: string, size: number}[]} */
    const entries = Array.isArray(result.entries) ? [...result.entries] : [];
    entries.sort((a, b) => (a.kind === 'dir') === (b.kind === 'dir') ? a.name.localeCompare(b.name) : a.kind === 'dir' ? -1 : 1);
    const items = entries.map((entry) => el('li', {}, el('button', {
      type: 'button',
      'aria-label': `${entry.name}${entry.kind === 'dir' ? ' (folder)' : ''}`,
      onclick: () => (entry.kind === 'dir' ? this.browse(join(dir, entry.name)) : this.openFile(join(dir, entry.name))),
    }, el('span', { class: 'kind', text: KIND_MARK[entry.kind] || '·' }), el('span', { class: 'name', text: entry.name }),
    el('span', { class: 'size', text: entry.kind === 'dir' ? '' : formatBytes(entry.size) }))));
    if (result.truncated) items.push(el('li', { class: 'empty', text: '…and more, not listed' }));
    if (items.length === 0) items.push(el('li', { class: 'empty', text: 'This folder is empty.' }));
    this.list.replaceChildren(...items);
  }

  /** @param {string} path */
  async openFile(path) {
    const outcome = await this.app.attempt('read_file', { path }, refusalIn(this.error)).done;
    if (!outcome) return;
    try {
      this.showFile(path, outcome.result);
    } catch {
      show(this.error, sentence({ code: 'internal', message: 'the laptop sent a file this page cannot read' }));
    }
  }

  /**
   * @param {string} path
   * @param {Record<string, any>} result
   */
  showFile(path, result) {
    this.closeFile();
    const extension = (path.split('.').pop() || '').toLowerCase();
    const mime = IMAGE_TYPES[extension];
    const isText = result.encoding !== 'base64';
    this.open = {
      path: result.path || path,
      truncated: !!result.truncated,
      editable: isText && !result.truncated,
      version: typeof result.version === 'string' ? result.version : undefined,
      size: Number(result.size) || 0,
    };
    this.name.textContent = this.open.path;
    this.meta.textContent = formatBytes(this.open.size);
    const bytes = isText ? null : base64Bytes(result.content);
    const shown = formatBytes(bytes ? bytes.length : new TextEncoder().encode(result.content).length);
    show(this.note, result.truncated
      ? `Truncated: showing the first ${shown} of ${formatBytes(result.size)}. Saving is off so nothing is lost; Download gets all of it.` : '');
    if (mime && bytes && !result.truncated) {
      this.imageUrl = URL.createObjectURL(new Blob([bytes], { type: mime }));
      this.image.src = this.imageUrl;
      this.image.alt = `Image ${this.open.path}`;
      this.image.hidden = false;
    } else if (isText) {
      this.text.value = result.content;
      this.text.hidden = false;
    } else {
      show(this.note, `This is a binary file (${formatBytes(result.size)}); it cannot be shown here. Download gets it.`);
    }
    this.saveButton.hidden = !isText;
    this.refresh();
    this.view.hidden = false;
    this.view.scrollIntoView({ block: 'nearest' });
  }

  /**
   * Saves the editor's text with the version it was read at (or `version`, the user's choice
   * after a conflict). A change on the laptop meanwhile is refused and shown beside the edit.
   * @param {string} [version]
   */
  async save(version) {
    const open = this.open;
    if (!open || !open.editable) return;
    show(this.saved, 'saving…');
    /** @type {Record<string, unknown>} */
    const args = { path: open.path, content: this.text.value };
    const expected = version || open.version;
    if (expected) args.version = expected;
    let conflicted = false;
    const outcome = await this.app.attempt('write_file', args, (text, error) => {
      conflicted = error.code === 'conflict';
      if (!conflicted) show(this.error, text);
    }).done;
    if (this.open !== open) return;
    if (outcome) {
      open.version = outcome.result.version;
      open.size = Number(outcome.result.size) || 0;
      this.meta.textContent = formatBytes(open.size);
      this.conflict.hide();
      show(this.error);
      show(this.saved, `saved ${formatBytes(outcome.result.bytes_written)}`);
    } else {
      show(this.saved, 'not saved');
      if (conflicted) await this.conflict.show(open.path);
    }
  }

  /**
   * Puts the laptop's copy in the editor, as if just opened.
   * @param {Record<string, any>} theirs a `read_file` result
   */
  takeTheirs(theirs) {
    if (!this.open) return;
    this.text.value = theirs.content;
    this.open.version = theirs.version;
    this.open.size = Number(theirs.size) || 0;
    this.meta.textContent = formatBytes(this.open.size);
    show(this.saved, 'the laptop\'s version');
  }

  closeFile() {
    this.open = null;
    if (this.imageUrl) URL.revokeObjectURL(this.imageUrl);
    this.imageUrl = null;
    this.image.hidden = true;
    this.image.removeAttribute('src');
    this.text.hidden = true;
    this.text.value = '';
    this.conflict.hide();
    show(this.saved);
    this.view.hidden = true;
    this.refresh();
  }

  reset() {
    this.closeFile();
    this.list.replaceChildren();
    this.dir = '.';
  }

  refresh() {
    this.refreshButton.disabled = !this.online;
    this.saveButton.disabled = !this.online || !(this.open && this.open.editable);
    this.actions.refresh();
  }
}
