// @ts-check
// Runs before anything of the page is drawn: a classic script at the top of index.html's <head>
// (a module would run after the first paint). A pairing link's secrets — `code`, `ticket` (or an
// older link's `token`) and `relay_token` in the fragment (`#code=…&ticket=…`, `#ticket=…`), or
// in the query of older links — leave the address bar and the tab's history entry at once; what
// else the link carries (a notification's `session=`) stays for the page to read. The page reads
// the link it was opened with from `voxaOpenedAt` (pairings.js `openedAt`), once. The browser
// wrote the link into its history before this ran: its ticket works once (docs/SECURITY.md, "A
// link whose secret works once").
(() => {
  const SECRETS = ['code', 'token', 'ticket', 'relay_token', 'relay'];
  const secret = (/** @type {string} */ key) => SECRETS.includes(key);
  const url = new URL(location.href);
  const fragment = new URLSearchParams(url.hash.slice(1));
  if (![...url.searchParams.keys(), ...fragment.keys()].some(secret)) return;
  Object.defineProperty(globalThis, 'voxaOpenedAt', { value: location.href, configurable: true });
  for (const key of [...url.searchParams.keys()]) if (secret(key)) url.searchParams.delete(key);
  for (const key of [...fragment.keys()]) if (secret(key)) fragment.delete(key);
  url.hash = fragment.toString();
  history.replaceState(null, '', `${url.pathname}${url.search}${url.hash}`);
})();
