// @ts-check
// The page's shared state in one place: the laptops paired in this browser, the one in use and
// its connection, what its hello said, who hosts voice, the environments calls can go to, the tab
// shown. Panels read it and watch the keys they show; the app (app.js) writes it, and a panel
// writes only the choices it owns (the tab, the environment, the low-data switch). main.js says how a panel is added.

/**
 * @typedef {import('./pairings.js').Pairing} Pairing
 * @typedef {import('./session.js').Session} Session
 * @typedef {import('./session.js').ConnectionState} ConnectionState
 */

/**
 * Who hosts this laptop's calls (`host`), or why nobody does (`reason`, a code voice/sentences.js
 * turns into a sentence).
 * @typedef {{host: 'laptop' | 'relay'} | {reason: string}} VoiceOffer
 */

/** @typedef {{envKey: string, name: string}} Environment */

/**
 * A laptop a link pairs with that this browser does not know, while the page asks "Add this
 * laptop?" (page/new-laptop.js): the pairing, the name its hello gave (`''` until it proved the pairing),
 * how its held session stands, and the label it would have without a name.
 * @typedef {{pairing: Pairing, name: string, state: string, text: string, label: string}} Asking
 */

/**
 * What the laptop found comparing the page the relay serves with its own (docs/SECURITY.md, "The
 * page the relay serves"): `altered` names the files that differ.
 * @typedef {{state: 'same' | 'altered' | 'unchecked', paths?: string[]}} RelayPageFinding
 */

/** What the server that served the page offers (`GET /config`). @typedef {{version?: string, live?: boolean, relay_token?: boolean, certificate_sha256?: string}} ServerOffer */

/**
 * @typedef {object} State
 * @property {'starting' | 'welcome' | 'workspace'} view what fills the page
 * @property {string} pairError why the last pairing link was not taken ('' when it was)
 * @property {Pairing[]} pairings every laptop paired in this browser, the current one first
 * @property {Pairing | null} pairing the laptop in use
 * @property {Session | null} session its connection; a new one each time a laptop is chosen
 * @property {{state: ConnectionState, text: string, sealed?: boolean, relay?: string}} connection how the
 *   connection stands, in words, whether the session is sealed end to end, and the relay it goes through
 * @property {boolean} online the hello succeeded and calls can be made
 * @property {Record<string, any> | null} hello the laptop's `hello_ok` while online
 * @property {VoiceOffer | null} voice who hosts calls, once the laptop answered
 * @property {Environment[]} environments other machines this laptop routes calls to
 * @property {string} env the environment calls go to (`''`: the laptop itself)
 * @property {string} tab the tool panel shown (`commands`, `shell`, `files`, `screen`, `agent`, `status`)
 * @property {string} agentSession the coding-agent session the agent view has open ('' for its list)
 * @property {string} shellTerm the terminal the Shell tab shows ('' before it has one)
 * @property {string} filesPath the folder the Files tab shows ('' or '.' for the workspace)
 * @property {boolean} approvalsOpen the approvals view (`#/approvals`) is open: waiting approvals and grants
 * @property {string} notice an error the laptop reported outside any call ('' for none)
 * @property {ServerOffer} server what `/config` said
 * @property {Asking | null} asking a laptop a link pairs with, while the page asks before adding it
 * @property {RelayPageFinding | null} relayPage the laptop's word on the relay's page, this session
 * @property {boolean} lowData the low-data switch of the laptop in use (Status): streamed text comes merged
 */

/** @typedef {keyof State} Key */

/**
 * A machine as the page names it: an environment's name, else the start of its key.
 * @param {Environment[]} environments the laptop's environments
 * @param {string} env an envKey (`''`: the laptop itself)
 */
export function machineName(environments, env) {
  if (!env) return 'this laptop';
  const known = environments.find((e) => e.envKey === env);
  return known ? known.name : `machine ${env.slice(0, 12)}`;
}

/** @returns {State} */
export function initialState() {
  return {
    view: 'starting',
    pairError: '',
    pairings: [],
    pairing: null,
    session: null,
    connection: { state: 'idle', text: 'starting…' },
    online: false,
    hello: null,
    voice: null,
    environments: [],
    env: '',
    tab: 'commands',
    agentSession: '',
    shellTerm: '',
    filesPath: '',
    approvalsOpen: false,
    notice: '',
    server: {},
    asking: null,
    relayPage: null,
    lowData: false,
  };
}

/**
 * Shared state with change notification: `set` replaces the keys it is given (a key whose value
 * is the same object, or an equal primitive, does not count as changed) and then calls every
 * watcher of a changed key once, with the new state.
 */
export class Store {
  /** @param {State} [initial] */
  constructor(initial = initialState()) {
    /** @type {Readonly<State>} */
    this.state = Object.freeze({ ...initial });
    /** @type {Set<{keys: ReadonlyArray<Key>, fn: (state: Readonly<State>) => void}>} */
    this.watchers = new Set();
  }

  /** @param {Partial<State>} patch */
  set(patch) {
    const before = this.state;
    const changed = /** @type {Key[]} */ (Object.keys(patch)).filter((key) => !Object.is(before[key], patch[key]));
    if (changed.length === 0) return;
    this.state = Object.freeze({ ...before, ...patch });
    for (const watcher of [...this.watchers]) {
      // A watcher that writes the store has its own change delivered first; this one sees the newest state.
      if (this.watchers.has(watcher) && watcher.keys.some((key) => changed.includes(key))) watcher.fn(this.state);
    }
  }

  /**
   * Calls `fn` with the state now and after every change of one of `keys`; returns a function
   * that stops it.
   * @param {ReadonlyArray<Key>} keys
   * @param {(state: Readonly<State>) => void} fn
   * @returns {() => void}
   */
  watch(keys, fn) {
    const watcher = { keys, fn };
    this.watchers.add(watcher);
    fn(this.state);
    return () => this.watchers.delete(watcher);
  }
}
