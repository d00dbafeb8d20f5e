// @ts-check
// A save refused `conflict`: the file changed on the laptop since it was opened. The laptop's
// version is shown under the edit, and the user chooses: keep theirs or keep mine (saved over the
// version just shown, so a third change is caught again).

import { el, formatBytes, show } from '../dom.js';

/** @typedef {import('./panel.js').Files} Files */

export class Conflict {
  /** @param {Files} files */
  constructor(files) {
    this.files = files;
    /** @type {Record<string, any> | null} */
    this.theirs = null;
    this.note = el('p', { class: 'note', role: 'status' });
    this.text = el('textarea', { 'aria-label': 'Laptop\'s version', readonly: true, spellcheck: 'false', class: 'theirs' });
    this.keepMine = el('button', { type: 'button', text: 'Keep mine', onclick: () => this.keep() });
    this.takeTheirs = el('button', { type: 'button', class: 'secondary', text: 'Take the laptop\'s', onclick: () => this.take() });
    this.root = el('section', { class: 'conflict', 'aria-label': 'Changed on the laptop', hidden: true },
      this.note, this.text, el('div', { class: 'row' }, this.keepMine, this.takeTheirs));
  }

  /**
   * Fetches the laptop's version of `path` and shows it beside the edit.
   * @param {string} path
   */
  async show(path) {
    /** @type {Record<string, any> | null} */
    let theirs = null;
    try {
      theirs = (await this.files.app.call('read_file', { path }).done).result;
    } catch {
      theirs = null;
    }
    this.theirs = theirs;
    if (theirs && theirs.encoding !== 'base64' && !theirs.truncated) {
      show(this.note, `${path} changed on the laptop since you opened it (${formatBytes(theirs.size)} there now). `
        + 'Your edit is above, the laptop\'s version below: keep one.');
      this.text.value = theirs.content;
      this.text.hidden = false;
      this.takeTheirs.hidden = false;
    } else {
      show(this.note, theirs ? `${path} changed on the laptop into something this page cannot show. Keep mine replaces it.`
        : `${path} was removed or renamed on the laptop since you opened it. Keep mine saves it again.`);
      this.text.hidden = true;
      this.takeTheirs.hidden = true;
    }
    this.root.hidden = false;
    this.root.scrollIntoView({ block: 'nearest' });
  }

  keep() {
    const version = this.theirs && typeof this.theirs.version === 'string' ? this.theirs.version : this.theirs ? undefined : 'new';
    if (version === undefined && this.files.open) this.files.open.version = undefined;
    this.files.save(version);
  }

  take() {
    if (this.theirs) this.files.takeTheirs(this.theirs);
    this.hide();
  }

  hide() {
    this.theirs = null;
    this.root.hidden = true;
    this.text.value = '';
  }
}
