// @ts-check
// Runs before anything of the page is drawn: a classic script at the top of index.html's <head>
// (a module would run after the first paint). A pairing link's secrets — `code`, `token` and
// `relay_token` in the fragment (`#code=…&token=…`, `#token=…`) or in the query of older links —
// leave the address bar and the tab's history entry at once; what else the link carries (a
// notification's `session=`) stays for the page to read. The page reads the link it was opened
// with from `voxaOpenedAt` (pairings.js `openedAt`), once.
(() => {
  const secret = (/** @type {string} */ key) => key === 'code' || key === 'token' || key === 'relay_token';
  const url = new URL(location.href);
  const fragment = new URLSearchParams(url.hash.slice(1));
  if (![...url.searchParams.keys(), ...fragment.keys()].some(secret)) return;
  Object.defineProperty(globalThis, 'voxaOpenedAt', { value: location.href, configurable: true });
  for (const key of [...url.searchParams.keys()]) if (secret(key)) url.searchParams.delete(key);
  for (const key of [...fragment.keys()]) if (secret(key)) fragment.delete(key);
  url.hash = fragment.toString();
  history.replaceState(null, '', `${url.pathname}${url.search}${url.hash}`);
})();
