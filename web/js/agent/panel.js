// @ts-check
// Coding agent: a prompt, streamed progress, the final answer.

import { atBottom, part, refusalIn, show } from '../dom.js';
import { showWithTab } from '../shell/workspace.js';

/** @typedef {import('../shell/header.js').Context} Context */

export class Coder {
  /**
   * @param {HTMLElement} root `#panel-agent`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.app = app;
    /** @type {{id: string} | null} */
    this.running = null;
    this.online = false;
    this.prompt = part(root, 'prompt', HTMLTextAreaElement);
    this.progress = part(root, 'coder-progress', HTMLElement);
    this.answer = part(root, 'coder-answer', HTMLElement);
    this.error = part(root, 'coder-error', HTMLElement);
    this.ask = part(root, 'ask', HTMLButtonElement);
    this.stop = part(root, 'stop', HTMLButtonElement);
    part(root, 'coder-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.run();
    });
    this.stop.addEventListener('click', () => this.running && this.app.cancel(this.running.id));
    showWithTab(root, store, 'agent');
    store.watch(['session'], () => this.reset());
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
    });
  }

  run() {
    const prompt = this.prompt.value.trim();
    if (!prompt || this.running) return;
    this.progress.textContent = '';
    this.answer.textContent = 'working…';
    const call = this.app.attempt('coding_agent', { prompt }, refusalIn(this.error), {
      onProgress: (chunk) => {
        const follow = atBottom(this.progress);
        this.progress.append(chunk);
        if (follow) this.progress.scrollTop = this.progress.scrollHeight;
      },
    });
    this.running = call;
    this.refresh();
    call.done.then((outcome) => {
      const exit = outcome && outcome.result.exit_code;
      this.answer.textContent = !outcome ? ''
        : outcome.result.text || (exit === 0 ? '(no answer)' : `the agent exited with ${exit}`);
    }).finally(() => {
      this.running = null;
      this.refresh();
    });
  }

  reset() {
    this.progress.textContent = '';
    this.answer.textContent = '';
    show(this.error);
  }

  refresh() {
    this.ask.disabled = !this.online || !!this.running;
    this.stop.disabled = !this.running;
  }
}
