// The TypeScript client as a user meets it, run by tests/packaging/npm.sh as
// `node --input-type=module -e "$(cat npm-client.mjs)"` from a project that installed the npm
// packages: over the local socket (REMOTE unset: the client starts the daemon through the
// bundled binary) or over wss:// (REMOTE, TOKEN_FILE, CA_FILE). DATA is a scratch directory.
// Prints one line of numbers; any failed check throws (exit status 1).
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { Client, CommandFailedError, NoSuchSessionError, StockadeError, StockadeTimeoutError } from "@stockade-sh/cli";

const mode = process.env.REMOTE ? "wss" : "local";
const client = process.env.REMOTE
  ? new Client({ remote: process.env.REMOTE, tokenFile: process.env.TOKEN_FILE, caFile: process.env.CA_FILE })
  : new Client();
function check(ok, what) {
  if (!ok) throw new Error(`${mode}: ${what}`);
}
const data = process.env.DATA;

// One answer.
const hi = await client.run("echo hi; echo err >&2; exit 3");
check(hi.state === "exited" && hi.exitCode === 3 && hi.output === "hi\nerr\n", `run answered ${JSON.stringify(hi.raw)}`);
const failed = await client.run("exit 4", { check: true }).catch((e) => e);
check(failed instanceof CommandFailedError && failed.result.exitCode === 4, `check: ${failed}`);
const slow = await client.run("sleep 30", { timeoutMs: 300 }).catch((e) => e);
check(slow instanceof StockadeTimeoutError && slow.result.state === "timed_out", `timeout: ${slow}`);

// A start again with the key of a kept session answers that session and starts nothing; without
// one, each start carries a fresh key of its own.
const key = `npm-client-${mode}-${process.pid}-${Date.now()}`;
const first = await client.start("sleep 300", { idempotencyKey: key });
const again = await client.start("sleep 300", { idempotencyKey: key });
check(again.id === first.id && again.idempotencyKey === key, `a start again with key ${key}: ${first.id}, then ${again.id}`);
const keyed = async (k) => ((await client.call("list", { idempotency_key: k })).result.sessions ?? []).map((x) => x.id);
check(JSON.stringify(await keyed(key)) === JSON.stringify([first.id]), `list by key: ${await keyed(key)}`);
const [a, b] = [await client.start("true"), await client.start("true")];
check(a.id !== b.id && a.idempotencyKey !== b.idempotencyKey && (await keyed(b.idempotencyKey))[0] === b.id, `fresh keys: ${a.idempotencyKey}, ${b.idempotencyKey}`);
const badKey = await client.start("true", { idempotencyKey: "" }).catch((e) => e);
check(badKey instanceof TypeError, `an empty key: ${badKey}`);
const keyKill = await first.kill();
check(keyKill.terminated === true, `kill of the keyed session: ${JSON.stringify(keyKill)}`);

// 100 MiB read back by cursor, byte-exact against the file the command wrote as it printed.
const size = 100 << 20;
const big = await client.start(`head -c ${size} /dev/urandom | tee ${data}/${mode}.bin`);
const done = await big.wait({ timeoutMs: 120_000 });
check(done.endedBy === "exit" && done.exitCode === 0, `big: ${JSON.stringify(done)}`);
const t0 = process.hrtime.bigint();
const spool = createHash("sha256");
let after = 0;
let reads = 0;
let bytes = 0;
for (;;) {
  const chunk = await big.read({ after });
  spool.update(chunk.data);
  bytes += chunk.data.length;
  reads += 1;
  after = chunk.nextCursor;
  if (chunk.eof) break;
}
const readSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
const file = createHash("sha256");
for await (const piece of createReadStream(`${data}/${mode}.bin`)) file.update(piece);
check(bytes === size && after === size, `read ${bytes} bytes, cursor ${after}, want ${size}`);
check(spool.digest("hex") === file.digest("hex"), "the bytes read back differ from the file");
const binary = client.binaryReads;
await big.forget();

// Lines from a cursor, and grep.
const seq = await client.start("seq 1 1000; printf 'last'");
const lines = [];
for await (const line of seq.lines({ after: 0 })) lines.push(line);
check(lines.length === 1001 && lines[0] === "1" && lines[999] === "1000" && lines[1000] === "last", `lines: ${lines.length}`);
const found = await seq.grep("^99[0-9]$");
check(found.length === 10 && found[0].lineNumber === 990 && found[0].isMatch, `grep: ${JSON.stringify(found[0])}`);

// Lines followed while they are printed; bytes through a stdin pipe, read back exactly.
const slowly = await client.start("for i in 1 2 3; do echo line $i; sleep 0.2; done");
const followed = [];
for await (const line of slowly.lines()) followed.push(line);
check(followed.join(",") === "line 1,line 2,line 3", `followed lines: ${followed}`);
const cat = await client.start("cat", { stdin: true });
const sent = Uint8Array.from([0, 1, 2, 255, 10, 0xc3]);
await cat.write(sent, { closeStdin: true });
check((await cat.wait({ timeoutMs: 10_000 })).exitCode === 0, "cat did not exit 0 after its stdin closed");
const echoed = await cat.read();
check(Buffer.compare(Buffer.from(echoed.data), Buffer.from(sent)) === 0 && echoed.eof, `stdin bytes came back as ${echoed.data}`);

// A wait that ends at a line.
const server = await client.start("sleep 0.3; echo ready on :8080; sleep 60");
check(server.started?.state === "running" && server.started.id === server.id, `started: ${JSON.stringify(server.started)}`);
const w = await server.wait({ until: "ready", timeoutMs: 10_000 });
check(w.endedBy === "match" && w.matched === "ready on :8080" && w.state === "running", `until: ${JSON.stringify(w)}`);
const quick = await client.start("echo quick-done");
await new Promise((resolve) => setTimeout(resolve, 300));
const late = await quick.wait({ until: "^quick", timeoutMs: 10_000 });
check(late.endedBy === "match" && late.matched === "quick-done" && late.cursor === 11 && late.exitCode === 0, `until after the end: ${JSON.stringify(late)}`);
const past = await quick.wait({ until: "^quick", after: 11, timeoutMs: 10_000 });
check(past.endedBy === "exit" && past.matched === null, `until after the cursor: ${JSON.stringify(past)}`);
const short = await server.wait({ until: "never printed", timeoutMs: 300 }).catch((e) => e);
check(short instanceof StockadeTimeoutError, `wait timeout: ${short}`);
await server.kill();

// A PTY: typing, and a resize the program sees.
const shell = await client.start("sh", { pty: { rows: 24, cols: 80 } });
await shell.resize(40, 120);
await shell.write("stty size; echo typed-$((6*7))\n");
const typed = await shell.wait({ until: "^typed-42", timeoutMs: 10_000 });
const sized = await shell.wait({ until: "40 120", timeoutMs: 10_000 });
check(typed.endedBy === "match" && sized.endedBy === "match", `pty: ${JSON.stringify(typed)}, ${JSON.stringify(sized)}`);
await shell.write("exit\n");
check((await shell.wait({ timeoutMs: 10_000 })).endedBy === "exit", "the PTY shell did not exit");

// A tree killed with nothing left.
const tree = await client.start("sleep 100 & sleep 100 & (sleep 100 &) ; echo up; wait");
await tree.wait({ until: "^up$", timeoutMs: 10_000 });
const report = await tree.kill();
const listed = (await client.sessions()).find((s) => s.id === tree.id);
check(report.terminated === true && report.survivors.length === 0, `kill: ${JSON.stringify(report)}`);
check(listed !== undefined && listed.processes === 0 && listed.state === "killed", `after kill: ${JSON.stringify(listed)}`);

// Errors carry the daemon's sentence.
const missing = await client.session("sh-999999").read().catch((e) => e);
check(missing instanceof NoSuchSessionError && missing instanceof StockadeError && missing.code === -32001 && /sh-999999/.test(missing.message), `error: ${missing}`);

client.close();
const mib = bytes / (1 << 20);
console.log(`${mode}: ok: ${mib} MiB byte-exact in ${reads} reads, ${readSeconds.toFixed(2)} s (${(mib / readSeconds).toFixed(0)} MiB/s, ${binary ? "binary" : "base64"} reads); tree of ${report.pids_signalled.length} killed, 0 left`);
