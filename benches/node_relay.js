// A relay with voxa's pairing and forwarding, on Node.js and `ws`: what a team might deploy
// instead. The bench (benches/voxa_bench/relay_cpu.rs) runs it under the same load as
// `voxa relay` and installs `ws` with npm into a temporary directory. It speaks the relay framing
// of docs/PROTOCOL.md ("Relay") for one phone per code: the agent's messages are binary with a
// 5-byte header (kind, peer id), and phones get presence notices as text starting with U+0001.
//
//   node benches/node_relay.js [PORT]   → prints {"listen":"127.0.0.1:PORT"} once listening
"use strict";
const http = require("http");
const { WebSocketServer } = require("ws");

const port = Number(process.argv[2] || 0);
const AGENT = 0;
const PHONE = 1;
const ROLES = { "/agent": AGENT, "/ws": PHONE };
const KIND = { text: 0x00, binary: 0x01, joined: 0x10, left: 0x11 };
const pairs = new Map();
let nextPeer = 1;

const server = http.createServer((req, res) => {
  res.writeHead(req.url === "/healthz" ? 200 : 404);
  res.end(req.url === "/healthz" ? "ok" : "not found");
});
const wss = new WebSocketServer({
  noServer: true,
  maxPayload: 16 << 20,
  perMessageDeflate: false,
  handleProtocols: (offered) => (offered.has("voxa-relay.2") ? "voxa-relay.2" : false),
});
const presence = (state) => "\u0001" + JSON.stringify({ type: "presence", peer: "agent", state });
const header = (kind, peer) => {
  const head = Buffer.alloc(5);
  head[0] = kind;
  head.writeUInt32BE(peer, 1);
  return head;
};

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
      slot = { agent: null, phone: null, peer: 0 };
      pairs.set(code, slot);
    }
    const joined = () => {
      slot.agent.send(header(KIND.joined, slot.peer));
      slot.phone.send(presence("joined"));
    };
    if (role === AGENT) {
      if (slot.agent) slot.agent.close(4001, "replaced");
      slot.agent = ws;
      if (slot.phone) joined();
      ws.on("message", (data, isBinary) => {
        if (slot.agent !== ws || !isBinary || data.length < 5) return;
        const kind = data[0];
        if (kind > KIND.binary || data.readUInt32BE(1) !== slot.peer || !slot.phone) return;
        slot.phone.send(data.subarray(5), { binary: kind === KIND.binary });
      });
    } else {
      if (slot.phone) slot.phone.close(4003, "too-many-phones");
      slot.phone = ws;
      slot.peer = nextPeer++;
      if (slot.agent) joined();
      ws.on("message", (data, isBinary) => {
        if (slot.phone !== ws || !slot.agent) return;
        const kind = isBinary ? KIND.binary : KIND.text;
        slot.agent.send(Buffer.concat([header(kind, slot.peer), data]), { binary: true });
      });
    }
    ws.on("close", () => {
      if (role === AGENT && slot.agent === ws) {
        slot.agent = null;
        if (slot.phone) slot.phone.send(presence("left"));
      } else if (role === PHONE && slot.phone === ws) {
        slot.phone = null;
        if (slot.agent) slot.agent.send(header(KIND.left, slot.peer));
      }
      if (!slot.agent && !slot.phone) pairs.delete(code);
    });
  });
});

server.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ listen: `127.0.0.1:${server.address().port}` }));
});
