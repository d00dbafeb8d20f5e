// @ts-check
// The app: which laptop the page talks to, its session, and the one way panels run tools. It
// writes the shared store (store.js); it never touches a panel's controls.
//
// A link to a laptop this browser does not know is asked about before anything is sent to that
// laptop (`ask`): a held session runs the sealed handshake to learn its name, the page asks "Add
// this laptop?" (page/new-laptop.js), and only "Add" makes it a pairing of this browser and the one in
// use. Until then the laptop in use stays as it was. A link's ticket (docs/SECURITY.md, "A link
// whose secret works once") is traded for the token in that held session; "Add" stores the
// pairing with the token the laptop handed.

import { sentence } from './dom.js';
import * as pairings from './pairings.js';
import { Session } from './session.js';
import { dropEarly } from './session/transport.js';

/**
 * @typedef {import('./store.js').Store} Store
 * @typedef {import('./store.js').VoiceOffer} VoiceOffer
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {import('./session/calls.js').CallOptions} CallOptions
 * @typedef {import('./session/calls.js').CallOutcome} CallOutcome
 * @typedef {import('./dom.js').Failure} Failure
 */

/** What every panel is handed beside its root element (main.js). @typedef {{store: Store, app: App}} Context */

const FLEET = 'fleet';
/** How long the page waits for the relay's `/config` before connecting without it. */
const CONFIG_TIMEOUT_MS = 5000;

export class App {
  /** @param {Store} store */
  constructor(store) {
    this.store = store;
    /** The held session of the laptop asked about, if any. @type {Session | null} */
    this.asking = null;
  }

  /** Reads the pairing the page was opened with and connects to the laptop in use. */
  async boot() {
    // address.js took the link's secrets out of the address before the page was drawn; what the
    // panels read from it (a notification's `session=`) goes now.
    const carried = pairings.fromUrl(new URL(pairings.openedAt()));
    pairings.scrubAddressBar();
    pairings.clean();
    // A link opened on this very page changes only the fragment: the page is not loaded again.
    addEventListener('hashchange', () => {
      const opened = pairings.fromUrl(new URL(location.href));
      pairings.scrubAddressBar();
      if (opened instanceof Error) this.showWelcome(opened.message);
      else if (opened) this.open(opened);
    });
    // The socket opens at once, beside `/config`: what the relay offers (voice, whether it asks
    // for its token) is read when a call starts or a connection fails, never before connecting.
    const config = this.loadConfig();
    const opened = carried instanceof Error ? null : carried;
    if (opened && this.knows(opened)) {
      this.use(pairings.remember(opened));
    } else {
      const pairing = pairings.current();
      if (pairing) this.use(pairing);
      else this.showWelcome(carried instanceof Error ? carried.message : '');
      if (opened) this.ask(opened);
    }
    // A session started above took the link's early socket if it would open the same.
    dropEarly();
    await config;
  }

  /**
   * Whether a link names a laptop this browser already uses, with the same token (a ticket's
   * link: the same code, whose stored token is used and the ticket left unspent to expire): only
   * then is it used without a question. The loopback page's own link is this machine's.
   * @param {Pairing} pairing
   */
  knows(pairing) {
    return pairing.kind === 'loopback'
      || pairings.all().some((p) => p.id === pairing.id && (pairing.ticket ? Boolean(p.token) : p.token === pairing.token));
  }

  /**
   * Opens a pairing from a link: a known laptop at once, any other after the question.
   * @param {Pairing} pairing
   */
  open(pairing) {
    if (this.knows(pairing)) this.use(pairings.remember(pairing));
    else this.ask(pairing);
  }

  /**
   * Asks before pairing with a laptop this browser does not know: a held session proves the
   * laptop and learns its name, and sends it nothing more until the user says "Add".
   * @param {Pairing} pairing
   */
  ask(pairing) {
    this.dismiss();
    const session = new Session(pairing, { held: true });
    session.offered(this.store.state.server);
    this.asking = session;
    const label = pairings.label(pairing);
    this.store.set({ asking: { pairing, name: '', state: 'connecting', text: 'connecting…', label } });
    session.addEventListener('state', (event) => {
      const { asking } = this.store.state;
      const { state, text } = /** @type {CustomEvent} */ (event).detail;
      if (this.asking === session && asking) this.store.set({ asking: { ...asking, state, text } });
    });
    session.addEventListener('introduced', (event) => {
      const { asking } = this.store.state;
      const name = hostName(/** @type {CustomEvent} */ (event).detail);
      if (this.asking === session && asking) this.store.set({ asking: { ...asking, name, state: 'introduced' } });
    });
    session.start();
  }

  /** "Add": the laptop asked about becomes a pairing of this browser and the one in use. */
  add() {
    const session = this.asking;
    const { asking } = this.store.state;
    if (!session || !asking) return;
    this.asking = null;
    this.store.set({ asking: null });
    // The session's pairing: with the token the laptop handed when a ticket opened it.
    const proved = session.pairing;
    const pairing = pairings.remember(asking.name ? { ...proved, name: asking.name } : proved);
    this.use(pairing, '', session);
    session.admit();
  }

  /** "Not now": the laptop asked about is left, and nothing was sent to it. */
  dismiss() {
    if (this.asking) this.asking.stop();
    this.asking = null;
    if (this.store.state.asking) this.store.set({ asking: null });
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
    this.store.set({ pairError: '' });
    this.open(pairing);
  }

  /**
   * Connects to a pairing, leaving the previous laptop; calls go to `envKey` (one of the
   * environments the laptop listed last time) until the laptop's own list says otherwise.
   * @param {Pairing} pairing
   * @param {string} [envKey]
   * @param {Session} [held] the session of a laptop just added, already proved
   */
  use(pairing, envKey = '', held) {
    const previous = this.store.state.session;
    if (previous) previous.stop();
    pairings.select(pairing.id);
    const session = held || new Session(pairing);
    session.offered(this.store.state.server);
    const environments = pairing.environments || [];
    this.store.set({
      view: 'workspace', pairError: '', pairing, pairings: pairings.all(), session, online: false, hello: null,
      voice: null, environments, env: environments.some((e) => e.envKey === envKey) ? envKey : '', notice: '',
      relayPage: null,
    });
    session.addEventListener('relay_page', (event) => {
      const finding = relayPageFinding(/** @type {CustomEvent} */ (event).detail);
      if (this.store.state.session === session && finding) this.store.set({ relayPage: finding });
    });
    session.addEventListener('paired', (event) => {
      // The loopback page's ticket, traded for the token: kept in memory, as any loopback pairing.
      const paired = pairings.remember(/** @type {CustomEvent} */ (event).detail);
      if (this.store.state.session === session) this.store.set({ pairing: paired, pairings: pairings.all() });
    });
    session.addEventListener('state', (event) => this.onState(session, /** @type {CustomEvent} */ (event).detail));
    session.addEventListener('hello', (event) => this.onHello(session, /** @type {CustomEvent} */ (event).detail));
    session.addEventListener('error', (event) => {
      if (this.store.state.session === session) this.store.set({ notice: sentence(/** @type {CustomEvent} */ (event).detail) });
    });
    if (held) this.onState(session, { state: held.state, text: held.text, sealed: held.sealed, relay: held.relays.host });
    else session.start();
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
   * @param {{state: import('./session.js').ConnectionState, text: string, sealed: boolean, relay: string}} detail
   */
  onState(session, { state, text, sealed, relay }) {
    if (this.store.state.session !== session) return;
    const online = state === 'online';
    this.store.set({
      connection: { state, text, sealed, relay }, online, ...(online ? { notice: '' } : { hello: null }),
    });
  }

  /**
   * @param {Session} session
   * @param {Record<string, any>} hello
   */
  onHello(session, hello) {
    const { pairing } = this.store.state;
    if (this.store.state.session !== session || !pairing) return;
    const name = hostName(hello);
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
   * @returns {import('./session/calls.js').RunningCall}
   */
  call(name, args, options = {}) {
    const { session, env } = this.store.state;
    if (!session) return { id: '', done: Promise.reject({ code: 'offline', message: 'not paired' }) };
    // A call about something of another machine names it (`''`: this laptop), whatever the picker shows.
    const target = options.env !== undefined ? options.env : env;
    return session.call(name, args, { ...options, env: target || undefined });
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

/**
 * The name a laptop gives itself in its hello: its host name, else its name; `''` for none.
 * @param {Record<string, any>} hello
 */
function hostName(hello) {
  if (typeof hello.host === 'string' && hello.host) return hello.host.slice(0, 80);
  return typeof hello.name === 'string' && hello.name ? hello.name.slice(0, 80) : '';
}

/** Most files of an altered page the banner names. */
const MAX_ALTERED_SHOWN = 8;

/**
 * The laptop's `relay_page` frame as the banner reads it; `null` for one that does not read.
 * @param {Record<string, any>} frame
 * @returns {import('./store.js').RelayPageFinding | null}
 */
function relayPageFinding(frame) {
  if (frame.state === 'same' || frame.state === 'unchecked') return { state: frame.state };
  if (frame.state !== 'altered') return null;
  const paths = Array.isArray(frame.paths) ? frame.paths.filter((p) => typeof p === 'string') : [];
  return { state: 'altered', paths: paths.slice(0, MAX_ALTERED_SHOWN).map((p) => p.slice(0, 200)) };
}
