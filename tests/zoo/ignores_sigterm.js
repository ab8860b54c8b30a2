// The zoo: a Node server that ignores SIGTERM (a handler that does nothing, as people add to
// "handle" it) and serves the socket ck passes as fd 3 until it is killed.
const http = require("http");

process.on("SIGTERM", () => {});
const body = `slot=${process.env.CK_SLOT} pid=${process.pid}\n`;
http
  .createServer((req, res) => res.end(body))
  .listen({ fd: 3 });
