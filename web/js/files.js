// Files: browse the workspace, open a text file (size and truncation shown), edit and save it,
// view images. Refusals appear as sentences with their code.

import { base64Bytes, byId, el, formatBytes, sentence, show } from './dom.js';

const IMAGE_TYPES = {
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp',
  bmp: 'image/bmp', ico: 'image/x-icon', svg: 'image/svg+xml', avif: 'image/avif',
};
const KIND_MARK = { dir: '▸', file: '·', symlink: '↪' };

function join(dir, name) {
  return dir === '.' || dir === '' ? name : `${dir.replace(/\/+$/, '')}/${name}`;
}

function parent(dir) {
  const cut = dir.replace(/\/+$/, '').lastIndexOf('/');
  return cut <= 0 ? '.' : dir.slice(0, cut);
}

export class Files {
  constructor(app) {
    this.app = app;
    this.dir = '.';
    this.open = null;
    this.imageUrl = null;
    this.list = byId('files-list');
    this.error = byId('files-error');
    this.text = byId('file-text');
    this.image = byId('file-image');
    this.saveButton = byId('file-save');
    byId('files-up').addEventListener('click', () => this.browse(parent(this.dir)));
    byId('files-refresh').addEventListener('click', () => this.browse(this.dir));
    byId('file-close').addEventListener('click', () => this.closeFile());
    this.saveButton.addEventListener('click', () => this.save());
    this.text.addEventListener('input', () => show(byId('file-saved'), 'edited — not saved'));
  }

  /** Lists a folder of the workspace. */
  async browse(dir) {
    byId('files-up').disabled = dir === '.';
    const outcome = await this.app.attempt('list_dir', { path: dir }, this.error).done;
    if (!outcome) return;
    const { result } = outcome;
    this.dir = dir;
    byId('files-path').textContent = dir === '.' ? 'workspace' : dir;
    const entries = Array.isArray(result.entries) ? [...result.entries] : [];
    entries.sort((a, b) => (a.kind === 'dir') === (b.kind === 'dir') ? a.name.localeCompare(b.name) : a.kind === 'dir' ? -1 : 1);
    const items = entries.map((entry) => el('li', {}, el('button', {
      type: 'button',
      'aria-label': `${entry.name}${entry.kind === 'dir' ? ' (folder)' : ''}`,
      onclick: () => (entry.kind === 'dir' ? this.browse(join(dir, entry.name)) : this.openFile(join(dir, entry.name))),
    }, el('span', { class: 'kind', text: KIND_MARK[entry.kind] || '·' }), el('span', { class: 'name', text: entry.name }),
    el('span', { class: 'size', text: entry.kind === 'dir' ? '' : formatBytes(entry.size) }))));
    if (result.truncated) items.push(el('li', { class: 'empty', text: `…and ${result.truncated} more` }));
    if (items.length === 0) items.push(el('li', { class: 'empty', text: 'This folder is empty.' }));
    this.list.replaceChildren(...items);
  }

  async openFile(path) {
    const outcome = await this.app.attempt('read_file', { path }, this.error).done;
    if (!outcome) return;
    try {
      this.showFile(path, outcome.result);
    } catch {
      show(this.error, sentence({ code: 'internal', message: 'the laptop sent a file this page cannot read' }));
    }
  }

  showFile(path, result) {
    this.closeFile();
    const extension = (path.split('.').pop() || '').toLowerCase();
    const mime = IMAGE_TYPES[extension];
    const isText = result.encoding !== 'base64';
    this.open = { path: result.path || path, truncated: !!result.truncated, editable: isText && !result.truncated };
    byId('file-name').textContent = this.open.path;
    byId('file-meta').textContent = formatBytes(result.size);
    const bytes = isText ? null : base64Bytes(result.content);
    const shown = formatBytes(isText ? new TextEncoder().encode(result.content).length : bytes.length);
    show(byId('file-note'), result.truncated
      ? `Truncated: showing the first ${shown} of ${formatBytes(result.size)}. Saving is off so nothing is lost.` : '');
    if (mime && !isText) {
      this.imageUrl = URL.createObjectURL(new Blob([bytes], { type: mime }));
      this.image.src = this.imageUrl;
      this.image.alt = `Image ${this.open.path}`;
      this.image.hidden = false;
    } else if (isText) {
      this.text.value = result.content;
      this.text.hidden = false;
    } else {
      show(byId('file-note'), `This is a binary file (${formatBytes(result.size)}); it cannot be shown here.`);
    }
    this.saveButton.hidden = !isText;
    this.app.refreshControls();
    byId('file-view').hidden = false;
    byId('file-view').scrollIntoView({ block: 'nearest' });
  }

  async save() {
    if (!this.open || !this.open.editable) return;
    const saved = byId('file-saved');
    show(saved, 'saving…');
    const args = { path: this.open.path, content: this.text.value };
    const outcome = await this.app.attempt('write_file', args, this.error).done;
    show(saved, outcome ? `saved ${formatBytes(outcome.result.bytes_written)}` : 'not saved');
  }

  closeFile() {
    this.open = null;
    if (this.imageUrl) URL.revokeObjectURL(this.imageUrl);
    this.imageUrl = null;
    this.image.hidden = true;
    this.image.removeAttribute('src');
    this.text.hidden = true;
    this.text.value = '';
    show(byId('file-saved'));
    byId('file-view').hidden = true;
  }

  reset() {
    this.closeFile();
    this.list.replaceChildren();
    this.dir = '.';
  }
}
