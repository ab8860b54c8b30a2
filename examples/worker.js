// A Node.js worker for ck: serves HTTP on the socket ck hands it (fd 3, systemd socket
// activation). Run: ck run --port 8080 -- node examples/worker.js
const http = require("http");

const fds = Number(process.env.LISTEN_FDS || 0);
if (fds < 1 || Number(process.env.LISTEN_PID) !== process.pid) {
  console.error("expected to be started by `ck run` (LISTEN_FDS/LISTEN_PID not set for this process)");
  process.exit(1);
}
const slot = process.env.CK_SLOT;
const server = http.createServer((req, res) => {
  res.end(`slot=${slot} pid=${process.pid}\n`);
});
// { fd: 3 } makes Node accept on the inherited listening socket instead of binding a new one.
server.listen({ fd: 3 }, () => console.error(`node worker slot=${slot} pid=${process.pid} ready`));
// On SIGTERM stop accepting, finish what is in flight, exit. Node has no datagram unix sockets,
// so this worker does not send READY=1: run ck with --ready spawn (or let --ready auto's grace
// period take it as ready).
process.on("SIGTERM", () => {
  server.close(() => process.exit(0));
  server.closeIdleConnections();
});
