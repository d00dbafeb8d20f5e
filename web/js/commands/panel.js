// @ts-check
// The Terminal tab: one command at a time, output streamed as it arrives, exit code and duration,
// Cancel, a time limit the user picks (remembered), and the session's command history. Commands
// outlive the page: after a reload or a reconnect, the laptop's `calls` answer brings back the
// ones still running and the ones that finished meanwhile, and commands another device runs on
// this laptop show up here too.

import { el, formatDuration, part } from '../dom.js';
import { onSession } from '../session/events.js';
import { showWithTab } from '../tabs.js';
import { Follower, OutputView } from './output.js';

/** @typedef {import('../app.js').Context} Context */

const HISTORY_KEY = 'voxa.history';
const HISTORY_MAX = 50;
const TIME_LIMIT_KEY = 'voxa.timeLimit';
/** The time limits offered, in milliseconds, up to the tool's maximum (one hour); the first is the default. */
const TIME_LIMITS = [[120000, '2 min'], [600000, '10 min'], [1800000, '30 min'], [3600000, '1 hour']];

/** The first output is on screen at the next frame (the bench reads this mark). */
function markFirstOutput() {
  requestAnimationFrame(() => performance.mark('voxa:first-output'));
}

/**
 * What a command's end means, as a sentence.
 * @param {unknown} code
 * @param {unknown} signal
 */
function failure(code, signal) {
  if (typeof signal === 'string' && signal) return `The command was stopped by ${signal}.`;
  if (typeof code !== 'number') return 'The command ended without an exit code.';
  if (code === 127) return 'The command failed with exit code 127: the program was not found.';
  if (code === 126) return 'The command failed with exit code 126: the program could not be run.';
  return `The command failed with exit code ${code}.`;
}

export class Commands {
  /**
   * @param {HTMLElement} root `#panel-commands`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.app = app;
    this.out = part(root, 'commands-out', HTMLElement);
    this.follower = new Follower(this.out);
    this.input = part(root, 'command', HTMLInputElement);
    this.runButton = part(root, 'run', HTMLButtonElement);
    this.cancelButton = part(root, 'cancel', HTMLButtonElement);
    this.list = part(root, 'history', HTMLElement);
    this.limit = el('select', { id: 'time-limit', 'aria-label': 'Time limit', class: 'time-limit' },
      ...TIME_LIMITS.map(([ms, label]) => el('option', { value: String(ms), text: `stop after ${label}` })));
    this.limit.value = String(this.loadTimeLimit());
    this.limit.addEventListener('change', () => localStorage.setItem(TIME_LIMIT_KEY, this.limit.value));
    this.runButton.before(this.limit);
    this.historyBox = part(root, 'history-box', HTMLElement);
    /** @type {{id: string} | null} */
    this.running = null;
    this.online = false;
    this.history = this.loadHistory();
    this.cursor = this.history.length;
    part(root, 'commands-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.run(this.input.value);
    });
    this.cancelButton.addEventListener('click', () => this.cancel());
    this.input.addEventListener('keydown', (event) => this.onKey(event));
    this.renderHistory();
    showWithTab(root, store, 'commands');
    /** @type {import('../session.js').Session | null} */
    this.session = null;
    const adoptAll = (/** @type {import('../session/calls.js').AdoptedCall[]} */ adopted) => {
      for (const call of adopted) this.adopt(call);
    };
    // Another laptop: its output is not this one's.
    onSession(store, { calls: adoptAll }, (session) => {
      this.out.replaceChildren();
      this.session = session;
      this.refresh();
    });
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
    });
  }

  /** The time limit chosen last on this device, else the default. */
  loadTimeLimit() {
    const stored = Number(localStorage.getItem(TIME_LIMIT_KEY));
    return TIME_LIMITS.some(([ms]) => ms === stored) ? stored : TIME_LIMITS[0][0];
  }

  /** @returns {string[]} */
  loadHistory() {
    try {
      const stored = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || '[]');
      return Array.isArray(stored) ? stored.filter((c) => typeof c === 'string').slice(-HISTORY_MAX) : [];
    } catch {
      return [];
    }
  }

  /** @param {string} command */
  remember(command) {
    this.history = this.history.filter((c) => c !== command);
    this.history.push(command);
    this.history = this.history.slice(-HISTORY_MAX);
    this.cursor = this.history.length;
    sessionStorage.setItem(HISTORY_KEY, JSON.stringify(this.history));
    this.renderHistory();
  }

  renderHistory() {
    const items = [...this.history].reverse().map((command) => el('li', {},
      el('button', { type: 'button', text: command, onclick: () => { this.input.value = command; this.input.focus(); } })));
    this.list.replaceChildren(...items);
    this.historyBox.hidden = items.length === 0;
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    if (event.key !== 'ArrowUp' && event.key !== 'ArrowDown') return;
    if (this.history.length === 0) return;
    event.preventDefault();
    this.cursor = Math.max(0, Math.min(this.history.length, this.cursor + (event.key === 'ArrowUp' ? -1 : 1)));
    this.input.value = this.history[this.cursor] || '';
  }

  /** @param {string} raw */
  run(raw) {
    const command = raw.trim();
    if (!command || this.running) return;
    this.remember(command);
    this.input.value = '';
    // A command the reader runs is one they want to watch: back to the end.
    this.follower.following = true;
    const timeLimit = Number(this.limit.value) || TIME_LIMITS[0][0];
    performance.mark('voxa:run');
    /** @type {ReturnType<Commands['block']> | null} */
    let view = null;
    const call = this.app.attempt('run_command', { command, timeout_ms: timeLimit },
      (text, error) => view && view.refused(text, error),
      { onProgress: (chunk) => view && view.progress(chunk) });
    view = this.block(command, call);
    if (this.session) this.session.watch(call.id, { onReplay: view.replay });
  }

  /**
   * A command the laptop named that this page did not start (or started before a reload).
   * @param {import('../session/calls.js').AdoptedCall} adopted
   */
  adopt({ entry, call }) {
    if (entry.name !== 'run_command' || !this.session) return;
    const command = entry.args && typeof entry.args.command === 'string' ? entry.args.command : '(a command)';
    /** @type {(text: string, error: import('../dom.js').Failure) => void} */
    let refused = () => {};
    const done = call.done.catch((/** @type {import('../dom.js').Failure} */ error) => {
      refused(error.message || 'the command failed', error);
      return null;
    });
    const view = this.block(command, { id: call.id, done }, entry.started * 1000 - Date.now() + performance.now());
    refused = view.refused;
    this.session.watch(call.id, { onProgress: view.progress, onReplay: view.replay });
  }

  /**
   * The block of one command: `$ command`, its output and how it ended.
   * @param {string} command
   * @param {{id: string, done: Promise<import('../session/calls.js').CallOutcome | null>}} call
   * @param {number} [started] when it started, on `performance.now()`'s clock
   */
  block(command, call, started = performance.now()) {
    const output = el('div', { class: 'out' });
    const view = new OutputView(output, this.follower, markFirstOutput);
    const end = el('div', { class: 'end', text: 'running…' });
    const block = el('div', { class: 'run' }, el('div', { class: 'cmd', text: `$ ${command}` }), output, end);
    this.out.append(block);
    this.follower.watch(block);
    this.follower.follow();
    let streamed = false;
    const handlers = {
      /** @param {string} chunk */
      progress: (chunk) => {
        streamed = true;
        view.write(chunk);
      },
      /** The laptop sends the output again from the start (after a reconnect). */
      replay: () => {
        streamed = false;
        view.replace('');
      },
      /** @type {(text: string, error: import('../dom.js').Failure) => void} */
      refused: (text, error) => {
        view.flush();
        end.className = 'end failed';
        end.textContent = error.code === 'cancelled' ? `cancelled · ${formatDuration(performance.now() - started)}` : text;
      },
    };
    if (!this.running) this.running = call;
    this.refresh();
    call.done.then((outcome) => {
      if (outcome) this.showEnd(end, view, outcome.result, streamed, started);
    }).finally(() => {
      this.follower.follow();
      if (this.running === call) this.running = null;
      this.refresh();
    });
    return handlers;
  }

  /**
   * A finished command: its output when it was not all streamed (none was, or the middle was
   * left out: then the head and the tail), exit code, duration and a sentence when it failed.
   * @param {HTMLElement} end
   * @param {OutputView} view
   * @param {Record<string, any>} result
   * @param {boolean} streamed
   * @param {number} started
   */
  showEnd(end, view, result, streamed, started) {
    const omitted = Number(result.omitted_bytes) || 0;
    if (typeof result.output === 'string' && result.output && (!streamed || omitted > 0)) view.replace(result.output);
    view.flush();
    const code = result.exit_code;
    const took = formatDuration(Number.isFinite(result.duration_ms) ? result.duration_ms : performance.now() - started);
    const notes = [omitted > 0 ? `${omitted} bytes left out in the middle` : '', result.timed_out ? 'timed out' : '']
      .filter(Boolean);
    end.className = `end ${code === 0 ? 'ok' : 'failed'}`;
    end.textContent = [`exit ${code === null || code === undefined ? '?' : code}`, took, ...notes].join(' · ');
    if (code !== 0) end.append(el('span', { class: 'why', text: failure(code, result.signal) }));
  }

  cancel() {
    if (this.running) this.app.cancel(this.running.id);
  }

  refresh() {
    // Offline, a command waits in the outbox (outbox.js) and is sent once the laptop is back.
    this.runButton.disabled = !this.session || !!this.running;
    this.cancelButton.disabled = !this.running;
  }
}
