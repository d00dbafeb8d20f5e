// @ts-check
// Runs before anything of the page is drawn: a classic script at the top of index.html's <head>
// (a module would run after the first paint). A pairing link's secrets — `code`, `ticket` (or an
// older link's `token`) and `relay_token` in the fragment (`#code=…&ticket=…`, `#ticket=…`), or
// in the query of older links — leave the address bar and the tab's history entry at once; what
// else the link carries (a notification's `session=`) stays for the page to read. The page reads
// the link it was opened with from `voxaOpenedAt` (pairings.js `openedAt`), once. The browser
// wrote the link into its history before this ran: its ticket works once (docs/SECURITY.md, "A
// link whose secret works once").
//
// It also opens the link's session socket while the modules download, so its upgrade is no round
// trip after them: the session that would open the same takes it over (transport.js `Relays`).
(() => {
  const SECRETS = ['code', 'token', 'ticket', 'relay_token', 'relay'];
  const HEX32 = /^[0-9a-f]{32}$/;
  const secret = (/** @type {string} */ key) => SECRETS.includes(key);
  const url = new URL(location.href);
  const fragment = new URLSearchParams(url.hash.slice(1));
  if (![...url.searchParams.keys(), ...fragment.keys()].some(secret)) return;
  Object.defineProperty(globalThis, 'voxaOpenedAt', { value: location.href, configurable: true });
  // The link's socket, read as pairings.js `fromUrl` reads the link (a damaged one opens none).
  const relay = fragment.has('code') || url.searchParams.has('code') || url.searchParams.has('token');
  const carrier = fragment.has('code') ? fragment : url.searchParams;
  const code = carrier.get('code') || '';
  const relayToken = carrier === fragment ? fragment.get('relay_token') : null;
  const loopback = !relay && (fragment.has('ticket') || fragment.has('token'));
  for (const key of [...url.searchParams.keys()]) if (secret(key)) url.searchParams.delete(key);
  for (const key of [...fragment.keys()]) if (secret(key)) fragment.delete(key);
  url.hash = fragment.toString();
  history.replaceState(null, '', `${url.pathname}${url.search}${url.hash}`);

  // As transport.js `socketUrl` and `relayProtocols` make it.
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (relay && (!HEX32.test(code) || (relayToken !== null && (relayToken.length === 0 || relayToken.length > 512)))) return;
  if (!relay && !loopback) return;
  const address = `${scheme}//${location.host}/${relay ? `ws?code=${code}` : ''}`;
  const base64 = relayToken ? btoa(String.fromCharCode(...new TextEncoder().encode(relayToken))) : '';
  const protocols = base64 ? ['voxa.1', `voxa-relay-token.${base64.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')}`] : [];
  try {
    const socket = new WebSocket(address, protocols);
    socket.binaryType = 'arraybuffer';
    /** @type {MessageEvent[]} */
    const heard = [];
    socket.onmessage = (event) => heard.push(event);
    const early = { address, protocols: protocols.join(','), socket, heard };
    Object.defineProperty(globalThis, 'voxaEarlySocket', { value: early, configurable: true });
  } catch {
    // The session opens its own.
  }
})();
