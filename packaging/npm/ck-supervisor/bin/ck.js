#!/usr/bin/env node
// The `ck` command of the npm package ck-supervisor: finds the static `ck` binary in the platform
// package installed beside this one (ck-supervisor-linux-x64 or ck-supervisor-linux-arm64, chosen
// by npm through their `os`/`cpu` fields) and runs it with the same arguments, the same stdio and
// environment. Signals sent to this process are passed on to ck, and its exit code (or the signal
// that ended it) becomes this process's. No dependencies.
"use strict";

const { spawn } = require("child_process");
const os = require("os");

const PLATFORMS = {
  "linux x64": "ck-supervisor-linux-x64",
  "linux arm64": "ck-supervisor-linux-arm64",
};

/** The path of the `ck` binary of the platform package for this machine, or exits with why not. */
function binary() {
  if (process.env.CK_BINARY) {
    return process.env.CK_BINARY;
  }
  const platform = `${process.platform} ${process.arch}`;
  const pkg = PLATFORMS[platform];
  if (!pkg) {
    fail(
      `ck runs on Linux (x64 or arm64); this is ${platform}. ck needs Linux's SO_REUSEPORT ` +
        `and eBPF: run it on a Linux host, VM or container.`,
    );
  }
  try {
    return require.resolve(`${pkg}/bin/ck`);
  } catch {
    fail(
      `the package ${pkg}, which holds the ck binary for ${platform}, is not installed beside ` +
        `ck-supervisor. npm skips it when optional dependencies are left out ` +
        `(--omit=optional, --no-optional) or when it was installed on another platform: ` +
        `reinstall with \`npm install -g ck-supervisor\` (or, from local files, \`npm install -g ` +
        `./${pkg}-VERSION.tgz ./ck-supervisor-VERSION.tgz\`), or set CK_BINARY to a ck binary.`,
    );
  }
}

/** Prints `message` as ck prints its errors and exits with status 1. */
function fail(message) {
  process.stderr.write(`error: ${message}\n`);
  process.exit(1);
}

// ck acts on these (stop, reload, upgrade, scale, `ck top`'s resize): pass them on.
const FORWARDED = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR2", "SIGTTIN", "SIGTTOU", "SIGWINCH"];

const child = spawn(binary(), process.argv.slice(2), { stdio: "inherit" });
const forward = (signal) => child.kill(signal);
for (const signal of FORWARDED) {
  process.on(signal, forward);
}
child.on("error", (err) => fail(`could not run ${child.spawnfile}: ${err.message}`));
child.on("exit", (code, signal) => {
  for (const s of FORWARDED) {
    process.removeListener(s, forward);
  }
  if (signal) {
    // End the same way ck ended, so that a shell or supervisor above sees the signal.
    process.kill(process.pid, signal);
    process.exitCode = 128 + (os.constants.signals[signal] || 0);
    return;
  }
  process.exitCode = code;
});
