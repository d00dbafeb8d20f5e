// Boot: read a pairing from the address (then scrub it), connect to the current laptop, and wire
// the tabs, the laptop and environment pickers, and the status panel.

import { byId, el, sentence, show } from './dom.js';
import * as pairings from './pairings.js';
import { Session } from './session.js';
import { Terminal } from './terminal.js';
import { Files } from './files.js';
import { Screenshot } from './screenshot.js';
import { Coder } from './coder.js';
import { Voice } from './voice.js';

const FLEET = 'fleet';
/** How long the page waits for the relay's `/config` before connecting without it. */
const CONFIG_TIMEOUT_MS = 5000;
/** Who hosts a call, as the status panel says it. */
const VOICE_HOSTS = { laptop: 'hosted by the laptop', relay: 'hosted by the relay' };

class App {
  constructor() {
    this.session = null;
    this.pairing = null;
    this.env = '';
    this.config = {};
    this.terminal = new Terminal(this);
    this.files = new Files(this);
    this.screenshot = new Screenshot(this);
    this.coder = new Coder(this);
    this.voice = new Voice(this);
    this.filesLoaded = false;
    this.wireTabs();
    byId('pair-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.pairFromText(byId('pair-link').value);
    });
    byId('laptop').addEventListener('change', (event) => this.switchTo(event.target.value));
    byId('env').addEventListener('change', (event) => this.chooseEnv(event.target.value));
    byId('forget').addEventListener('click', () => this.forgetCurrent());
    byId('add-laptop').addEventListener('click', () => this.showWelcome());
    byId('reconnect').addEventListener('click', () => this.session && this.session.reconnectNow());
    this.refreshControls();
  }

  async boot() {
    // A pairing link opened in a tab already on this page changes only the fragment: no reload.
    window.addEventListener('hashchange', () => this.pairFromAddress());
    const carried = pairings.fromUrl(new URL(location.href));
    // The token leaves the address bar before anything else happens.
    pairings.scrubAddressBar();
    if (carried instanceof Error) {
      this.showWelcome(carried.message);
    } else if (carried) {
      pairings.remember(carried);
    }
    // What the relay offers decides the socket (`/live` when it hosts voice), so it comes first.
    await this.loadConfig();
    const pairing = pairings.current();
    if (pairing) this.use(pairing);
    else if (!(carried instanceof Error)) this.showWelcome();
  }

  /** The pairing a fragment navigation brought, used at once. */
  pairFromAddress() {
    const carried = pairings.fromUrl(new URL(location.href));
    pairings.scrubAddressBar();
    if (carried instanceof Error) this.showWelcome(carried.message);
    else if (carried) this.use(pairings.remember(carried));
  }

  async loadConfig() {
    try {
      // A relay that never answers must not keep the page from connecting.
      const response = await fetch('/config', {
        cache: 'no-store', credentials: 'omit', signal: AbortSignal.timeout(CONFIG_TIMEOUT_MS),
      });
      if (response.ok) this.config = await response.json();
    } catch {
      this.config = {};
    }
    this.renderStatus();
  }

  showWelcome(error) {
    byId('welcome').hidden = false;
    byId('workspace').hidden = true;
    show(byId('pair-error'), error);
    byId('pair-link').focus();
  }

  pairFromText(text) {
    let url;
    try {
      url = new URL(text.trim());
    } catch {
      show(byId('pair-error'), 'That is not a link. Paste the whole link voxa pair printed.');
      return;
    }
    const pairing = pairings.fromUrl(url);
    if (!pairing || pairing instanceof Error) {
      show(byId('pair-error'), pairing ? pairing.message : 'That link holds no pairing.');
      return;
    }
    if (url.host !== location.host) {
      show(byId('pair-error'), `That link is for the relay at ${url.host}; open it there.`);
      return;
    }
    byId('pair-link').value = '';
    this.use(pairings.remember(pairing));
  }

  /** Connects to a pairing, leaving the previous laptop. */
  use(pairing) {
    if (this.session) this.session.stop();
    this.pairing = pairing;
    pairings.select(pairing.id);
    this.env = '';
    this.filesLoaded = false;
    for (const part of [this.terminal, this.files, this.screenshot, this.coder, this.voice]) part.reset();
    byId('welcome').hidden = true;
    byId('workspace').hidden = false;
    byId('env-pick').hidden = true;
    this.renderLaptops();
    this.renderStatus();
    const session = new Session(pairing, { live: this.config.live === true });
    this.session = session;
    session.addEventListener('state', (event) => this.onState(event.detail));
    session.addEventListener('hello', (event) => this.onHello(event.detail));
    session.addEventListener('route', (event) => pairings.setMode(pairing.id, event.detail.mode));
    session.addEventListener('error', (event) => show(byId('notice'), sentence(event.detail)));
    // Calls speak on the session socket: to a self-hosted laptop, or to the relay at `/live`.
    this.voice.attach(session, null);
    session.start();
  }

  switchTo(id) {
    const pairing = pairings.all().find((p) => p.id === id);
    if (pairing && (!this.pairing || pairing.id !== this.pairing.id)) this.use(pairing);
  }

  forgetCurrent() {
    if (!this.pairing) return;
    if (this.session) this.session.stop();
    this.session = null;
    this.voice.reset();
    this.voice.attach(null, null);
    pairings.forget(this.pairing.id);
    this.pairing = null;
    const next = pairings.current();
    if (next) this.use(next);
    else {
      this.renderLaptops();
      this.onState({ state: 'idle', text: 'not paired' });
      this.showWelcome();
    }
  }

  onState({ state, text }) {
    const box = byId('connection');
    box.dataset.state = state;
    byId('connection-text').textContent = text;
    byId('reconnect').hidden = !['replaced', 'reconnecting'].includes(state);
    if (state === 'online') show(byId('notice'));
    this.refreshControls();
    this.renderStatus();
  }

  /** Controls that start a call work only while the laptop is online and the panel is idle. */
  refreshControls() {
    const online = !!(this.session && this.session.online);
    byId('run').disabled = !online || !!this.terminal.running;
    byId('screenshot').disabled = !online || this.screenshot.busy;
    byId('ask').disabled = !online || !!this.coder.running;
    byId('files-refresh').disabled = !online;
    byId('file-save').disabled = !online || !(this.files.open && this.files.open.editable);
  }

  onHello(hello) {
    const name = typeof hello.host === 'string' && hello.host ? hello.host
      : typeof hello.name === 'string' && hello.name ? hello.name : '';
    if (name) {
      pairings.rename(this.pairing.id, name);
      this.pairing = { ...this.pairing, name };
      this.renderLaptops();
    }
    this.renderStatus();
    this.voice.setOffer(this.voiceOffer(hello));
    if (Array.isArray(hello.tools) && hello.tools.includes(FLEET)) this.loadEnvironments();
    if (!this.filesLoaded || !byId('panel-files').hidden) {
      this.filesLoaded = true;
      this.files.browse(this.files.dir);
    }
  }

  /** Who hosts this laptop's calls (`{host}`: `laptop` or `relay`), or why nobody does (`{reason}`). */
  voiceOffer(hello) {
    if (hello.mode === 'self-hosted') return { host: 'laptop' };
    if (this.session.route === 'live') return { host: 'relay' };
    if (this.pairing.kind !== 'relay') return { reason: 'no-voice-laptop' };
    return { reason: this.session.liveRefused || 'no-voice-relay' };
  }

  async loadEnvironments() {
    try {
      const { result } = await this.session.call(FLEET, { action: 'list', probe: false }).done;
      const environments = Array.isArray(result.environments) ? result.environments : [];
      const remote = environments.filter((e) => !e.self && typeof e.envKey === 'string');
      const select = byId('env');
      const options = [el('option', { value: '', text: 'This laptop' }), ...remote.map((e) =>
        el('option', { value: e.envKey, text: e.name || e.envKey.slice(0, 12) }))];
      select.replaceChildren(...options);
      select.value = remote.some((e) => e.envKey === this.env) ? this.env : '';
      byId('env-pick').hidden = remote.length === 0;
    } catch {
      byId('env-pick').hidden = true;
    }
  }

  chooseEnv(envKey) {
    this.env = envKey;
    this.files.reset();
    this.files.browse('.');
    this.renderStatus();
  }

  /** Runs a tool on the chosen environment (or this laptop). */
  call(name, args, options = {}) {
    if (!this.session) return { id: '', done: Promise.reject({ code: 'offline', message: 'not paired' }) };
    return this.session.call(name, args, { ...options, env: this.env || undefined });
  }

  /**
   * Runs a tool (as `call`) and shows a refusal as a sentence with its code: in `refusal`, an
   * element cleared first, or through `refusal(text, error)`. Returns `{id, done}`; `done`
   * resolves to `{result, image}`, or to `null` once the refusal is shown.
   */
  attempt(name, args, refusal, options = {}) {
    const say = typeof refusal === 'function' ? refusal : (text) => show(refusal, text);
    if (typeof refusal !== 'function') show(refusal);
    const call = this.call(name, args, options);
    const done = call.done.catch((error) => {
      say(sentence(error), error);
      return null;
    });
    return { id: call.id, done };
  }

  cancel(id) {
    if (this.session) this.session.cancel(id);
  }

  renderLaptops() {
    const list = pairings.all();
    const select = byId('laptop');
    const labels = list.map((p) => pairings.label(p));
    // Two laptops with one name are told apart by their codes.
    const shown = list.map((p, i) => (labels.indexOf(labels[i]) !== labels.lastIndexOf(labels[i]) && p.code
      ? `${labels[i]} · ${p.code.slice(0, 4)}` : labels[i]));
    select.replaceChildren(...list.map((p, i) => el('option', { value: p.id, text: shown[i] })));
    if (this.pairing) select.value = this.pairing.id;
    byId('laptop-pick').hidden = list.length < 2;
  }

  renderStatus() {
    const hello = this.session && this.session.online ? this.session.hello : null;
    const facts = [
      ['Laptop', this.pairing ? pairings.label(this.pairing) : 'not paired'],
      ['Connection', byId('connection-text').textContent],
      ['Through', this.pairing ? (this.pairing.kind === 'relay' ? `relay ${location.host}` : 'this machine') : ''],
      ['Mode', hello ? hello.mode : ''],
      ['Voice', hello ? VOICE_HOSTS[this.voiceOffer(hello).host] || 'none' : ''],
      ['Agent', hello ? hello.agent : ''],
      ['Environment', this.env ? byId('env').selectedOptions[0]?.textContent || this.env.slice(0, 12) : 'this laptop'],
      ['Web client', this.config.version ? `voxa ${this.config.version}` : ''],
    ].filter(([, value]) => value);
    byId('facts').replaceChildren(...facts.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', { text: value })]));
    const tools = hello && Array.isArray(hello.tools) ? hello.tools : [];
    byId('tools').replaceChildren(...tools.map((tool) => el('li', { text: tool })));
    byId('forget').hidden = !this.pairing;
  }

  wireTabs() {
    const tabs = [...document.querySelectorAll('.tabs button')];
    const select = (tab) => {
      for (const other of tabs) {
        const selected = other === tab;
        other.setAttribute('aria-pressed', String(selected));
        byId(other.getAttribute('aria-controls')).hidden = !selected;
      }
      if (tab.id === 'tab-files' && this.session && this.session.online) this.files.browse(this.files.dir);
      if (tab.id === 'tab-status') this.renderStatus();
    };
    for (const tab of tabs) tab.addEventListener('click', () => select(tab));
  }
}

new App().boot();
