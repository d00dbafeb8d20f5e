// Terminal: one command at a time, output streamed as it arrives, exit code and duration,
// Cancel, and the session's command history.

import { atBottom, byId, el, formatDuration } from './dom.js';

const HISTORY_KEY = 'voxa.history';
const HISTORY_MAX = 50;

/** The first output is on screen at the next frame (the bench reads this mark). */
function markFirstOutput() {
  requestAnimationFrame(() => performance.mark('voxa:first-output'));
}

export class Terminal {
  constructor(app) {
    this.app = app;
    this.out = byId('term-out');
    this.input = byId('command');
    this.runButton = byId('run');
    this.cancelButton = byId('cancel');
    this.list = byId('history');
    this.running = null;
    this.history = this.loadHistory();
    this.cursor = this.history.length;
    byId('term-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.run(this.input.value);
    });
    this.cancelButton.addEventListener('click', () => this.cancel());
    this.input.addEventListener('keydown', (event) => this.onKey(event));
    this.renderHistory();
  }

  loadHistory() {
    try {
      const stored = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || '[]');
      return Array.isArray(stored) ? stored.filter((c) => typeof c === 'string').slice(-HISTORY_MAX) : [];
    } catch {
      return [];
    }
  }

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
    byId('history-box').hidden = items.length === 0;
  }

  onKey(event) {
    if (event.key !== 'ArrowUp' && event.key !== 'ArrowDown') return;
    if (this.history.length === 0) return;
    event.preventDefault();
    this.cursor = Math.max(0, Math.min(this.history.length, this.cursor + (event.key === 'ArrowUp' ? -1 : 1)));
    this.input.value = this.history[this.cursor] || '';
  }

  /** Appends to the output, following it when the reader was at the bottom. */
  append(node, text) {
    const follow = atBottom(this.out);
    node.append(text);
    if (follow) this.out.scrollTop = this.out.scrollHeight;
  }

  run(raw) {
    const command = raw.trim();
    if (!command || this.running) return;
    this.remember(command);
    this.input.value = '';
    const follow = atBottom(this.out);
    const output = el('div', { class: 'out' });
    const end = el('div', { class: 'end', text: 'running…' });
    const block = el('div', { class: 'run' }, el('div', { class: 'cmd', text: `$ ${command}` }), output, end);
    this.out.append(block);
    if (follow) this.out.scrollTop = this.out.scrollHeight;
    let streamed = false;
    performance.mark('voxa:run');
    const started = performance.now();
    const refused = (text, error) => {
      end.className = 'end failed';
      end.textContent = error.code === 'cancelled' ? `cancelled · ${formatDuration(performance.now() - started)}` : text;
    };
    const call = this.app.attempt('run_command', { command }, refused, {
      onProgress: (chunk) => {
        if (!streamed) markFirstOutput();
        streamed = true;
        this.append(output, chunk);
      },
    });
    this.running = call;
    this.setBusy(true);
    call.done.then((outcome) => {
      if (outcome) this.showEnd(end, output, outcome.result, streamed, started);
    }).finally(() => {
      if (follow || atBottom(this.out)) this.out.scrollTop = this.out.scrollHeight;
      this.running = null;
      this.setBusy(false);
    });
  }

  /** A finished command: output not streamed yet, exit code, duration and notes. */
  showEnd(end, output, result, streamed, started) {
    if (!streamed && result.output) {
      markFirstOutput();
      this.append(output, result.output);
    }
    const code = result.exit_code;
    const took = formatDuration(Number.isFinite(result.duration_ms) ? result.duration_ms : performance.now() - started);
    const notes = [result.truncated ? 'output truncated' : '', result.timed_out ? 'timed out' : ''].filter(Boolean);
    end.className = `end ${code === 0 ? 'ok' : 'failed'}`;
    end.textContent = [`exit ${code === null || code === undefined ? '?' : code}`, took, ...notes].join(' · ');
  }

  cancel() {
    if (this.running) this.app.cancel(this.running.id);
  }

  setBusy(busy) {
    this.cancelButton.disabled = !busy;
    this.app.refreshControls();
  }

  /** Forgets the output of another laptop. */
  reset() {
    this.out.replaceChildren();
  }
}
