// @ts-check
/// <reference lib="webworker" />
// voxa's service worker: shows the laptop's notifications (Web Push) with the page closed, opens
// the page on what a notification is about when tapped, and keeps a copy of the app's files so
// the page opens at once, even on a slow network. Nothing it caches holds a secret: the pairing
// lives in the page's storage, never in a response.

const sw = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));

/** The cache of the app's files; a new name drops the old copy. */
const CACHE = 'voxa-app-1';
/** Requests the cache never answers: the laptop's live data and the WebSocket endpoints. */
const LIVE = ['/config', '/ws', '/agent', '/live', '/healthz', '/metrics'];

/**
 * What the laptop pushes (encrypted end to end; the push service reads none of it).
 * @typedef {{title?: unknown, body?: unknown, open?: unknown, tag?: unknown}} Payload
 */

sw.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(['/', '/app.css', '/js/main.js'])).catch(() => {}));
  sw.skipWaiting();
});

sw.addEventListener('activate', (event) => {
  event.waitUntil(
    caches.keys()
      .then((names) => Promise.all(names.filter((name) => name !== CACHE).map((name) => caches.delete(name))))
      .then(() => sw.clients.claim()),
  );
});

// Stale while revalidate: the cached copy answers at once, the network refreshes it behind.
sw.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== 'GET' || url.origin !== sw.location.origin || LIVE.some((p) => url.pathname.startsWith(p))) {
    return;
  }
  const key = url.pathname === '/index.html' ? '/' : url.origin + url.pathname;
  event.respondWith(
    caches.open(CACHE).then(async (cache) => {
      const cached = await cache.match(key);
      const fresh = fetch(request).then((response) => {
        if (response.ok && response.type === 'basic') cache.put(key, response.clone());
        return response;
      });
      if (cached) {
        event.waitUntil(fresh.catch(() => {}));
        return cached;
      }
      return fresh;
    }),
  );
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
