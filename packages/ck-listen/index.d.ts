// Types of ck-listen: serve a Node.js server on ck's socket (or $PORT) and close its keep-alive
// connections gracefully on stop.
import type { RequestListener, Server as HttpServer } from "node:http";
import type { Server as NetServer } from "node:net";

/** Options of {@link listen}. */
export interface ListenOptions {
  /**
   * The limit of the graceful close: milliseconds after the stop signal before the process
   * exits anyway (default 9000, just under ck's default `--drain-timeout` of 10 s).
   */
  drainTimeout?: number;
}

/**
 * Serves `server` on the socket ck hands over (fd 3) when run by `ck run`, else on `$PORT`,
 * else `port`, else 8080; on SIGTERM, SIGINT or SIGQUIT closes its keep-alive connections
 * gracefully (`Connection: close` on responses not yet sent, idle connections closed after
 * 500 ms) and exits once none is left. Returns the server.
 */
export function listen<S extends NetServer>(server: S, port?: number | string, options?: ListenOptions): S;
/** Like the above for a request handler (an Express app): serves `http.createServer(app)`. */
export function listen(app: RequestListener, port?: number | string, options?: ListenOptions): HttpServer;
