// node:cluster as people run it (`cargo xtask bench chaos`): the primary forks WORKERS workers
// of hello.js and forks a new one whenever one exits.
const cluster = require("node:cluster");

if (cluster.isPrimary) {
  const workers = Number(process.env.WORKERS || 4);
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on("exit", () => cluster.fork());
} else {
  require("./hello.js");
}
