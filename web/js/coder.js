// Coding agent: a prompt, streamed progress, the final answer.

import { atBottom, byId, show } from './dom.js';

export class Coder {
  constructor(app) {
    this.app = app;
    this.running = null;
    this.prompt = byId('prompt');
    this.progress = byId('coder-progress');
    this.answer = byId('coder-answer');
    this.ask = byId('ask');
    this.stop = byId('stop');
    byId('coder-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.run();
    });
    this.stop.addEventListener('click', () => this.running && this.app.cancel(this.running.id));
  }

  run() {
    const prompt = this.prompt.value.trim();
    if (!prompt || this.running) return;
    this.progress.textContent = '';
    this.answer.textContent = 'working…';
    const call = this.app.attempt('coding_agent', { prompt }, byId('coder-error'), {
      onProgress: (chunk) => {
        const follow = atBottom(this.progress);
        this.progress.append(chunk);
        if (follow) this.progress.scrollTop = this.progress.scrollHeight;
      },
    });
    this.running = call;
    this.stop.disabled = false;
    this.app.refreshControls();
    call.done.then((outcome) => {
      const exit = outcome && outcome.result.exit_code;
      this.answer.textContent = !outcome ? ''
        : outcome.result.text || (exit === 0 ? '(no answer)' : `the agent exited with ${exit}`);
    }).finally(() => {
      this.running = null;
      this.stop.disabled = true;
      this.app.refreshControls();
    });
  }

  reset() {
    this.progress.textContent = '';
    this.answer.textContent = '';
    show(byId('coder-error'));
  }
}
