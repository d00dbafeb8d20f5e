// Pairings remembered in this browser: one per laptop (relay code), or this machine's loopback
// page. The token stays in localStorage and never goes into a URL the page requests.

const KEY = 'voxa.pairings';
const HEX32 = /^[0-9a-f]{32}$/;

function read() {
  try {
    const stored = JSON.parse(localStorage.getItem(KEY) || '{}');
    const list = Array.isArray(stored.list) ? stored.list.filter(valid) : [];
    return { list, current: stored.current };
  } catch {
    return { list: [], current: undefined };
  }
}

function valid(pairing) {
  if (!pairing || !HEX32.test(pairing.token || '')) return false;
  return pairing.kind === 'loopback' || (pairing.kind === 'relay' && HEX32.test(pairing.code || ''));
}

function write(state) {
  localStorage.setItem(KEY, JSON.stringify(state));
}

/** Every remembered pairing, the current one first. */
export function all() {
  return read().list;
}

/** The pairing in use, if any. */
export function current() {
  const state = read();
  return state.list.find((p) => p.id === state.current) || state.list[0] || null;
}

/** Remembers a pairing (replacing one with the same id) and makes it current. */
export function remember(pairing) {
  const state = read();
  const existing = state.list.find((p) => p.id === pairing.id);
  const merged = { ...existing, ...pairing, name: pairing.name || (existing && existing.name) };
  state.list = [merged, ...state.list.filter((p) => p.id !== pairing.id)];
  state.current = pairing.id;
  write(state);
  return merged;
}

/** Makes a remembered pairing current. */
export function select(id) {
  const state = read();
  if (state.list.some((p) => p.id === id)) {
    state.current = id;
    write(state);
  }
}

/** Names a pairing after its laptop. */
export function rename(id, name) {
  const state = read();
  const pairing = state.list.find((p) => p.id === id);
  if (pairing && name && pairing.name !== name) {
    pairing.name = name;
    write(state);
  }
}

/** Remembers the laptop's mode (`hosted` or `self-hosted`), which picks its socket next time. */
export function setMode(id, mode) {
  const state = read();
  const pairing = state.list.find((p) => p.id === id);
  if (pairing && typeof mode === 'string' && pairing.mode !== mode) {
    pairing.mode = mode;
    write(state);
  }
}

/** Forgets one pairing; the next one (if any) becomes current. */
export function forget(id) {
  const state = read();
  state.list = state.list.filter((p) => p.id !== id);
  if (state.current === id) state.current = state.list[0] && state.list[0].id;
  write(state);
}

/** A label for pickers: the laptop's name, else a short form of its code. */
export function label(pairing) {
  if (pairing.name) return pairing.name;
  return pairing.kind === 'loopback' ? 'this machine' : `laptop ${pairing.code.slice(0, 6)}`;
}

/**
 * A pairing carried by a URL: `#code=&token=` (the relay's pairing link; `?code=&token=` in old
 * QR codes) or `#token=` (the loopback link `voxa open` prints). `null` when the URL carries none; an `Error` when it carries
 * one that is malformed.
 */
export function fromUrl(url) {
  const fragment = new URLSearchParams(url.hash.replace(/^#/, ''));
  // voxa prints `#code=&token=` (never sent to the relay); old QR codes carry `?code=&token=`.
  const relayLink = fragment.has('code') ? fragment : url.searchParams;
  const code = relayLink.get('code');
  const token = relayLink.get('token');
  const loopbackToken = fragment.has('code') ? null : fragment.get('token');
  if (code !== null || token !== null) {
    if (!HEX32.test(code || '') || !HEX32.test(token || '')) {
      return new Error('This pairing link is damaged: scan the code again.');
    }
    return { id: `relay:${code}`, kind: 'relay', code, token };
  }
  if (loopbackToken !== null) {
    if (!HEX32.test(loopbackToken)) return new Error('This link is damaged: run voxa open again.');
    return { id: 'loopback', kind: 'loopback', token: loopbackToken };
  }
  return null;
}

/** Removes the query and fragment (code and token) from the address bar. */
export function scrubAddressBar() {
  if (location.search || location.hash) history.replaceState(null, '', location.pathname);
}
