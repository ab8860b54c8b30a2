// A plain Node.js HTTP server, served under ck by ck-listen (packages/ck-listen, `npm i ck-listen`):
//   ck run -w 4 --port 8080 -- node server.js
// Without ck it serves on $PORT (else 8080): `node server.js`.
const http = require("http");
const { listen } = require("ck-listen");

const server = http.createServer((req, res) => {
  if (req.url === "/healthz") return res.end("ok\n");
  // Which worker answered: ck's slot (none without ck) and this process.
  res.end(`slot=${process.env.CK_SLOT ?? "-"} pid=${process.pid}\n`);
});

// On ck's socket (fd 3) under ck, else on $PORT; on SIGTERM it closes keep-alive connections
// gracefully.
listen(server);
