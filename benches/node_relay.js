// A relay with voxa's pairing and forwarding, on Node.js and `ws`: what a team might deploy
// instead. The bench (benches/voxa_bench/relay_cpu.rs) runs it under the same load as
// `voxa relay` and installs `ws` with npm into a temporary directory.
//
//   node benches/node_relay.js [PORT]   → prints {"listen":"127.0.0.1:PORT"} once listening
"use strict";
const http = require("http");
const { WebSocketServer } = require("ws");

const port = Number(process.argv[2] || 0);
const ROLES = { "/agent": 0, "/ws": 1 };
const NAMES = ["agent", "phone"];
const pairs = new Map();

const server = http.createServer((req, res) => {
  res.writeHead(req.url === "/healthz" ? 200 : 404);
  res.end(req.url === "/healthz" ? "ok" : "not found");
});
const wss = new WebSocketServer({ noServer: true, maxPayload: 16 << 20, perMessageDeflate: false });
const notice = (peer, state) => JSON.stringify({ type: "__peer", peer: NAMES[peer], state });

server.on("upgrade", (req, socket, head) => {
  const url = new URL(req.url, "http://relay");
  const role = ROLES[url.pathname];
  const code = url.searchParams.get("code") || "";
  if (role === undefined || !/^[0-9a-f]{32}$/.test(code)) {
    socket.end("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    let slot = pairs.get(code);
    if (!slot) {
      slot = [null, null];
      pairs.set(code, slot);
    }
    if (slot[role]) slot[role].close(4001, "replaced");
    slot[role] = ws;
    const peer = slot[1 - role];
    if (peer) {
      peer.send(notice(role, "joined"));
      ws.send(notice(1 - role, "joined"));
    }
    ws.on("message", (data, isBinary) => {
      if (!isBinary && data.includes('"__peer"')) return; // peers cannot forge presence
      const other = slot[1 - role];
      if (slot[role] === ws && other) other.send(data, { binary: isBinary });
    });
    ws.on("close", () => {
      if (slot[role] !== ws) return;
      slot[role] = null;
      if (slot[1 - role]) slot[1 - role].send(notice(role, "left"));
      else pairs.delete(code);
    });
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ listen: `127.0.0.1:${server.address().port}` }));
});
