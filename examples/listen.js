// An unmodified Node.js server: it binds the port itself, as most apps do. Run it under ck with
// --adopt, which adds SO_REUSEPORT to its bind and adopts its socket:
//   ck run --port 8080 --adopt -- node examples/listen.js
const http = require("http");

const slot = process.env.CK_SLOT;
http
  .createServer((req, res) => res.end(`slot=${slot} pid=${process.pid}\n`))
  .listen(Number(process.env.PORT || 8080));
