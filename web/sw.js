// @ts-check
/// <reference lib="webworker" />
// voxa's service worker: shows the laptop's notifications (Web Push) with the page closed, opens
// the page on what a notification is about when tapped, and keeps a copy of the app's shell (the
// page and the files its first screen loads, see docs/PROTOCOL.md "Web client") so a reload
// opens at once, even on a slow network. Nothing it caches holds a secret: the pairing lives in
// the page's storage, never in a response.

const sw = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));

/** The cache of the app's files; a new name drops the old copy. */
const CACHE = 'voxa-app-2';
/** Requests the cache never answers: the laptop's live data and the WebSocket endpoints. */
const LIVE = ['/config', '/ws', '/agent', '/live', '/healthz', '/metrics'];
/** A file name carrying its content hash (`/js/dom.0123456789ab.js`): its bytes never change. */
const HASHED = /\.[0-9a-f]{12}(?=\.[a-z]+$|$)/;

/**
 * What the laptop pushes (encrypted end to end; the push service reads none of it).
 * @typedef {{title?: unknown, body?: unknown, open?: unknown, tag?: unknown}} Payload
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
  await cache.addAll(named(/(?:href|src)="(\/[^"]+)"/g));
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
 * A file under its hashed name: the kept copy, else the network's (then kept). A name an older
 * page asks for that this build no longer has is answered by the file's plain name.
 * @param {Request} request
 * @param {string} path
 */
async function hashedFile(request, path) {
  const cache = await caches.open(CACHE);
  const kept = await cache.match(request.url);
  if (kept) return kept;
  const response = await fetch(request);
  if (response.ok && response.type === 'basic') {
    await cache.put(request.url, response.clone());
    return response;
  }
  if (response.status === 404) return fetch(path.replace(HASHED, ''), { cache: 'no-cache' });
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
    event.respondWith(hashedFile(request, url.pathname));
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
  event.waitUntil(sw.registration.showNotification(title, options));
});

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
