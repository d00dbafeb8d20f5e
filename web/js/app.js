// @ts-check
// The app: which laptop the page talks to, its session, and the one way panels run tools. It
// writes the shared store (store.js); it never touches a panel's controls.

import { sentence } from './dom.js';
import * as pairings from './pairings.js';
import { Session } from './session.js';

/**
 * @typedef {import('./store.js').Store} Store
 * @typedef {import('./store.js').VoiceOffer} VoiceOffer
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {import('./session.js').CallOptions} CallOptions
 * @typedef {import('./session.js').CallOutcome} CallOutcome
 * @typedef {import('./dom.js').Failure} Failure
 */

const FLEET = 'fleet';
/** How long the page waits for the relay's `/config` before connecting without it. */
const CONFIG_TIMEOUT_MS = 5000;

export class App {
  /** @param {Store} store */
  constructor(store) {
    this.store = store;
  }

  /** Reads a pairing from the address (then scrubs it) and connects to the current laptop. */
  async boot() {
    const carried = this.fromAddress();
    pairings.clean();
    // A link opened on this very page changes only the fragment: the page is not loaded again.
    addEventListener('hashchange', () => {
      const opened = this.fromAddress();
      if (opened instanceof Error) this.showWelcome(opened.message);
      else if (opened) this.use(pairings.remember(opened));
    });
    if (carried instanceof Error) this.showWelcome(carried.message);
    else if (carried) pairings.remember(carried);
    // The socket opens at once, beside `/config`: what the relay offers (voice, whether it asks
    // for its token) is read when a call starts or a connection fails, never before connecting.
    const config = this.loadConfig();
    const pairing = pairings.current();
    if (pairing) this.use(pairing);
    else if (!(carried instanceof Error)) this.showWelcome();
    await config;
  }

  /**
   * The pairing the address carries, if any; the secrets leave the address bar at once.
   * @returns {Pairing | Error | null}
   */
  fromAddress() {
    const carried = pairings.fromUrl(new URL(location.href));
    pairings.scrubAddressBar();
    return carried;
  }

  async loadConfig() {
    let server = {};
    try {
      // A relay that never answers must not keep the page from connecting.
      const response = await fetch('/config', {
        cache: 'no-store', credentials: 'omit', signal: AbortSignal.timeout(CONFIG_TIMEOUT_MS),
      });
      if (response.ok) server = await response.json();
    } catch {
      server = {};
    }
    const offer = server && typeof server === 'object' ? server : {};
    this.store.set({ server: offer });
    const { session, hello } = this.store.state;
    if (!session) return;
    session.offered(offer);
    // A hello that came first was told of no relay-hosted voice: tell it again.
    if (hello) this.store.set({ voice: this.voiceOffer(session, hello) });
  }

  /** @param {string} [error] why the last link was not taken */
  showWelcome(error) {
    this.store.set({ view: 'welcome', pairError: error || '', pairings: pairings.all() });
  }

  /**
   * Pairs from a pasted link; says why when it cannot.
   * @param {string} text
   */
  pair(text) {
    let url;
    try {
      url = new URL(text.trim());
    } catch {
      this.store.set({ pairError: 'That is not a link. Paste the whole link voxa pair printed.' });
      return;
    }
    const pairing = pairings.fromUrl(url);
    if (!pairing || pairing instanceof Error) {
      this.store.set({ pairError: pairing ? pairing.message : 'That link holds no pairing.' });
      return;
    }
    if (url.host !== location.host) {
      this.store.set({ pairError: `That link is for the relay at ${url.host}; open it there.` });
      return;
    }
    this.use(pairings.remember(pairing));
  }

  /**
   * Connects to a pairing, leaving the previous laptop; calls go to `envKey` (one of the
   * environments the laptop listed last time) until the laptop's own list says otherwise.
   * @param {Pairing} pairing
   * @param {string} [envKey]
   */
  use(pairing, envKey = '') {
    const previous = this.store.state.session;
    if (previous) previous.stop();
    pairings.select(pairing.id);
    const session = new Session(pairing);
    session.offered(this.store.state.server);
    const environments = pairing.environments || [];
    this.store.set({
      view: 'workspace', pairError: '', pairing, pairings: pairings.all(), session, online: false, hello: null,
      voice: null, environments, env: environments.some((e) => e.envKey === envKey) ? envKey : '', notice: '',
    });
    session.addEventListener('state', (event) => this.onState(session, /** @type {CustomEvent} */ (event).detail));
    session.addEventListener('hello', (event) => this.onHello(session, /** @type {CustomEvent} */ (event).detail));
    session.addEventListener('error', (event) => {
      if (this.store.state.session === session) this.store.set({ notice: sentence(/** @type {CustomEvent} */ (event).detail) });
    });
    session.start();
  }

  /**
   * Switches to a known laptop, and to one of its environments (`''`: the laptop itself).
   * @param {string} id
   * @param {string} [envKey]
   */
  switchTo(id, envKey = '') {
    const pairing = pairings.all().find((p) => p.id === id);
    const { pairing: now } = this.store.state;
    if (!pairing) return;
    if (now && pairing.id === now.id) {
      // Chosen from the welcome view ("Add a laptop"), the laptop in use comes back as it was.
      this.store.set({ view: 'workspace', pairError: '' });
      this.chooseEnv(envKey);
    } else {
      this.use(pairing, envKey);
    }
  }

  /**
   * Gives a laptop the name the user chose (`''`: its host name again), in this browser.
   * @param {string} id
   * @param {string} alias
   */
  rename(id, alias) {
    pairings.update(id, { alias: pairings.cleanAlias(alias) });
    const list = pairings.all();
    const { pairing } = this.store.state;
    const renamed = pairing && list.find((p) => p.id === pairing.id);
    this.store.set({ pairings: list, ...(renamed ? { pairing: renamed } : {}) });
  }

  /**
   * Forgets a laptop; forgetting the one in use moves to the next (or to pairing again).
   * @param {string} id
   */
  forget(id) {
    const { pairing, session } = this.store.state;
    if (!pairing || pairing.id !== id) {
      pairings.forget(id);
      this.store.set({ pairings: pairings.all() });
      return;
    }
    if (session) session.stop();
    pairings.forget(pairing.id);
    const next = pairings.current();
    if (next) {
      this.use(next);
      return;
    }
    this.store.set({
      session: null, pairing: null, pairings: [], online: false, hello: null, voice: null, environments: [], env: '',
      connection: { state: 'idle', text: 'not paired' },
    });
    this.showWelcome();
  }

  /**
   * @param {Session} session
   * @param {{state: import('./session.js').ConnectionState, text: string, sealed: boolean}} detail
   */
  onState(session, { state, text, sealed }) {
    if (this.store.state.session !== session) return;
    const online = state === 'online';
    this.store.set({
      connection: { state, text, sealed }, online, ...(online ? { notice: '' } : { hello: null }),
    });
  }

  /**
   * @param {Session} session
   * @param {Record<string, any>} hello
   */
  onHello(session, hello) {
    const { pairing } = this.store.state;
    if (this.store.state.session !== session || !pairing) return;
    const name = typeof hello.host === 'string' && hello.host ? hello.host
      : typeof hello.name === 'string' && hello.name ? hello.name : '';
    const named = name && name !== pairing.name ? { ...pairing, name } : pairing;
    if (named !== pairing) pairings.update(pairing.id, { name });
    this.store.set({ pairing: named, pairings: pairings.all(), hello, voice: this.voiceOffer(session, hello) });
    if (Array.isArray(hello.tools) && hello.tools.includes(FLEET)) this.loadEnvironments(session);
    else this.keepEnvironments(session, []);
  }

  /**
   * Who hosts this laptop's calls, or why nobody does.
   * @param {Session} session
   * @param {Record<string, any>} hello
   * @returns {VoiceOffer}
   */
  voiceOffer(session, hello) {
    if (hello.mode === 'self-hosted') return { host: 'laptop' };
    if (session.pairing.kind !== 'relay') return { reason: 'no-voice-laptop' };
    if (session.liveRefused) return { reason: session.liveRefused };
    // The relay hosts the call on a socket of its own (voice/socket.js); this session stays sealed.
    return this.store.state.server.live === true ? { host: 'relay' } : { reason: 'no-voice-relay' };
  }

  /** @param {Session} session */
  async loadEnvironments(session) {
    /** @type {import('./store.js').Environment[]} */
    let environments = [];
    try {
      const { result } = await session.call(FLEET, { action: 'list', probe: false }).done;
      const listed = Array.isArray(result.environments) ? result.environments : [];
      environments = listed.filter((/** @type {any} */ e) => e && !e.self && typeof e.envKey === 'string')
        .map((/** @type {any} */ e) => ({ envKey: e.envKey, name: typeof e.name === 'string' && e.name ? e.name : e.envKey.slice(0, 12) }));
    } catch {
      environments = [];
    }
    this.keepEnvironments(session, environments);
  }

  /**
   * Shows the laptop's environments and remembers them with its pairing (the picker lists them
   * while another laptop is in use).
   * @param {Session} session
   * @param {import('./store.js').Environment[]} listed
   */
  keepEnvironments(session, listed) {
    const { pairing, env } = this.store.state;
    if (this.store.state.session !== session || !pairing) return;
    const environments = pairings.cleanEnvironments(listed);
    pairings.update(pairing.id, { environments });
    const stored = pairings.all().find((p) => p.id === pairing.id);
    const updated = stored && JSON.stringify(stored) !== JSON.stringify(pairing) ? stored : pairing;
    this.store.set({
      pairing: updated, pairings: pairings.all(), environments,
      env: environments.some((e) => e.envKey === env) ? env : '',
    });
  }

  /**
   * Sends the next calls to an environment (`''`: the laptop itself).
   * @param {string} envKey
   */
  chooseEnv(envKey) {
    this.store.set({ env: envKey });
  }

  reconnect() {
    const { session } = this.store.state;
    if (session) session.reconnectNow();
  }

  /**
   * Runs a tool on the chosen environment (or this laptop).
   * @param {string} name
   * @param {Record<string, unknown>} args
   * @param {CallOptions} [options]
   * @returns {import('./session.js').RunningCall}
   */
  call(name, args, options = {}) {
    const { session, env } = this.store.state;
    if (!session) return { id: '', done: Promise.reject({ code: 'offline', message: 'not paired' }) };
    return session.call(name, args, { ...options, env: env || undefined });
  }

  /**
   * Runs a tool (as `call`) and hands a refusal to `refused` as a sentence with its code.
   * Returns `{id, done}`; `done` resolves to `{result, image}`, or to `null` once the refusal is
   * handed over.
   * @param {string} name
   * @param {Record<string, unknown>} args
   * @param {(text: string, error: Failure) => void} refused
   * @param {CallOptions} [options]
   * @returns {{id: string, done: Promise<CallOutcome | null>}}
   */
  attempt(name, args, refused, options = {}) {
    const call = this.call(name, args, options);
    const done = call.done.catch((/** @type {Failure} */ error) => {
      refused(sentence(error), error);
      return null;
    });
    return { id: call.id, done };
  }

  /** @param {string} id */
  cancel(id) {
    const { session } = this.store.state;
    if (session) session.cancel(id);
  }
}
