// @ts-check
// Runs before anything of the page is drawn: a classic script at the top of index.html's <head>
// (a module would run after the first paint). A pairing link's secrets — `#code=…&token=…`,
// `#token=…`, or the query of older links — leave the address bar and the tab's history entry at
// once; the page reads the link it was opened with from `voxaOpenedAt` (pairings.js `openedAt`),
// once. A fragment that is a route of the page (`#/…`) stays.
(() => {
  const { search, hash, pathname, href } = location;
  if (!/(^|[?#&])(code|token|relay_token)=/.test(`${search}${hash}`)) return;
  Object.defineProperty(globalThis, 'voxaOpenedAt', { value: href, configurable: true });
  history.replaceState(null, '', pathname);
})();
