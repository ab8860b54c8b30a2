// ck-listen: serve a Node.js server on the socket ck hands it, or on PORT without ck, and close
// its keep-alive connections gracefully on the stop signal so that `ck reload` loses no request.
//
//   const { listen } = require("ck-listen");
//   listen(http.createServer(handler));     // ck run -w 4 --port 8080 -- node server.js
//
// Under `ck run` (LISTEN_FDS set for this process) the server accepts on fd 3, the socket ck
// made; otherwise it binds $PORT, else the port given, else 8080 (`ck run --adopt` sets PORT).
// On SIGTERM, SIGINT or SIGQUIT it closes its keep-alive connections gracefully: every response
// not yet sent says `Connection: close` and its connection closes after it; connections idle
// for IDLE_GRACE_MS are closed; the server keeps taking what ck already queued for it during
// that grace (without ck it stops accepting at once); the process exits once no connection is
// left, or at `drainTimeout`, the limit of this graceful close.
//
// Why not `server.close()` alone: since Node 19 it closes idle keep-alive connections at once,
// under a request the client may be sending on one at that moment. A client that does not retry
// (wrk, many load balancers) sees that as a failed request.
"use strict";

const http = require("http");
const net = require("net");

/** A connection idle this long while stopping is closed (a client that sends on a connection
 * does so well within it; one that waited longer is closed between requests). */
const IDLE_GRACE_MS = 500;
/** How often the graceful close looks at the connections. */
const TICK_MS = 50;
/** The default `drainTimeout`, the limit of the graceful close: just under ck's default
 * --drain-timeout (10 s, then SIGKILL), so the worker exits by itself. */
const DRAIN_TIMEOUT_MS = 9000;
/** The port without ck and without PORT. */
const DEFAULT_PORT = 8080;
/** The signals that start the graceful close (ck's --stop-signal is SIGTERM by default). */
const STOP_SIGNALS = ["SIGTERM", "SIGINT", "SIGQUIT"];

/**
 * Where `listen` serves: `{ fd: 3 }` under ck's socket activation, else `{ port }`.
 * @param {number|string|undefined} port
 * @returns {{ fd: number } | { port: number }}
 */
function where(port) {
  const env = process.env;
  if (env.LISTEN_FDS !== undefined && Number(env.LISTEN_FDS) >= 1) {
    if (env.LISTEN_PID === undefined || Number(env.LISTEN_PID) === process.pid) {
      return { fd: 3 };
    }
    throw new Error(
      `ck-listen: LISTEN_FDS is meant for process ${env.LISTEN_PID}, not this one ` +
        `(${process.pid}): its socket did not reach node. Run node itself under ck ` +
        "(`ck run -- node server.js`), not through npm or a shell (or `exec node` in the script)"
    );
  }
  const chosen = env.PORT || port || DEFAULT_PORT;
  const number = Number(chosen);
  if (!Number.isInteger(number) || number < 0 || number > 65535) {
    throw new Error(`ck-listen: port ${JSON.stringify(chosen)} is not a port number (0-65535)`);
  }
  return { port: number };
}

/**
 * Serves `server` (or `http.createServer(app)` for a request handler such as an Express app) on
 * ck's socket, or on $PORT / `port` / 8080 without ck, and closes its keep-alive connections
 * gracefully on the stop signal.
 * @param {net.Server | Function} server
 * @param {number|string} [port]
 * @param {{ drainTimeout?: number }} [options]
 * @returns {net.Server} the server
 */
function listen(server, port, options = {}) {
  if (typeof server === "function") server = http.createServer(server);
  if (!(server instanceof net.Server)) {
    throw new TypeError("ck-listen: listen() takes an http/https/net server or a request handler");
  }
  const address = where(port);
  const drainTimeout = options.drainTimeout ?? DRAIN_TIMEOUT_MS;
  /** Open connections: socket -> { responses: Set of unfinished responses, last: ms }. */
  const connections = new Map();
  let stopping = false;

  server.on("connection", (socket) => {
    connections.set(socket, { responses: new Set(), last: Date.now() });
    socket.once("close", () => connections.delete(socket));
  });
  // First in line, so that the header is set before the app's handler sends its answer.
  server.prependListener("request", (req, res) => {
    const conn = connections.get(req.socket);
    if (!conn) return;
    conn.responses.add(res);
    if (stopping) res.setHeader("Connection", "close");
    const done = () => {
      conn.responses.delete(res);
      conn.last = Date.now();
    };
    res.once("finish", done);
    res.once("close", done);
  });

  const underCk = "fd" in address;
  const closeGracefully = (signal) => {
    if (stopping) {
      // Without ck, a second Ctrl-C stops waiting (ck sends its stop signal once).
      if (!underCk) process.exit(0);
      return;
    }
    stopping = true;
    const started = Date.now();
    let closing = false;
    for (const conn of connections.values()) {
      for (const res of conn.responses) {
        if (!res.headersSent) res.setHeader("Connection", "close");
      }
    }
    // net.Server's close, not http.Server's: it stops accepting and leaves idle keep-alive
    // connections to the grace below. Under ck, what ck already queued is taken first.
    const stopAccepting = (then) => {
      if (server.listening) net.Server.prototype.close.call(server, then);
      else if (then) setImmediate(then);
    };
    if (!underCk) stopAccepting();
    const timer = setInterval(() => {
      const now = Date.now();
      for (const [socket, conn] of connections) {
        if (conn.responses.size === 0 && now - conn.last >= IDLE_GRACE_MS) socket.end();
      }
      if (!closing && connections.size === 0 && (!underCk || now - started >= IDLE_GRACE_MS)) {
        // Exits once the listener is closed and any connection accepted meanwhile is done
        // (this loop goes on closing it when idle).
        closing = true;
        stopAccepting(() => process.exit(0));
      } else if (now - started >= drainTimeout) {
        clearInterval(timer);
        console.error(
          `ck-listen: ${connections.size} connection(s) still open ${drainTimeout} ms after ` +
            `${signal}; exiting anyway`
        );
        process.exit(0);
      }
    }, TICK_MS);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, closeGracefully);

  server.listen(address);
  return server;
}

module.exports = { listen };
