// @ts-check
// The status panel: what the laptop said in its hello, the tools it offers, and Forget / Add a
// laptop.

import { el, part } from '../dom.js';
import * as pairings from '../pairings.js';
import { showWithTab } from './workspace.js';

/** @typedef {import('./header.js').Context} Context */

/** Who hosts a call, as the status panel says it. */
const VOICE_HOSTS = { laptop: 'hosted by the laptop', relay: 'hosted by the relay' };

export class Status {
  /**
   * @param {HTMLElement} root `#panel-status`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    const facts = part(root, 'facts', HTMLElement);
    const tools = part(root, 'tools', HTMLElement);
    const forget = part(root, 'forget', HTMLButtonElement);
    const actions = forget.parentElement;
    const ask = part(root, 'forget-ask', HTMLElement);
    const question = part(root, 'forget-question', HTMLElement);
    const keep = part(root, 'forget-no', HTMLButtonElement);
    /** @param {boolean} asking */
    const asking = (asking) => {
      ask.hidden = !asking;
      if (actions) actions.hidden = asking;
    };
    // Forgetting cannot be undone from the phone (the link is needed again): it asks first.
    forget.addEventListener('click', () => {
      const { pairing } = store.state;
      if (!pairing) return;
      question.textContent = `Forget ${pairings.label(pairing)}? This browser will need its pairing link again`
        + ' (on the laptop: voxa pair).';
      asking(true);
      keep.focus();
      ask.scrollIntoView({ block: 'nearest' });
    });
    keep.addEventListener('click', () => {
      asking(false);
      forget.focus();
    });
    part(root, 'forget-yes', HTMLButtonElement).addEventListener('click', () => {
      asking(false);
      app.forgetCurrent();
    });
    part(root, 'add-laptop', HTMLButtonElement).addEventListener('click', () => app.showWelcome());
    store.watch(['pairing', 'tab'], () => asking(false));
    showWithTab(root, store, 'status');
    store.watch(['pairing', 'connection', 'hello', 'voice', 'env', 'environments', 'server'], (state) => {
      const { pairing, hello, voice, server } = state;
      const env = state.environments.find((e) => e.envKey === state.env);
      const shown = [
        ['Laptop', pairing ? pairings.label(pairing) : 'not paired'],
        ['Connection', state.connection.text],
        ['Through', pairing ? (pairing.kind === 'relay' ? `relay ${location.host}` : 'this machine') : ''],
        ['Mode', hello ? hello.mode : ''],
        ['Voice', hello ? (voice && 'host' in voice && VOICE_HOSTS[voice.host]) || 'none' : ''],
        ['Agent', hello ? hello.agent : ''],
        ['Environment', state.env ? (env ? env.name : state.env.slice(0, 12)) : 'this laptop'],
        ['Web client', server.version ? `voxa ${server.version}` : ''],
      ].filter(([, value]) => typeof value === 'string' && value);
      facts.replaceChildren(...shown.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', { text: value })]));
      const offered = hello && Array.isArray(hello.tools) ? hello.tools.filter((t) => typeof t === 'string') : [];
      tools.replaceChildren(...offered.map((tool) => el('li', { text: tool })));
      forget.hidden = !pairing;
    });
  }
}
