// The Node hello app the peers run (`cargo xtask bench chaos`): an unmodified server that binds
// the port itself (PORT, HOST), as node:cluster and pm2 expect. ck runs the same handler from
// examples/worker.js on the socket it hands over.
const http = require("http");
const cluster = require("node:cluster");

const slot = cluster.isWorker ? cluster.worker.id : Number(process.env.NODE_APP_INSTANCE || 0);
http
  .createServer((req, res) => res.end(`slot=${slot} pid=${process.pid}\n`))
  .listen(Number(process.env.PORT), process.env.HOST || "127.0.0.1");
