// @ts-check
// The Shell tab: an interactive terminal on the laptop (docs/PROTOCOL.md, "Terminal sessions"),
// drawn by the vendored xterm.js, which is loaded only when this tab first opens. Output is
// acknowledged once the emulator has drawn it, so a flood never outruns the phone. The terminal
// outlives the page: coming back (a reconnect, a reload) attaches to it again, draws the screen the
// laptop sends (`term_snapshot`) in place of what was shown, then live output. Nothing the emulator
// says while it draws a snapshot is sent, and its answers to live output go without the key bar's
// modifiers (answers.js). A key bar types what a phone keyboard lacks; Copy and Paste use the
// clipboard.

import { base64Bytes, el, part, show } from '../dom.js';
import { onSession } from '../session/events.js';
import { machineName } from '../store.js';
import { showWithTab } from '../tabs.js';
import { answersOf } from './answers.js';
import { fillView } from './fit.js';
import { BAR, arrowKey, withModifiers } from './keys.js';
import { TerminalPicker } from './picker.js';
import { mirrorStyles } from './styles.js';

/**
 * @typedef {import('../app.js').Context} Context
 * @typedef {import('../session.js').Session} Session
 * @typedef {{write(data: Uint8Array | string, done?: () => void): void, reset(): void, focus(): void,
 *   open(parent: HTMLElement): void, loadAddon(addon: any): void, onData(listener: (data: string) => void): void,
 *   onResize(listener: (size: {cols: number, rows: number}) => void): void, getSelection(): string,
 *   paste(text: string): void, cols: number, rows: number, options: Record<string, any>,
 *   modes: {applicationCursorKeysMode: boolean}, parser: import('./answers.js').Parser}} XTerm
 */

const VENDOR = '/vendor/xterm';
/** Resizes are sent once the screen has stopped changing for this long (a rotation is several). */
const RESIZE_SETTLE_MS = 150;
/** Output frames of a terminal this page is still opening, kept until its id is known. */
const EARLY_FRAMES = 64;

const LIGHT = { background: '#fbfbfd', foreground: '#1d232f', cursor: '#1d232f', selectionBackground: '#b6d1ff' };
const DARK = { background: '#0a0c10', foreground: '#e6e9ef', cursor: '#e6e9ef', selectionBackground: '#334a73' };

/** @type {Promise<{Terminal: any, FitAddon: any}> | null} */
let loading = null;

/** Loads the emulator and its stylesheet, once. */
function loadXterm() {
  if (!loading) {
    document.head.append(el('link', { rel: 'stylesheet', href: `${VENDOR}/xterm.css` }));
    const core = `${VENDOR}/xterm.mjs`;
    const fit = `${VENDOR}/addon-fit.mjs`;
    loading = Promise.all([import(core), import(fit)]).then(([xterm, addon]) => ({
      Terminal: xterm.Terminal, FitAddon: addon.FitAddon,
    }));
  }
  return loading;
}

export class Terminal {
  /**
   * @param {HTMLElement} root `#panel-shell`
   * @param {Context} context
   */
  constructor(root, { store }) {
    this.store = store;
    this.screen = part(root, 'shell-screen', HTMLElement);
    this.status = part(root, 'shell-status', HTMLElement);
    this.error = part(root, 'shell-error', HTMLElement);
    this.newButton = part(root, 'shell-new', HTMLButtonElement);
    this.closeButton = part(root, 'shell-close', HTMLButtonElement);
    /** Every machine's terminals, to choose from (shown once there is more than one to choose). */
    this.picker = new TerminalPicker(part(root, 'shell-pick', HTMLSelectElement), store);
    this.bar = part(root, 'keybar', HTMLElement);
    /** @type {XTerm | null} */
    this.term = null;
    /** @type {any} */
    this.fit = null;
    /** @type {Session | null} */
    this.session = null;
    this.online = false;
    this.shown = false;
    /** The terminal on screen ('' for none) and the offset its next output frame must carry. */
    this.id = '';
    /** The machine of the terminal on screen: an environment's envKey, `''` for this laptop. */
    this.env = '';
    this.next = -1;
    /** Attached and waiting for the terminal's screen: output before it is not drawn. */
    this.awaiting = false;
    /** Snapshots being drawn: while any is, nothing the emulator says is sent. */
    this.drawing = 0;
    /** Whether what the emulator says now answers a question in the output (answers.js). */
    this.answering = () => false;
    this.opening = false;
    /** @type {Record<string, any>[]} */
    this.early = [];
    this.held = { ctrl: false, alt: false };
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.resizeTimer = undefined;
    this.buildBar();
    this.fill = fillView(root, this.screen, [this.bar, this.error], () => this.fitNow());
    this.newButton.addEventListener('click', () => this.openNew());
    this.closeButton.addEventListener('click', () => this.closeCurrent());
    this.picker.select.addEventListener('change', () => {
      const { id, env } = this.picker.chosen();
      if (id !== this.id || env !== this.env) this.attach(id, env);
    });
    this.picker.select.addEventListener('focus', () => this.listAll());
    showWithTab(root, store, 'shell');
    store.watch(['tab'], ({ tab }) => {
      this.shown = tab === 'shell';
      this.fill();
      if (this.shown) this.start();
    });
    onSession(store, { term: (frame) => this.take(frame) }, (session) => {
      this.session = session;
      this.forget();
    });
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
      if (online && this.term) this.resume();
    });
    matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => this.applyTheme());
  }

  buildBar() {
    for (const key of BAR) {
      const button = el('button', { type: 'button', class: 'key secondary', text: key.label, 'aria-label': key.name });
      if ('hold' in key) button.setAttribute('aria-pressed', 'false');
      // The emulator keeps the keyboard: a tap on the bar must not take the focus from it.
      button.addEventListener('pointerdown', (event) => event.preventDefault());
      button.addEventListener('click', () => this.pressKey(key, button));
      this.bar.append(button);
    }
    const copy = el('button', { type: 'button', class: 'key secondary', text: 'Copy' });
    copy.addEventListener('click', () => this.copy());
    const paste = el('button', { type: 'button', class: 'key secondary', text: 'Paste' });
    paste.addEventListener('click', () => this.paste());
    this.bar.append(copy, paste);
  }

  /**
   * @param {typeof BAR[number]} key
   * @param {HTMLButtonElement} button
   */
  pressKey(key, button) {
    if ('hold' in key) {
      this.held[key.hold] = !this.held[key.hold];
      button.setAttribute('aria-pressed', String(this.held[key.hold]));
      return;
    }
    const application = this.term ? this.term.modes.applicationCursorKeysMode : false;
    this.type('arrow' in key ? arrowKey(key.arrow, application) : key.send);
    if (this.term) this.term.focus();
  }

  /** Creates the emulator the first time the tab opens, then connects it. */
  async start() {
    if (this.term) {
      this.fitNow();
      return;
    }
    try {
      const { Terminal, FitAddon } = await loadXterm();
      if (this.term) return;
      mirrorStyles(this.screen);
      /** @type {XTerm} */
      const term = new Terminal({
        fontFamily: 'ui-monospace, "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace',
        fontSize: 14, cursorBlink: true, scrollback: 5000, allowProposedApi: false,
      });
      this.fit = new FitAddon();
      term.loadAddon(this.fit);
      term.open(this.screen);
      this.answering = answersOf(term.parser);
      term.onData((data) => this.said(data));
      term.onResize(({ cols, rows }) => this.sendSize(cols, rows));
      this.term = term;
      this.applyTheme();
      new ResizeObserver(() => this.fitNow()).observe(this.screen);
      this.fitNow();
      this.fill();
      if (this.online) this.resume();
    } catch (error) {
      show(this.error, `The terminal could not be loaded: ${error}`);
    }
  }

  applyTheme() {
    if (this.term) this.term.options.theme = matchMedia('(prefers-color-scheme: dark)').matches ? DARK : LIGHT;
  }

  fitNow() {
    if (this.fit && this.shown && this.screen.clientWidth > 0) this.fit.fit();
  }

  refresh() {
    this.newButton.disabled = !this.online;
    this.closeButton.disabled = !this.online || !this.id;
    for (const button of this.bar.querySelectorAll('button')) button.disabled = !this.online;
  }

  /** Another laptop: nothing of the previous one's terminal stays. */
  forget() {
    this.id = '';
    this.env = '';
    this.picker.clear();
    this.next = -1;
    this.awaiting = false;
    this.early = [];
    if (this.term) this.term.reset();
    this.refresh();
  }

  /**
   * Runs a terminal tool; a refusal is shown as a sentence.
   * @param {string} name
   * @param {Record<string, unknown>} args
   */
  async call(name, args) {
    if (!this.session) return null;
    try {
      const { result } = await this.session.call(name, args, this.routed()).done;
      return result;
    } catch (/** @type {any} */ error) {
      show(this.error, error && error.message ? `${name.replace('term_', '')}: ${error.message}` : String(error));
      return null;
    }
  }

  /**
   * Online again (or for the first time): back to the terminal on screen, else the newest running
   * one of the machine the header names, else a new one there.
   */
  async resume() {
    show(this.error);
    const terminals = await this.listAll();
    const running = terminals.filter((t) => !t.exited && t.env === this.store.state.env);
    // The terminal on screen, else the one the address names (route.js).
    const wanted = this.id || this.store.state.shellTerm;
    const same = terminals.find((t) => t.term === wanted && (!this.id || t.env === this.env));
    const pick = same || running[running.length - 1];
    if (pick) await this.attach(pick.term, pick.env);
    else await this.openNew();
  }

  /** A call's options for the terminal on screen: to its machine. */
  routed() {
    return this.env ? { env: this.env } : {};
  }

  /** Lists every machine's terminals into the picker. */
  async listAll() {
    const terminals = this.session ? await this.picker.list(this.session, { id: this.id, env: this.env }) : [];
    if (this.picker.select.hidden && this.status.textContent) this.status.hidden = false;
    this.tidy();
    return terminals;
  }

  /** @param {string} text what the status line says now */
  say(text) {
    show(this.status, text);
    this.tidy();
  }

  /** The picker names the terminal on screen already: the status line then says only news. */
  tidy() {
    if (!this.picker.select.hidden && this.status.textContent === this.named()) this.status.hidden = true;
  }

  /** The status line for the terminal on screen: its id, and its machine when not this laptop. */
  named() {
    return this.env ? `${this.id} on ${machineName(this.store.state.environments || [], this.env)}` : this.id;
  }

  /**
   * Watches terminal `id` again: sized to this screen first, so the snapshot that comes before
   * the answer is drawn at the size it was taken at. What was shown stays until it comes.
   * @param {string} id
   * @param {string} env its machine (`''`: this laptop)
   */
  async attach(id, env) {
    if (!this.term) return;
    this.id = id;
    this.env = env;
    this.next = -1;
    this.awaiting = true;
    show(this.status, `attaching to ${id}…`);
    clearTimeout(this.resizeTimer);
    await this.call('term_resize', { term: id, cols: this.term.cols, rows: this.term.rows });
    const result = await this.call('term_attach', { term: id });
    if (result) this.store.set({ shellTerm: id });
    this.picker.choose({ id, env });
    if (result) this.say(this.named());
    this.refresh();
  }

  async openNew() {
    if (!this.term || this.opening) return;
    this.opening = true;
    this.term.reset();
    this.id = '';
    // A new terminal opens on the machine the header names.
    this.env = this.store.state.env || '';
    this.next = -1;
    this.awaiting = false;
    show(this.status, 'opening a terminal…');
    const result = await this.call('term_open', { cols: this.term.cols, rows: this.term.rows });
    this.opening = false;
    if (result && typeof result.term === 'string') {
      this.id = result.term;
      this.store.set({ shellTerm: this.id });
      this.say(this.named());
      this.listAll();
      const early = this.early.filter((frame) => frame.term === this.id);
      this.early = [];
      for (const frame of early) this.take(frame);
    }
    this.refresh();
    this.term.focus();
  }

  async closeCurrent() {
    if (!this.id) return;
    const id = this.id;
    await this.call('term_close', { term: id });
  }

  /**
   * A `term_snapshot`, `term_output` or `term_exit` frame.
   * @param {Record<string, any>} frame
   */
  take(frame) {
    if (!this.term) return;
    if (frame.term !== this.id || (typeof frame.env === 'string' ? frame.env : '') !== this.env) {
      if (this.opening && this.early.length < EARLY_FRAMES) this.early.push(frame);
      return;
    }
    if (frame.type === 'term_exit') {
      this.term.write(`\r\n[the program ended with code ${frame.code}]\r\n`);
      this.say(`${this.named()} ended`);
      this.id = '';
      this.refresh();
      this.listAll();
      return;
    }
    if (typeof frame.offset !== 'number' || typeof frame.data !== 'string') return;
    if (frame.type === 'term_snapshot') {
      this.draw(frame.offset, base64Bytes(frame.data));
      return;
    }
    if (this.awaiting || (this.next >= 0 && frame.offset !== this.next)) return;
    const bytes = base64Bytes(frame.data);
    const end = frame.offset + bytes.length;
    this.next = end;
    const term = frame.term;
    // An environment's terminal is acknowledged there, through the laptop.
    const env = typeof frame.env === 'string' && frame.env ? { env: frame.env } : {};
    // Acknowledged once drawn: the laptop sends more only as fast as the phone shows it.
    this.term.write(bytes, () => {
      if (this.session) this.session.sendJson({ type: 'term_ack', term, offset: end, ...env });
    });
  }

  /**
   * The terminal's screen in place of what was shown; its output follows from `offset`. Not
   * output: nothing to acknowledge.
   * @param {number} offset
   * @param {Uint8Array} bytes
   */
  draw(offset, bytes) {
    if (!this.term) return;
    this.awaiting = false;
    this.next = offset;
    this.term.reset();
    this.drawing += 1;
    this.term.write(bytes, () => {
      this.drawing -= 1;
    });
  }

  /**
   * What the emulator gives as input: a key, or its answer to a question in the output. While a
   * snapshot is drawn nothing is sent; an answer to live output goes as it is, while the page is
   * in view (a phone in a pocket answers nothing another watching phone will answer too).
   * @param {string} data
   */
  said(data) {
    if (this.drawing > 0) return;
    if (!this.answering()) {
      this.type(data);
      return;
    }
    if (this.id && this.session && document.visibilityState === 'visible') {
      this.session.call('term_input', { term: this.id, data }, this.routed()).done.catch(() => {});
    }
  }

  /** @param {string} data what the keyboard (or the bar) typed */
  type(data) {
    if (!this.id || !this.session) return;
    const typed = withModifiers(data, this.held);
    if (this.held.ctrl || this.held.alt) {
      this.held = { ctrl: false, alt: false };
      for (const button of this.bar.querySelectorAll('[aria-pressed]')) button.setAttribute('aria-pressed', 'false');
    }
    this.session.call('term_input', { term: this.id, data: typed }, this.routed()).done.catch((/** @type {any} */ error) => {
      show(this.error, `typing: ${error && error.message ? error.message : error}`);
    });
  }

  /**
   * @param {number} cols
   * @param {number} rows
   */
  sendSize(cols, rows) {
    clearTimeout(this.resizeTimer);
    this.resizeTimer = setTimeout(() => {
      if (this.id) this.call('term_resize', { term: this.id, cols, rows });
    }, RESIZE_SETTLE_MS);
  }

  async copy() {
    const text = this.term ? this.term.getSelection() : '';
    if (!text) {
      show(this.status, 'select text in the terminal first');
      return;
    }
    try {
      await navigator.clipboard.writeText(text);
      show(this.status, 'copied');
    } catch {
      show(this.error, 'this browser did not allow copying');
    }
  }

  async paste() {
    try {
      const text = await navigator.clipboard.readText();
      if (text && this.term) this.term.paste(text);
    } catch {
      show(this.error, 'this browser did not allow pasting');
    }
  }
}
