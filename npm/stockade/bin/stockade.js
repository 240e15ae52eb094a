#!/usr/bin/env node
// `stockade` from npm: runs the binary of the platform package with this process's arguments,
// stdio and environment, forwards the signals a supervisor or a terminal sends, and ends as the
// binary ended (its exit code, or death by its signal), so `npx @stockade-sh/cli mcp` behaves like the
// binary itself.
import { spawn } from "node:child_process";
import { constants } from "node:os";
import { binaryPath } from "../dist/binary.js";

let bin;
try {
  bin = binaryPath();
} catch (err) {
  process.stderr.write(`stockade: ${err.message}\n`);
  process.exit(2);
}

const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });

// SIGINT from a terminal reaches the whole foreground process group, the binary included, so the
// binary may get it twice; it handles a second as the first (`stockade run` still ends the tree
// once and dies of SIGINT). Forwarding is what makes a signal to this process alone (a
// supervisor, `kill PID`, npx passing on SIGTERM) reach the binary.
const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH"];
const handlers = new Map();
for (const sig of FORWARDED) {
  const handler = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
  };
  handlers.set(sig, handler);
  process.on(sig, handler);
}

child.on("error", (err) => {
  process.stderr.write(`stockade: cannot run ${bin}: ${err.message}\n`);
  process.exit(2);
});

child.on("exit", (code, signal) => {
  if (signal !== null) {
    // Die of the same signal, so a shell or supervisor sees what it would see of the binary.
    for (const [sig, handler] of handlers) process.off(sig, handler);
    process.kill(process.pid, signal);
    // A signal whose default action does not end a process (none of those forwarded): exit as a
    // shell reports a death by signal.
    setTimeout(() => process.exit(128 + (constants.signals[signal] ?? 0)), 100).unref();
    return;
  }
  process.exit(code ?? 0);
});
