// @ts-check
// The page's route: the address names where the user is (docs/GUIDE.md, "The address is the
// place") — `#/agent/<session>`, `#/shell/<term>`, `#/files/<path>`, `#/approvals`, or a tab
// (`#/status`). Reload, back, a second device given the address, and a tapped notification open
// that place. The route holds ids and workspace paths only: a pairing link's secrets never
// become part of it (address.js took them out of the address before the page was drawn, and
// pairings.js `scrubAddressBar` keeps a route only).
//
// The store is the truth: a change of `tab`, `agentSession`, `shellTerm`, `filesPath` or
// `approvalsOpen` writes the address (a new history entry, so back goes to the previous place);
// an address the user opens (back, a link, a notification) sets the store.

/** @typedef {import('./store.js').State} State */

const TABS = new Set(['commands', 'shell', 'files', 'screen', 'agent', 'status']);
/** Longest id or path a route carries; longer is not a route. */
const MAX_PART = 1024;

/**
 * The place an address fragment names, as store keys; `null` for a fragment that is not a route.
 * A notification's older fragments (`#session=s-…`, `#approval=a-…`) name places too.
 * @param {string} hash
 * @returns {Partial<State> | null}
 */
export function parse(hash) {
  const fragment = hash.replace(/^#/, '');
  if (!fragment.startsWith('/')) {
    const params = new URLSearchParams(fragment);
    const session = params.get('session');
    if (session && session.length <= MAX_PART) return { tab: 'agent', agentSession: session, approvalsOpen: false };
    if (params.has('approval')) return { approvalsOpen: true };
    return null;
  }
  const [name, ...rest] = fragment.slice(1).split('/');
  let part = '';
  try {
    part = decodeURIComponent(rest.join('/'));
  } catch {
    return null;
  }
  if (part.length > MAX_PART) return null;
  if (name === 'approvals') return { approvalsOpen: true };
  if (!TABS.has(name)) return null;
  /** @type {Partial<State>} */
  const place = { tab: name, approvalsOpen: false };
  if (name === 'agent') place.agentSession = part;
  if (name === 'shell') place.shellTerm = part;
  if (name === 'files') place.filesPath = part;
  return place;
}

/**
 * The address fragment of the place the store holds.
 * @param {Readonly<State>} state
 */
export function format(state) {
  if (state.approvalsOpen) return '#/approvals';
  const encode = (/** @type {string} */ part) => part.split('/').map(encodeURIComponent).join('/');
  if (state.tab === 'agent' && state.agentSession) return `#/agent/${encode(state.agentSession)}`;
  if (state.tab === 'shell' && state.shellTerm) return `#/shell/${encode(state.shellTerm)}`;
  if (state.tab === 'files' && state.filesPath && state.filesPath !== '.') return `#/files/${encode(state.filesPath)}`;
  return `#/${state.tab}`;
}

/** Whether a fragment is a route (what the address bar may keep). @param {string} hash */
export function isRoute(hash) {
  return parse(hash) !== null;
}

/**
 * Keeps the address and the store in step, from the place the page was opened at.
 * @param {import('./store.js').Store} store
 * @param {string} opened the fragment the page was opened with
 */
export function follow(store, opened) {
  const place = parse(opened);
  if (place) store.set(place);
  let writing = false;
  const keys = /** @type {const} */ (['tab', 'agentSession', 'shellTerm', 'filesPath', 'approvalsOpen', 'view']);
  store.watch(keys, (state) => {
    if (state.view !== 'workspace' || writing) return;
    const hash = format(state);
    if (hash === location.hash) return;
    const first = !isRoute(location.hash);
    // The first place replaces the bare address; every later one is a step back can undo.
    if (first) history.replaceState(null, '', `${location.pathname}${location.search}${hash}`);
    else history.pushState(null, '', `${location.pathname}${location.search}${hash}`);
  });
  const opening = () => {
    const next = parse(location.hash);
    if (!next) return;
    writing = true;
    try {
      store.set(next);
    } finally {
      writing = false;
    }
  };
  addEventListener('popstate', opening);
  addEventListener('hashchange', opening);
}
