// Not part of the vendored checker: gives a node without a global WebSocket
// (Debian's nodejs 18) one from the ws package (Debian's node-ws), for
// `node --require ws-global.js live.js ...` (integration/live_conformance_test.go).
'use strict';
if (typeof globalThis.WebSocket !== 'function') {
  let ws;
  try { ws = require('ws'); } catch { ws = require('/usr/share/nodejs/ws'); }
  globalThis.WebSocket = ws.WebSocket || ws;
}
