// @ts-check
// Pairings known to this browser: one per laptop reached through a relay (its code), and this
// machine's loopback page. A relay pairing is kept in localStorage, which belongs to the relay's
// origin; the loopback pairing lives in memory only, because the loopback port changes between
// runs and another user of the machine may listen on an old one (`voxa open` hands out a fresh
// link each time). The token never goes into a URL the page requests.
//
// A link `voxa pair` or `voxa open` prints carries a one-time ticket instead of the token
// (docs/SECURITY.md, "A link whose secret works once"): its pairing has a `ticket` and no token
// until the laptop hands the token inside the sealed session the ticket opened (session.js), and
// it is stored only then, without the ticket.

import { isRoute } from './route.js';

const KEY = 'voxa.pairings';
const HEX32 = /^[0-9a-f]{32}$/;
/** Longest name a user may give a laptop, in characters. */
export const ALIAS_MAX = 40;
/** Most environments remembered per laptop (the picker lists them all). */
const ENVIRONMENTS_MAX = 32;
/** Most relays a pairing names, the page's own included (`MAX_RELAYS`, src/config.rs). */
const RELAYS_MAX = 3;
/** Hosts a relay may be reached on without TLS, as the laptop allows them. */
const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/;

/**
 * @typedef {object} PairingBase
 * @property {string} id `relay:<code>` or `loopback`
 * @property {string} token the auth token: 32 lowercase hex characters (`''` while a ticket waits for it)
 * @property {string} [ticket] the link's one-time pairing ticket, until the laptop handed the token for it
 * @property {string} [name] the laptop's host name, from its hello
 * @property {string} [alias] the name the user gave the laptop in this browser, shown instead of `name`
 * @property {{envKey: string, name: string}[]} [environments] the environments the laptop listed when
 *   last online, so the machine picker shows them before it is chosen again
 * @property {string} [mode] the laptop's mode from its last hello (`hosted`, `self-hosted`)
 * @property {string} [relayToken] the token a private relay asks for (`relay_token` in the link's fragment)
 * @property {string[]} [relays] the pairing's other relays (`relay=` in the link's fragment), tried in
 *   turn when the page's own fails: base URLs (scheme, host, port and path)
 */
/** @typedef {PairingBase & {kind: 'relay', code: string}} RelayPairing */
/** @typedef {PairingBase & {kind: 'loopback'}} LoopbackPairing */
/** @typedef {RelayPairing | LoopbackPairing} Pairing */

/** @typedef {{list: RelayPairing[], current: string | undefined}} Stored */

/** This page's loopback pairing, never written anywhere. @type {LoopbackPairing | null} */
let loopback = null;
/** Whether the loopback pairing, when there is one, is the one in use. */
let loopbackCurrent = false;

/**
 * @param {unknown} pairing
 * @returns {pairing is RelayPairing}
 */
function valid(pairing) {
  if (!pairing || typeof pairing !== 'object') return false;
  const p = /** @type {Record<string, unknown>} */ (pairing);
  return p.kind === 'relay' && typeof p.token === 'string' && HEX32.test(p.token)
    && typeof p.code === 'string' && HEX32.test(p.code) && p.id === `relay:${p.code}`;
}

/**
 * A stored pairing with its optional parts kept only when well formed (what storage holds is
 * read back as untrusted: an older page, or a hand edit, may have written anything).
 * @param {RelayPairing} pairing
 * @returns {RelayPairing}
 */
function tidy(pairing) {
  const { alias, environments, relays, ...rest } = pairing;
  /** @type {RelayPairing} */
  const tidied = rest;
  const named = cleanAlias(alias);
  if (named) tidied.alias = named;
  const others = Array.isArray(relays) ? relayList(relays) : null;
  if (others && others.length) tidied.relays = others;
  const listed = cleanEnvironments(environments);
  if (listed.length) tidied.environments = listed;
  return tidied;
}

/**
 * A name typed by the user, trimmed and bounded; `''` for none.
 * @param {unknown} alias
 */
export function cleanAlias(alias) {
  if (typeof alias !== 'string') return '';
  return [...alias.replace(/\s+/g, ' ').trim()].slice(0, ALIAS_MAX).join('');
}

/**
 * Environments as the picker lists them: well-formed entries only, a bounded number.
 * @param {unknown} environments
 * @returns {{envKey: string, name: string}[]}
 */
export function cleanEnvironments(environments) {
  if (!Array.isArray(environments)) return [];
  return environments
    .filter((e) => e && typeof e === 'object' && typeof e.envKey === 'string' && e.envKey && typeof e.name === 'string')
    .slice(0, ENVIRONMENTS_MAX)
    .map((e) => ({ envKey: e.envKey.slice(0, 128), name: e.name.slice(0, 80) || e.envKey.slice(0, 12) }));
}

/**
 * A pairing's other relays as the page keeps them, as the laptop validates them: https (plain http
 * only on loopback), no user, query or fragment, at most `RELAYS_MAX - 1`, each once and
 * never `own` (the relay of the link). `null` when one is malformed or there are too many.
 * @param {unknown[]} texts
 * @param {string} [own]
 * @returns {string[] | null}
 */
export function relayList(texts, own = '') {
  /** @type {string[]} */
  const relays = [];
  for (const text of texts) {
    let url;
    try {
      url = new URL(typeof text === 'string' && text.length <= 512 ? text : '');
    } catch {
      return null;
    }
    const plain = url.protocol === 'http:' && LOOPBACK.test(url.hostname);
    if ((url.protocol !== 'https:' && !plain) || url.username || url.password || url.search || url.hash) return null;
    const base = `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
    if (base !== own && !relays.includes(base)) relays.push(base);
  }
  return relays.length < RELAYS_MAX ? relays : null;
}

/** @returns {Stored} */
function read() {
  try {
    const stored = JSON.parse(localStorage.getItem(KEY) || '{}');
    const list = Array.isArray(stored.list) ? stored.list.filter(valid).map(tidy) : [];
    return { list, current: typeof stored.current === 'string' ? stored.current : undefined };
  } catch {
    return { list: [], current: undefined };
  }
}

/** @param {Stored} state */
function write(state) {
  localStorage.setItem(KEY, JSON.stringify(state));
}

/**
 * Removes what older pages stored and this one never keeps: a loopback pairing (with its token),
 * and anything that is not a well-formed relay pairing. Runs once when the page loads.
 */
export function clean() {
  const raw = localStorage.getItem(KEY);
  if (raw === null) return;
  const state = read();
  const current = state.list.some((p) => p.id === state.current) ? state.current : undefined;
  const cleaned = JSON.stringify({ list: state.list, current });
  if (cleaned !== raw) write({ list: state.list, current });
}

/**
 * Every known pairing, the current one first.
 * @returns {Pairing[]}
 */
export function all() {
  const stored = read().list;
  if (!loopback) return stored;
  return loopbackCurrent ? [loopback, ...stored] : [...stored, loopback];
}

/**
 * The pairing in use, if any.
 * @returns {Pairing | null}
 */
export function current() {
  if (loopback && loopbackCurrent) return loopback;
  const state = read();
  return state.list.find((p) => p.id === state.current) || state.list[0] || loopback;
}

/**
 * Remembers a pairing (replacing one with the same id) and makes it current.
 * @param {Pairing} pairing
 * @returns {Pairing}
 */
export function remember(pairing) {
  if (pairing.kind === 'loopback') {
    loopback = { ...pairing, name: pairing.name || (loopback && loopback.name) || undefined,
      alias: pairing.alias || (loopback && loopback.alias) || undefined };
    loopbackCurrent = true;
    return loopback;
  }
  const state = read();
  const existing = state.list.find((p) => p.id === pairing.id);
  // A ticket is never stored; a pairing is stored only with its token.
  const { ticket, ...given } = pairing;
  const token = given.token || (existing && existing.token) || '';
  const merged = { ...existing, ...given, token, name: pairing.name || (existing && existing.name) };
  if (!HEX32.test(token)) return ticket ? { ...merged, ticket } : merged;
  state.list = [merged, ...state.list.filter((p) => p.id !== pairing.id)];
  state.current = pairing.id;
  write(state);
  loopbackCurrent = false;
  return merged;
}

/**
 * Makes a known pairing current.
 * @param {string} id
 */
export function select(id) {
  if (loopback && id === loopback.id) {
    loopbackCurrent = true;
    return;
  }
  const state = read();
  if (state.list.some((p) => p.id === id)) {
    state.current = id;
    write(state);
    loopbackCurrent = false;
  }
}

/**
 * Changes one known pairing (its host name, the name the user gave it, its mode, its environments).
 * An empty `alias` removes the user's name: the host name shows again.
 * @param {string} id
 * @param {{name?: string, alias?: string, mode?: string, environments?: {envKey: string, name: string}[]}} change
 */
export function update(id, change) {
  if (loopback && id === loopback.id) {
    const { alias, environments, ...rest } = { ...loopback, ...change };
    loopback = { ...rest, ...(cleanAlias(alias) ? { alias: cleanAlias(alias) } : {}),
      ...(environments ? { environments: cleanEnvironments(environments) } : {}) };
    return;
  }
  const state = read();
  const index = state.list.findIndex((p) => p.id === id);
  if (index < 0) return;
  const updated = tidy({ ...state.list[index], ...change });
  if (JSON.stringify(updated) === JSON.stringify(state.list[index])) return;
  state.list[index] = updated;
  write(state);
}

/**
 * Forgets one pairing; the next one (if any) becomes current.
 * @param {string} id
 */
export function forget(id) {
  if (loopback && id === loopback.id) {
    loopback = null;
    loopbackCurrent = false;
    return;
  }
  const state = read();
  state.list = state.list.filter((p) => p.id !== id);
  if (state.current === id) state.current = state.list[0] && state.list[0].id;
  write(state);
}

/**
 * A label for pickers: the name the user gave the laptop, else its host name, else a short form
 * of its code.
 * @param {Pairing} pairing
 */
export function label(pairing) {
  if (pairing.alias) return pairing.alias;
  if (pairing.name) return pairing.name;
  return pairing.kind === 'loopback' ? 'this machine' : `laptop ${pairing.code.slice(0, 6)}`;
}

/**
 * A pairing carried by a URL: `#code=…&ticket=…` (the relay's pairing link `voxa pair` prints),
 * `#code=…&token=…` (links of older versions; `?code=…&token=…` in older still, read from their QR
 * codes), or `#ticket=…` / `#token=…` (the loopback link `voxa open` prints, and its older form). A
 * ticket's pairing has no token yet. `null` when the URL carries none; an `Error` when it carries
 * one that is malformed.
 * @param {URL} url
 * @returns {Pairing | Error | null}
 */
export function fromUrl(url) {
  const fragment = new URLSearchParams(url.hash.replace(/^#/, ''));
  const query = url.searchParams;
  const carrier = fragment.has('code') ? fragment : query.has('code') || query.has('token') ? query : null;
  if (carrier) {
    const code = carrier.get('code') || '';
    const key = keyOf(carrier === fragment ? carrier : new URLSearchParams({ token: carrier.get('token') || '' }));
    if (!HEX32.test(code) || !key) return new Error('This pairing link is damaged: scan the code again.');
    // Only from the fragment, which no request carries; sent as a WebSocket subprotocol.
    const relayToken = carrier === fragment ? fragment.get('relay_token') : null;
    if (relayToken !== null && (relayToken.length === 0 || relayToken.length > 512)) {
      return new Error('This pairing link is damaged: scan the code again.');
    }
    // The pairing's other relays: the link's own comes first (the page is on it).
    const relays = carrier === fragment ? relayList(fragment.getAll('relay'), `${url.origin}${url.pathname.replace(/\/+$/, '')}`) : [];
    if (!relays) return new Error('This pairing link is damaged: scan the code again.');
    return { id: `relay:${code}`, kind: 'relay', code, ...key, ...(relayToken ? { relayToken } : {}),
      ...(relays.length ? { relays } : {}) };
  }
  if (fragment.has('ticket') || fragment.has('token')) {
    const key = keyOf(fragment);
    if (!key) return new Error('This link is damaged: run voxa open again.');
    return { id: 'loopback', kind: 'loopback', ...key };
  }
  return null;
}

/**
 * What opens the link's first session: its ticket (the token comes inside it), else its token.
 * `null` when neither is well formed.
 * @param {URLSearchParams} params
 * @returns {{token: string, ticket?: string} | null}
 */
function keyOf(params) {
  const ticket = params.get('ticket');
  if (ticket !== null) return HEX32.test(ticket) ? { token: '', ticket } : null;
  const token = params.get('token') || '';
  return HEX32.test(token) ? { token } : null;
}

/**
 * The pairing a ticket's session gave: the token the laptop handed, the ticket gone. `null` when
 * the token is not well formed.
 * @param {Pairing} pairing
 * @param {unknown} token
 * @returns {Pairing | null}
 */
export function withToken(pairing, token) {
  if (typeof token !== 'string' || !HEX32.test(token)) return null;
  const { ticket, ...rest } = pairing;
  return { ...rest, token };
}

/**
 * The address the page was opened at: what address.js kept of a pairing link before it took it
 * out of the address bar (handed out once), else the address as it is.
 */
export function openedAt() {
  const opened = /** @type {{voxaOpenedAt?: unknown}} */ (globalThis).voxaOpenedAt;
  delete (/** @type {{voxaOpenedAt?: unknown}} */ (globalThis)).voxaOpenedAt;
  return typeof opened === 'string' ? opened : location.href;
}

/**
 * Removes the query and fragment (code and token) from the address bar and from history; a
 * fragment that is only a route (route.js: ids and paths, never a secret) stays.
 */
export function scrubAddressBar() {
  const kept = isRoute(location.hash) ? location.hash : '';
  if (location.search || location.hash !== kept) history.replaceState(null, '', `${location.pathname}${kept}`);
}
