// A Node.js worker for ck: serves HTTP on the socket ck hands it (fd 3, systemd socket
// activation), and closes its keep-alive connections gracefully on SIGTERM.
// Run: ck run --port 8080 -- node examples/worker.js
//
// The graceful close is the pattern to copy: on SIGTERM, answer the next request of every open
// connection with `Connection: close` and close it after that answer; close connections that
// stay idle for IDLE_GRACE_MS; keep accepting what is already queued; exit when no connection
// is left. (Node's own server.close() would close idle keep-alive connections at once, under
// a request the client may already be sending.)
const http = require("http");

const IDLE_GRACE_MS = 500;
const fds = Number(process.env.LISTEN_FDS || 0);
if (fds < 1 || Number(process.env.LISTEN_PID) !== process.pid) {
  console.error("expected to be started by `ck run` (LISTEN_FDS/LISTEN_PID not set for this process)");
  process.exit(1);
}
const slot = process.env.CK_SLOT;
let stopping = false;
/** Open connections: socket -> { busy, last } (a request in progress; last activity). */
const connections = new Map();

const server = http.createServer((req, res) => {
  const conn = connections.get(req.socket);
  conn.busy = true;
  if (stopping) res.setHeader("Connection", "close");
  res.on("finish", () => {
    conn.busy = false;
    conn.last = Date.now();
  });
  res.end(`slot=${slot} pid=${process.pid}\n`);
});
server.on("connection", (socket) => {
  connections.set(socket, { busy: false, last: Date.now() });
  socket.on("close", () => connections.delete(socket));
});
// { fd: 3 } makes Node accept on the inherited listening socket instead of binding a new one.
server.listen({ fd: 3 }, () => console.error(`node worker slot=${slot} pid=${process.pid} ready`));

// Node has no datagram unix sockets, so this worker does not send READY=1: ck's default
// `--ready auto` sees it accept (its socket in its epoll set) and takes it as ready then.
process.on("SIGTERM", () => {
  if (stopping) return;
  stopping = true;
  const started = Date.now();
  const timer = setInterval(() => {
    const now = Date.now();
    for (const [socket, conn] of connections) {
      if (!conn.busy && now - conn.last >= IDLE_GRACE_MS) socket.end();
    }
    if (connections.size === 0 && now - started >= IDLE_GRACE_MS) {
      clearInterval(timer);
      server.close(() => process.exit(0));
    }
  }, 50);
});
