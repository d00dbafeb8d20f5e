// @ts-check
/// <reference lib="webworker" />
// voxa's service worker: shows the laptop's notifications (Web Push) with the page closed, opens
// the page on what a notification is about when tapped, and keeps a copy of the app's shell (the
// page and the files its first screen loads, see docs/PROTOCOL.md "Web client") so a reload
// opens at once, even on a slow network. Nothing it caches holds a secret: the pairing lives in
// the page's storage, never in a response.
//
// A file under a hashed name is served only once its bytes are checked against that name (the
// first 12 hex digits of their SHA-256): a server that alters one, once, cannot have the altered
// copy kept and served for a year. It cannot vouch for the page itself, nor for plain names —
// whoever serves the page serves those (docs/SECURITY.md, "The page the relay serves").

const sw = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));

/** The cache of the app's files; a new name drops the old copy. */
const CACHE = 'voxa-app-3';
/** Requests the cache never answers: the laptop's live data and the WebSocket endpoints. */
const LIVE = ['/config', '/ws', '/agent', '/live', '/healthz', '/metrics', '/ack'];
/** A file name carrying its content hash (`/js/dom.0123456789ab.js`): its bytes never change. */
const HASHED = /\.([0-9a-f]{12})(?=\.[a-z]+$|$)/;

/**
 * Whether a response's bytes are what its hashed name says (the body as the page reads it, its
 * content coding undone).
 * @param {Response} response
 * @param {string} url
 */
async function matchesName(response, url) {
  const named = new URL(url).pathname.match(HASHED);
  if (!named) return false;
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await response.clone().arrayBuffer()));
  const hex = Array.from(digest.subarray(0, 6), (b) => b.toString(16).padStart(2, '0')).join('');
  return hex === named[1];
}

/**
 * What a hashed name gets when the bytes served under it are not that file's.
 * @param {string} url
 */
function altered(url) {
  return new Response(`voxa: ${new URL(url).pathname} is not the file its name says; the server altered it\n`, {
    status: 502, headers: { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' },
  });
}

/**
 * Fetches a hashed file and keeps it, only when its bytes match its name; false when they do not
 * (or it could not be fetched).
 * @param {Cache} cache
 * @param {string} url
 */
async function keepChecked(cache, url) {
  const response = await fetch(url, { credentials: 'omit' });
  if (!response.ok || response.type !== 'basic' || !(await matchesName(response, url))) return false;
  await cache.put(url, response);
  return true;
}

/**
 * What the laptop pushes (encrypted end to end; the push service reads none of it).
 * @typedef {{title?: unknown, body?: unknown, open?: unknown, tag?: unknown, ack?: unknown, receipt?: unknown}} Payload
 */

/**
 * The page from the network (revalidated by its ETag). When it is another build than the copy
 * kept, the files its first screen loads are kept first, then the page: a kept page always has
 * them at hand. Files of older builds go; a view loaded later is kept when first fetched.
 * @param {Cache} cache
 */
async function refreshPage(cache) {
  // Never the address the page was opened at: a pairing link carries secrets in it.
  const response = await fetch('/', { cache: 'no-cache', credentials: 'omit' });
  if (!response.ok || response.type !== 'basic') return response;
  const kept = await cache.match('/');
  if (kept && kept.headers.get('etag') === response.headers.get('etag')) return response;
  const text = await response.clone().text();
  /** @param {RegExp} pattern */
  const named = (pattern) => [...new Set([...text.matchAll(pattern)].map((m) => m[1]).filter((p) => HASHED.test(p)))];
  // A page whose files do not all check out is not kept: the copy kept before stays.
  for (const path of named(/(?:href|src)="(\/[^"]+)"/g)) {
    const url = new URL(path, sw.location.origin).href;
    if (!(await cache.match(url)) && !(await keepChecked(cache, url))) return response;
  }
  await cache.put('/', response.clone());
  // What this build names anywhere (its import map names every module) stays; older builds go.
  const current = new Set(['/', ...named(/"(\/[^"]+)"/g)].map((p) => new URL(p, sw.location.origin).href));
  for (const request of await cache.keys()) {
    if (!current.has(request.url)) await cache.delete(request);
  }
  return response;
}

sw.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then(refreshPage).catch(() => {}));
  sw.skipWaiting();
});

sw.addEventListener('activate', (event) => {
  event.waitUntil(
    caches.keys()
      .then((names) => Promise.all(names.filter((name) => name !== CACHE).map((name) => caches.delete(name))))
      .then(() => sw.clients.claim()),
  );
});

/**
 * A file under its hashed name, its bytes checked against the name: the kept copy, else the
 * network's (then kept). Bytes that do not match are never served nor kept. A name this build no
 * longer has (an older page's lazy view, after an upgrade) is not answered by another file: the
 * view says it could not load, and a reload opens the new build.
 * @param {Request} request
 */
async function hashedFile(request) {
  const cache = await caches.open(CACHE);
  const kept = await cache.match(request.url);
  if (kept && (await matchesName(kept, request.url))) return kept;
  if (kept) await cache.delete(request.url);
  const response = await fetch(request);
  if (!response.ok || response.type !== 'basic') return response;
  if (!(await matchesName(response, request.url))) return altered(request.url);
  await cache.put(request.url, response.clone());
  return response;
}

/**
 * The page: the kept copy at once (the network checks for a new build behind it), else the
 * network's.
 * @param {FetchEvent} event
 */
async function page(event) {
  const cache = await caches.open(CACHE);
  const kept = await cache.match('/');
  event.waitUntil(refreshPage(cache).catch(() => {}));
  return kept || fetch(event.request);
}

sw.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== 'GET' || url.origin !== sw.location.origin || LIVE.some((p) => url.pathname.startsWith(p))) {
    return;
  }
  if (request.mode === 'navigate' && (url.pathname === '/' || url.pathname === '/index.html')) {
    event.respondWith(page(event));
  } else if (HASHED.test(url.pathname)) {
    event.respondWith(hashedFile(request));
  }
  // Anything else (plain names, the manifest, this worker) goes to the network as it would.
});

/**
 * A notification from the pushed payload: text only, bounded, a fragment to open.
 * @param {Payload} payload
 */
function notificationFrom(payload) {
  const text = (/** @type {unknown} */ value, /** @type {number} */ max) =>
    typeof value === 'string' ? value.slice(0, max) : '';
  const open = text(payload.open, 200);
  return {
    title: text(payload.title, 80) || 'voxa',
    options: {
      body: text(payload.body, 180),
      tag: text(payload.tag, 64) || undefined,
      icon: '/icon.svg',
      data: { open: /^#[\w=&.-]*$/.test(open) ? open : '' },
    },
  };
}

sw.addEventListener('push', (event) => {
  /** @type {Payload} */
  let payload = {};
  try {
    payload = event.data ? event.data.json() : {};
  } catch {
    payload = {};
  }
  if (!payload || typeof payload !== 'object') payload = {};
  const { title, options } = notificationFrom(payload);
  event.waitUntil(sw.registration.showNotification(title, options).then(() => acknowledge(payload)));
});

/**
 * Tells the laptop the notification is shown: its receipt (a secret only this push carried) to
 * the relay that served this worker, which passes it on unread (docs/PROTOCOL.md, "Push receipts").
 * @param {Payload} payload
 */
async function acknowledge(payload) {
  const { ack, receipt } = payload;
  if (typeof ack !== 'string' || !/^\/ack\?code=[0-9a-f]{32}$/.test(ack)) return;
  if (typeof receipt !== 'string' || !/^[0-9a-f]{32}$/.test(receipt)) return;
  try {
    await fetch(new URL(ack, sw.location.origin).href, {
      method: 'POST', body: JSON.stringify({ receipt }), credentials: 'omit', cache: 'no-store',
    });
  } catch {
    // The laptop will say "not delivered"; nothing to do here.
  }
}

sw.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const open = (event.notification.data && event.notification.data.open) || '';
  event.waitUntil(
    sw.clients.matchAll({ type: 'window', includeUncontrolled: true }).then(async (windows) => {
      const target = new URL('/' + open, sw.location.origin).href;
      for (const client of windows) {
        if (new URL(client.url).origin === sw.location.origin) {
          client.postMessage({ type: 'open', open });
          return client.focus();
        }
      }
      return sw.clients.openWindow(target);
    }),
  );
});
