// Stockade bench peer: a Node.js replica of the "baseline-current" shell manager.
//
// Each command is spawned with `/bin/sh -c`; stdout and stderr are read with `on('data')` and
// every chunk is kept as a string in a per-session `string[]` (what the measured agent did, so a
// later getCommandOutput could join them). Nothing is ever evicted: heap grows ~1 MiB per MiB.
//
// Peer contract (see `stockade bench growth --help`):
//   BENCH_N         how many commands to start
//   BENCH_COMMAND   the shell command each runs (it waits for the barrier file itself)
//   BENCH_PROGRESS  a file to overwrite with the total output bytes received so far
//   stdout          print "ready" once all N are started; exit 0 when all N have ended
//
// Run it as the baseline did: node --max-old-space-size=512 bench/peers/node-baseline.js
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');

const n = parseInt(process.env.BENCH_N || '0', 10);
const command = process.env.BENCH_COMMAND;
const progress = process.env.BENCH_PROGRESS;
if (!n || !command) {
  console.error('node-baseline: BENCH_N and BENCH_COMMAND are required');
  process.exit(2);
}

const sessions = [];
let received = 0;
let running = 0;

function writeProgress() {
  if (progress) {
    try { fs.writeFileSync(progress, `${received}\n`); } catch (_) { /* best effort */ }
  }
}

for (let i = 0; i < n; i++) {
  const session = { id: `sh-${i + 1}`, stdout: [], stderr: [], exitCode: null };
  const child = spawn('/bin/sh', ['-c', command], { stdio: ['ignore', 'pipe', 'pipe'] });
  running++;
  child.stdout.on('data', (chunk) => { received += chunk.length; session.stdout.push(chunk.toString()); });
  child.stderr.on('data', (chunk) => { received += chunk.length; session.stderr.push(chunk.toString()); });
  child.on('close', (code) => {
    session.exitCode = code;
    running--;
    if (running === 0) {
      writeProgress();
      clearInterval(timer);
      process.exit(0);
    }
  });
  sessions.push(session);
}

const timer = setInterval(writeProgress, 100);
process.stdout.write('ready\n');
