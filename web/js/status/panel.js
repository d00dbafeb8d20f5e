// @ts-check
// The status panel: what the laptop said in its hello, the tools it offers, who is connected to
// it (from its `status` answer), the bytes this page's session moved and the low-data switch, and
// Stop everything. Renaming, forgetting and adding a laptop are
// the machine picker's (picker.js).

import { el, part } from '../dom.js';
import * as pairings from '../pairings.js';
import { onSession } from '../session/events.js';
import { showWithTab } from '../tabs.js';

/** @typedef {import('../app.js').Context} Context */

/** How often the panel asks the laptop who is connected while it is shown. */
const STATUS_EVERY_MS = 5000;

/** How a connected client came, in words. */
const VIA = { relay: 'phone or browser', loopback: 'this laptop', host: 'a host' };

/**
 * One connected client as a line.
 * @param {Record<string, any>} client
 */
function connectedLine(client) {
  const via = typeof client.via === 'string' && client.via in VIA ? VIA[/** @type {keyof VIA} */ (client.via)] : 'unknown';
  const name = typeof client.client === 'string' ? client.client : 'unnamed client';
  const since = Number.isFinite(client.since) ? new Date(client.since * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : '?';
  return `${name} · ${via} · ${client.sealed === true ? 'sealed' : 'not sealed'} · since ${since}`;
}

/** The pairings with the low-data switch on, in this browser (localStorage). */
const LOW_DATA_KEY = 'voxa.lowData';
/** What each pairing's sessions moved this hour (localStorage): `{[id]: {hour, in, out}}`. */
const HOUR_KEY = 'voxa.bytesHour';
const HOUR_MS = 3600 * 1000;

/** @param {string} key */
function stored(key) {
  try {
    const value = JSON.parse(localStorage.getItem(key) || 'null');
    return value && typeof value === 'object' ? value : null;
  } catch {
    return null;
  }
}

/** @returns {string[]} */
function lowDataIds() {
  const ids = stored(LOW_DATA_KEY);
  return Array.isArray(ids) ? ids.filter((id) => typeof id === 'string') : [];
}

/** Bytes in words: `840 B`, `12.3 KB`, `4.1 MB` (1 KB = 1000 bytes). @param {number} n */
export function bytesText(n) {
  if (n < 1000) return `${n} B`;
  return n < 1e6 ? `${(n / 1000).toFixed(1)} KB` : `${(n / 1e6).toFixed(1)} MB`;
}

/**
 * The relay the session goes through, and how many the pairing names (the page moves to the next
 * when one fails).
 * @param {import('../pairings.js').RelayPairing} pairing
 * @param {string | undefined} relay
 */
function throughRelay(pairing, relay) {
  const count = 1 + (pairing.relays || []).length;
  return `relay ${relay || location.host}${count > 1 ? `, one of ${count}` : ''}`;
}

/** Who hosts a call, as the status panel says it. */
const VOICE_HOSTS = { laptop: 'hosted by the laptop', relay: 'hosted by the relay' };

export class Status {
  /**
   * @param {HTMLElement} root `#panel-status`
   * @param {Context} context
   */
  constructor(root, { store }) {
    const facts = part(root, 'facts', HTMLElement);
    const tools = part(root, 'tools', HTMLElement);
    const connected = part(root, 'connected', HTMLElement);
    const stopAll = part(root, 'stop-all', HTMLButtonElement);
    const stopStatus = part(root, 'stop-all-status', HTMLElement);
    const bytes = part(root, 'bytes', HTMLElement);
    const lowData = part(root, 'low-data', HTMLInputElement);
    /** @type {import('../session.js').Session | null} */
    let session = null;
    /** What the session had moved when last counted into the hour. */
    let counted = { in: 0, out: 0 };
    const onStatus = (/** @type {Record<string, any>} */ status) => {
      const clients = Array.isArray(status.connected) ? status.connected.filter((c) => c && typeof c === 'object') : [];
      connected.replaceChildren(...clients.map((client) => el('li', { text: connectedLine(client) })));
    };
    const askStatus = () => {
      if (session && store.state.online && store.state.tab === 'status') session.sendJson({ type: 'status' });
    };
    setInterval(askStatus, STATUS_EVERY_MS);
    onSession(store, { status: onStatus }, (now) => {
      session = now;
      counted = { in: 0, out: 0 };
      connected.replaceChildren();
    });
    // A loopback page keeps nothing of its laptop in the browser's storage: its hour is counted
    // in memory.
    /** @type {Record<string, any>} */
    let inMemory = {};
    // Each second, what the session moved since is added to this hour's count of its pairing.
    const countBytes = () => {
      const pairing = store.state.pairing;
      const id = pairing ? pairing.id : '';
      if (!session || !pairing || !id) return;
      const keep = pairing.kind === 'relay';
      const moved = { in: session.bytesIn, out: session.bytesOut };
      const hour = Math.floor(Date.now() / HOUR_MS);
      const hours = (keep ? stored(HOUR_KEY) : inMemory) || {};
      const mine = hours[id] && hours[id].hour === hour ? hours[id] : { hour, in: 0, out: 0 };
      mine.in += moved.in - counted.in;
      mine.out += moved.out - counted.out;
      if (moved.in !== counted.in || moved.out !== counted.out) {
        counted = moved;
        const kept = Object.fromEntries(Object.entries(hours).filter(([, h]) => h && h.hour === hour).slice(-31));
        if (!keep) inMemory = { ...kept, [id]: mine };
        else try { localStorage.setItem(HOUR_KEY, JSON.stringify({ ...kept, [id]: mine })); } catch { /* full: counted in memory only */ }
      }
      bytes.replaceChildren(...[
        ['This session', moved],
        ['This hour', mine],
      ].flatMap(([name, m]) => [el('dt', { text: String(name) }),
        el('dd', { text: `${bytesText(Number(/** @type {any} */ (m).in))} in · ${bytesText(Number(/** @type {any} */ (m).out))} out` })]));
    };
    setInterval(countBytes, 1000);
    store.watch(['pairing'], ({ pairing }) => {
      const on = pairing !== null && lowDataIds().includes(pairing.id);
      lowData.checked = on;
      store.set({ lowData: on });
    });
    lowData.addEventListener('change', () => {
      const pairing = store.state.pairing;
      if (!pairing) return;
      const ids = lowDataIds().filter((id) => id !== pairing.id);
      if (lowData.checked) ids.push(pairing.id);
      try { localStorage.setItem(LOW_DATA_KEY, JSON.stringify(ids.slice(-64))); } catch { /* kept for this page */ }
      store.set({ lowData: lowData.checked });
    });
    store.watch(['online', 'tab'], ({ online }) => {
      stopAll.disabled = !online;
      askStatus();
    });
    stopAll.addEventListener('click', () => {
      stopStatus.textContent = session && session.cancelAll()
        ? 'Asked the laptop to stop every call of this pairing.'
        : 'The laptop is not connected.';
    });
    showWithTab(root, store, 'status');
    store.watch(['pairing', 'connection', 'hello', 'voice', 'env', 'environments', 'server'], (state) => {
      const { pairing, hello, voice, server } = state;
      const env = state.environments.find((e) => e.envKey === state.env);
      const shown = [
        ['Laptop', pairing ? pairings.label(pairing) : 'not paired'],
        ['Connection', state.connection.text],
        ['Through', pairing ? (pairing.kind === 'relay' ? throughRelay(pairing, state.connection.relay) : 'this machine') : ''],
        ['Mode', hello ? hello.mode : ''],
        ['Voice', hello ? (voice && 'host' in voice && VOICE_HOSTS[voice.host]) || 'none' : ''],
        ['Agent', hello ? hello.agent : ''],
        ['Environment', state.env ? (env ? env.name : state.env.slice(0, 12)) : 'this laptop'],
        ['Web client', server.version ? `voxa ${server.version}` : ''],
        // `voxa run --lan`'s own certificate, to compare with what it printed (docs/GUIDE.md); a
        // space every eight bytes lets it wrap there.
        ['Certificate', typeof server.certificate_sha256 === 'string'
          ? `SHA-256 ${(server.certificate_sha256.match(/.{1,24}/g) || []).join(' ')}` : ''],
      ].filter(([, value]) => typeof value === 'string' && value);
      facts.replaceChildren(...shown.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', { text: value })]));
      const offered = hello && Array.isArray(hello.tools) ? hello.tools.filter((t) => typeof t === 'string') : [];
      tools.replaceChildren(...offered.map((tool) => el('li', { text: tool })));
    });
  }
}
