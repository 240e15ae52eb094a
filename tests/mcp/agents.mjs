// What an agent pays through Stockade's MCP door, driven with the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk, installed by tests/mcp/install-ts-deps.sh into target/mcp-ts):
// calls and text bytes for polling a build, waiting for a dev server, long waits kept alive by
// progress notifications, cancellation, bounded session lists, a cursor walk that rebuilds the
// log, and schemas a strict Ajv 2020 compiles.
//
//   node tests/mcp/agents.mjs SCENARIO --stockade BIN --home DIR
//
// Run by crates/stockade/tests/it/mcp_agents.rs. Each scenario asserts and prints `ok SCENARIO`
// plus one JSON line of measurements (`measured {...}`); a failure throws (exit status 1).
// `cost` prints the agent-cost table of docs/usage.md instead (scripts/agent-cost.sh).

import { createRequire } from "node:module";
import { readFileSync, readlinkSync, readdirSync } from "node:fs";
import { createConnection } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import assert from "node:assert/strict";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const require = createRequire(join(root, "target/mcp-ts/package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const Ajv2020 = require("ajv/dist/2020").default;

const args = process.argv.slice(2);
const scenario = args[0];
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const stockade = opt("--stockade");
const home = opt("--home");

/** An MCP client over stdio to `stockade --home H mcp`, counting calls and text bytes. With
 * `inherit`, the server starts in this process's directory with its whole environment, as an
 * agent launches it in a project (the SDK's default passes only HOME, PATH, USER and a few). */
async function connect({ inherit = false } = {}) {
  const transport = new StdioClientTransport({
    command: stockade,
    args: ["--home", home, "mcp", "--structured"],
    stderr: "inherit",
    ...(inherit ? { env: { ...process.env }, cwd: process.cwd() } : {}),
  });
  const client = new Client({ name: "stockade-agents-test", version: "1.0.0" });
  await client.connect(transport);
  const meter = { calls: 0, bytes: 0 };
  const call = async (name, a, options) => {
    const r = await client.callTool({ name, arguments: a }, undefined, options);
    meter.calls += 1;
    const text = r.content?.[0]?.text ?? "";
    meter.bytes += Buffer.byteLength(text);
    assert.ok(!r.isError, `${name}(${JSON.stringify(a)}) failed: ${text}`);
    return { text, s: r.structuredContent };
  };
  return { client, call, meter, close: () => client.close() };
}

const BUILD =
  'for i in $(seq 1 200); do echo "build step $i of 200: ok"; sleep 0.05; done';
const BUILD_OUTPUT = Array.from({ length: 200 }, (_, i) => `build step ${i + 1} of 200: ok\n`).join(
  "",
);

/** Poll a background build the recommended way (or forgetting the cursor). */
async function pollBuild({ forgetCursor }) {
  const c = await connect();
  try {
    let { s, text } = await c.call("exec_command", { cmd: BUILD, background: true });
    const id = s.id;
    let output = s.output;
    let continued = false;
    while (s.state === "running") {
      const a = forgetCursor
        ? { session_id: id, yield_time_ms: 30000 }
        : { session_id: id, after: s.next_cursor, yield_time_ms: 30000 };
      ({ s, text } = await c.call("read_output", a));
      continued ||= text.includes("Continued after cursor");
      output += s.output;
      assert.ok(c.meter.calls < 50, "polling never ends");
    }
    assert.equal(s.state, "exited");
    assert.equal(output, BUILD_OUTPUT, "the pages join into the build's output");
    if (forgetCursor) assert.ok(continued, "a read without after says it continued");
    const tail = await c.call("read_output", { session_id: id, mode: "tail", max_lines: 1 });
    assert.match(tail.s.output, /build step 200 of 200/, "mode tail still gives the end");
    return { calls: c.meter.calls - 1, bytes: c.meter.bytes - Buffer.byteLength(tail.text) };
  } finally {
    await c.close();
  }
}

/** Milliseconds between a `Listening … at <epoch ms>` line being printed and the answer. */
function lateness(line, answeredAt) {
  const m = /at (\d{13})/.exec(line);
  assert.ok(m, `no timestamp in ${line}`);
  return answeredAt - Number(m[1]);
}

const SERVER = 'sleep 2; echo "Listening on 127.0.0.1:8080 at $(date +%s%3N)"; sleep 120';

/** The bound on how late an `until` answer may come after its line (best of ATTEMPTS), and the
 * bound every attempt must meet (far inside the 30 s window: the wait ended at the line). On two
 * busy cores an attempt can be descheduled, so the best of five is held to the tight bound. */
const UNTIL_BOUND_MS = 200;
const UNTIL_EVERY_MS = 3000;
const ATTEMPTS = 5;

async function untilOnce(c, viaRead) {
  let r;
  if (viaRead) {
    r = await c.call("exec_command", { cmd: SERVER, background: true });
    r = await c.call("read_output", {
      session_id: r.s.id,
      after: r.s.next_cursor,
      until: "^Listening",
      yield_time_ms: 30000,
    });
    assert.match(r.s.output, /Listening/);
  } else {
    r = await c.call("exec_command", {
      cmd: SERVER,
      background: true,
      until: "Listening",
      yield_time_ms: 30000,
    });
    assert.match(r.text, /Matched: Listening on 127\.0\.0\.1:8080/);
  }
  const late = lateness(r.s.wait.matched.line, Date.now());
  assert.equal(r.s.state, "running");
  assert.equal(r.s.wait.ended_by, "match");
  assert.ok(r.s.wait.matched.cursor <= r.s.total_bytes);
  await c.call("kill_session", { session_id: r.s.id });
  assert.ok(late >= 0 && late <= UNTIL_EVERY_MS, `answered ${late} ms after the line`);
  return late;
}

async function untilScenario() {
  const c = await connect();
  try {
    const measured = {};
    for (const viaRead of [false, true]) {
      const lates = [];
      for (let i = 0; i < ATTEMPTS; i++) lates.push(await untilOnce(c, viaRead));
      const best = Math.min(...lates);
      assert.ok(best <= UNTIL_BOUND_MS, `until answered ${lates} ms after the line`);
      measured[viaRead ? "until_read_ms" : "until_exec_ms"] = lates;
    }
    return measured;
  } finally {
    await c.close();
  }
}

async function progressScenario() {
  const c = await connect();
  try {
    const { s } = await c.call("exec_command", {
      cmd: "while :; do echo tick; sleep 10; done",
      background: true,
    });
    const ticks = [];
    const started = Date.now();
    // No `timeout`: the SDK's default 60 s applies, reset by each progress notification.
    const r = await c.call(
      "read_output",
      { session_id: s.id, after: s.next_cursor, yield_time_ms: 90000 },
      { resetTimeoutOnProgress: true, onprogress: (p) => ticks.push({ at: Date.now(), p }) },
    );
    const ended = Date.now();
    const waited = ended - started;
    assert.ok(waited >= 89000, `waited ${waited} ms`);
    assert.equal(r.s.wait.ended_by, "window");
    assert.equal(r.s.state, "running");
    assert.ok(r.s.output.split("\n").filter((l) => l === "tick").length >= 7, "collected ticks");
    const times = [started, ...ticks.map((t) => t.at), ended];
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    const maxGap = Math.max(...gaps);
    assert.ok(maxGap <= 5000, `a progress gap of ${maxGap} ms (bound 5000)`);
    assert.match(ticks.at(-1).p.message ?? "", /bytes/, "progress says the bytes so far");
    for (let i = 1; i < ticks.length; i++) {
      assert.ok(ticks[i].p.progress > ticks[i - 1].p.progress, "progress increases");
    }
    await c.call("kill_session", { session_id: s.id });
    return { waited_ms: waited, notifications: ticks.length, max_gap_ms: maxGap };
  } finally {
    await c.close();
  }
}

/** The daemon's open Unix-socket descriptors (its listener and one per connection). */
function daemonSockets() {
  const pid = readFileSync(join(home, "daemon.lock"), "utf8").trim().split(/\s+/)[0];
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith("socket:")) n += 1;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

async function settledSockets(ms = 500) {
  let fewest = daemonSockets();
  const end = Date.now() + ms;
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 25));
    fewest = Math.min(fewest, daemonSockets());
  }
  return fewest;
}

async function eventually(what, check, ms = 30000) {
  const end = Date.now() + ms;
  while (!check()) {
    assert.ok(Date.now() < end, `never: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function cancelScenario() {
  const c = await connect();
  try {
    const { s } = await c.call("exec_command", {
      cmd: "while :; do echo tick; sleep 1; done",
      background: true,
    });
    // The exec_command's own daemon connection may still be closing: the baseline is the fewest
    // sockets seen over half a second, so the wait's connection is not mistaken for it.
    const base = await settledSockets();
    const abort = new AbortController();
    const started = Date.now();
    const pending = c
      .call(
        "read_output",
        { session_id: s.id, yield_time_ms: 120000 },
        { signal: abort.signal, timeout: 300000 },
      )
      .then(
        () => "answered",
        (e) => `rejected: ${e}`,
      );
    await eventually("the wait holds a daemon connection", () => daemonSockets() >= base + 1);
    await new Promise((r) => setTimeout(r, 1000));
    abort.abort("the agent changed its mind");
    const outcome = await pending;
    assert.match(outcome, /^rejected/, outcome);
    await eventually("the daemon stops waiting", () => daemonSockets() <= base);
    const stopped = Date.now() - started;
    assert.ok(stopped < 30000, `the wait went on for ${stopped} ms`);
    const r = await c.call("read_output", { session_id: s.id, mode: "tail" });
    assert.equal(r.s.state, "running", "cancelling stops the wait, not the session");
    await c.call("kill_session", { session_id: s.id });
    return { stopped_after_ms: stopped };
  } finally {
    await c.close();
  }
}

/** JSON-RPC straight to the daemon (to make many sessions fast). */
async function daemonCalls(requests) {
  const sock = createConnection(join(home, "stockade.sock"));
  await new Promise((ok, fail) => sock.once("connect", ok).once("error", fail));
  let buf = "";
  const answers = [];
  const done = new Promise((ok, fail) => {
    sock.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        answers.push(JSON.parse(buf.slice(0, i)));
        buf = buf.slice(i + 1);
        if (answers.length === requests.length) ok();
      }
    });
    sock.on("error", fail);
  });
  requests.forEach((r, i) =>
    sock.write(JSON.stringify({ jsonrpc: "2.0", id: i + 1, method: r.method, params: r.params }) + "\n"),
  );
  await done;
  sock.end();
  for (const a of answers) assert.ok(!a.error, JSON.stringify(a.error));
  return answers;
}

async function listScenario() {
  const c = await connect();
  try {
    // The MCP server starts the daemon; then 1,000 finished and 3 running sessions.
    await c.call("list_sessions", {});
    for (let batch = 0; batch < 10; batch++) {
      await daemonCalls(
        Array.from({ length: 100 }, (_, i) => ({
          method: "run",
          params: { command: `echo finished ${batch * 100 + i}` },
        })),
      );
    }
    const running = [];
    for (let i = 0; i < 3; i++) {
      const { s } = await c.call("exec_command", { cmd: `sleep 300 # running ${i}`, background: true });
      running.push(s.id);
    }
    const r = await c.call("list_sessions", {});
    const bytes = Buffer.byteLength(r.text);
    assert.ok(bytes <= 8192, `list_sessions answered ${bytes} bytes of text (bound 8192)`);
    assert.equal(r.s.sessions.length, 50);
    assert.deepEqual(
      r.s.sessions.slice(0, 3).map((x) => x.id),
      running,
      "running sessions come first",
    );
    assert.ok(r.s.sessions.slice(3).every((x) => x.state !== "running"));
    assert.ok(r.s.more >= 950, `more = ${r.s.more}`);
    const lines = r.text.split("\n");
    assert.match(lines[1], new RegExp(`^${running[0]} running`));
    assert.match(r.text, /\d+ more not shown/);
    const only = await c.call("list_sessions", { state: "running" });
    assert.deepEqual(only.s.sessions.map((x) => x.id), running);
    assert.equal(only.s.more, 0);
    for (const id of running) await c.call("kill_session", { session_id: id });
    return { list_text_bytes: bytes, more: r.s.more };
  } finally {
    await c.close();
  }
}

async function walkScenario() {
  const c = await connect();
  try {
    const expected = execFileSync("seq", ["1", "2000000"], { maxBuffer: 64 << 20 }).toString();
    const { s } = await c.call("exec_command", { cmd: "seq 1 2000000", yield_time_ms: 60000 });
    assert.equal(s.state, "exited");
    const results = {};
    for (const tokens of [1048576, 65536]) {
      let cursor = 0;
      let joined = "";
      let pages = 0;
      for (;;) {
        const r = await c.call("read_output", {
          session_id: s.id,
          after: cursor,
          max_output_tokens: tokens,
          max_lines: 1000000,
        });
        assert.equal(r.s.start_cursor ?? cursor, cursor);
        joined += r.s.output;
        pages += 1;
        assert.ok(r.s.next_cursor > cursor || r.s.next_cursor === r.s.total_bytes);
        if (r.s.next_cursor >= r.s.total_bytes) break;
        cursor = r.s.next_cursor;
        assert.ok(pages < 1000, "the walk never ends");
      }
      assert.equal(joined.length, expected.length, `${tokens}-token pages: length`);
      assert.ok(joined === expected, `${tokens}-token pages rebuild seq 1 2000000 byte for byte`);
      results[`pages_${tokens}_tokens`] = pages;
    }
    return { bytes: expected.length, ...results };
  } finally {
    await c.close();
  }
}

/** Every object inside a schema. */
function* subschemas(node) {
  if (Array.isArray(node)) {
    for (const x of node) yield* subschemas(x);
  } else if (node && typeof node === "object") {
    yield node;
    for (const x of Object.values(node)) yield* subschemas(x);
  }
}

/** `exec_command` without `workdir`: where it ran and what it saw (the test compares). */
async function whereScenario() {
  const c = await connect({ inherit: true });
  try {
    const { s } = await c.call("exec_command", { cmd: WHERE });
    assert.equal(s.state, "exited");
    return { output: s.output };
  } finally {
    await c.close();
  }
}

const WHERE = 'pwd; echo "FOO=$FOO"; echo "PATH=$PATH"; echo "VIRTUAL_ENV=$VIRTUAL_ENV"';

async function schemasScenario() {
  const c = await connect();
  try {
    const { tools } = await c.client.listTools();
    const listBytes = Buffer.byteLength(JSON.stringify(tools));
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    let compiled = 0;
    for (const t of tools) {
      for (const [kind, schema] of [
        ["input", t.inputSchema],
        ["output", t.outputSchema],
      ]) {
        assert.ok(schema, `${t.name} has an ${kind} schema`);
        try {
          ajv.compile(schema);
          compiled += 1;
        } catch (e) {
          assert.fail(`${t.name} ${kind} schema does not compile under strict Ajv 2020: ${e.message}`);
        }
        for (const node of subschemas(schema)) {
          if (node.type === "integer") {
            const where = `${t.name} ${kind}: ${JSON.stringify(node)}`;
            assert.ok(Number.isInteger(node.minimum) && Number.isInteger(node.maximum), where);
          }
          assert.ok(!Array.isArray(node.type), `${t.name} ${kind}: a type list`);
        }
        assert.ok(!/"format":"u?int/.test(JSON.stringify(schema)), `${t.name} ${kind}: int format`);
      }
    }
    // Real answers validate against the output schemas (the SDK checks too).
    const validate = (name) => ajv.compile(tools.find((t) => t.name === name).outputSchema);
    const run = await c.call("exec_command", { cmd: "echo hi" });
    assert.ok(validate("exec_command")(run.s), JSON.stringify(validate("exec_command").errors));
    const read = await c.call("read_output", { session_id: run.s.id, yield_time_ms: 10 });
    const v = validate("read_output");
    assert.ok(v(read.s), JSON.stringify(v.errors));
    const list = await c.call("list_sessions", {});
    const lv = validate("list_sessions");
    assert.ok(lv(list.s), JSON.stringify(lv.errors));
    // 25.5 KiB with every output schema: the per-session sandbox argument took the list past
    // 24, the retry keys (exec_command, write_stdin, list_sessions) past 25.
    assert.ok(listBytes <= 26112, `tools/list is ${listBytes} bytes (bound 26112)`);
    return { schemas_compiled: compiled, tools_list_bytes: listBytes };
  } finally {
    await c.close();
  }
}

async function buildScenario() {
  const recommended = await pollBuild({ forgetCursor: false });
  assert.ok(recommended.calls <= 5, `recommended polling took ${recommended.calls} calls (bound 5)`);
  assert.ok(recommended.bytes <= 8192, `recommended polling read ${recommended.bytes} B (bound 8192)`);
  const forgot = await pollBuild({ forgetCursor: true });
  assert.ok(forgot.bytes <= 12288, `forgetting the cursor read ${forgot.bytes} B (bound 12288)`);
  assert.ok(forgot.calls <= 5, `forgetting the cursor took ${forgot.calls} calls`);
  return { recommended, forgot };
}

/** A loud build (about 2 MB in 3 s) followed without a cursor, by `read_output` and by an empty
 * `write_stdin` (a poll): each answer shows the newest output since the last one and says what it
 * skipped, so following it takes a few calls, and no line is shown twice. */
const LOUD_BUILD =
  'for i in $(seq -w 1 30); do seq -f "step $i line %05g" 3000; sleep 0.1; done; echo "build failed"; exit 2';

async function loudOnce(c, poll) {
  let { s } = await c.call("exec_command", { cmd: LOUD_BUILD, background: true, yield_time_ms: 500 });
  const id = s.id;
  let cursor = s.next_cursor;
  const seen = new Set();
  const keep = (output) => {
    for (const line of output.split("\n")) {
      if (!/^step \d{2} line \d{5}$/.test(line)) continue;
      assert.ok(!seen.has(line), `${line} shown twice`);
      seen.add(line);
    }
  };
  keep(s.output);
  let skipped = 0;
  const calls = c.meter.calls;
  while (s.state === "running") {
    let text;
    ({ s, text } = await poll(id));
    assert.ok(Buffer.byteLength(text) <= 60000, `answer of ${Buffer.byteLength(text)} B`);
    assert.match(text, /^Continued after cursor \d+/m, text.slice(0, 400));
    if (s.start_cursor > cursor) {
      skipped += 1;
      assert.equal(s.notice.after, cursor, "the notice reads on from where the last answer ended");
      assert.equal(s.notice.omitted_bytes, s.start_cursor - cursor);
      assert.ok(s.notice.omitted_lines > 0, JSON.stringify(s.notice));
      assert.match(text, new RegExp(`read_output session_id=${id} after=${cursor}`));
    }
    keep(s.output);
    cursor = s.next_cursor;
    assert.ok(c.meter.calls - calls < 10, "following the loud build never ends");
  }
  assert.equal(s.state, "exited");
  assert.equal(s.code, 2);
  assert.match(s.output, /step 30 line 03000\nbuild failed\n$/, "the last answer ends with the build's end");
  assert.ok(skipped > 0, "a loud build skips to the newest output");
  return { calls: c.meter.calls - calls + 1, skipped };
}

async function loudScenario() {
  const c = await connect();
  try {
    const read = await loudOnce(c, (id) => c.call("read_output", { session_id: id, yield_time_ms: 10000 }));
    const write = await loudOnce(c, (id) =>
      c.call("write_stdin", { session_id: id, chars: "", yield_time_ms: 10000 }),
    );
    for (const r of [read, write]) assert.ok(r.calls <= 4, `following the loud build took ${r.calls} calls`);
    return { read, write };
  } finally {
    await c.close();
  }
}

/** What a plain "run and return all output" tool costs: one call that returns when the command
 * ends (or its timeout kills it), with every byte printed. */
function plainTool(cmd, timeoutS) {
  const started = Date.now();
  let out;
  try {
    out = execFileSync("timeout", [String(timeoutS), "sh", "-c", cmd], {
      maxBuffer: 256 << 20,
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (e) {
    out = Buffer.concat([e.stdout ?? Buffer.alloc(0), e.stderr ?? Buffer.alloc(0)]);
  }
  const header = `Exit code: 0\nOutput:\n`;
  return { calls: 1, bytes: out.length + header.length, seconds: (Date.now() - started) / 1000 };
}

/** The agent-cost table of docs/usage.md: calls, text bytes and seconds per task, Stockade vs plain. */
async function costScenario() {
  const rows = [];
  const timed = async (f) => {
    const started = Date.now();
    const r = await f();
    return { ...r, seconds: (Date.now() - started) / 1000 };
  };
  // 1-2: follow a 10 s build that prints 200 lines.
  const follow = await timed(() => pollBuild({ forgetCursor: false }));
  rows.push(["follow a 10 s build printing 200 lines (`after` = `next_cursor`, `yield_time_ms` 30000)", follow, plainTool(BUILD, 600)]);
  const forgot = await timed(() => pollBuild({ forgetCursor: true }));
  rows.push(["the same, forgetting `after`", forgot, plainTool(BUILD, 600)]);
  // 3: a build that prints a lot; the agent wants the verdict.
  const LOUD =
    'for i in $(seq 1 100); do seq -f "src/module_%g.rs: compiling with -O2 -g, 0 warnings so far" 200; sleep 0.1; done; echo "error[E0425]: cannot find value x"; exit 1';
  const loud = await timed(async () => {
    const c = await connect();
    try {
      const r = await c.call("exec_command", { cmd: LOUD, yield_time_ms: 60000 });
      assert.equal(r.s.state, "exited");
      assert.match(r.s.output, /E0425/);
      return { calls: c.meter.calls, bytes: c.meter.bytes };
    } finally {
      await c.close();
    }
  });
  rows.push(["a 10 s build printing 20,000 lines that fails at the end (`exec_command`, read the verdict)", loud, plainTool(LOUD, 600)]);
  // 4: a dev server, until it is ready.
  const DEV = 'sleep 2; echo "Listening on 127.0.0.1:8080 at $(date +%s%3N)"; while :; do echo "GET / 200"; sleep 1; done';
  const dev = await timed(async () => {
    const c = await connect();
    try {
      const r = await c.call("exec_command", { cmd: DEV, background: true, until: "Listening", yield_time_ms: 60000 });
      assert.equal(r.s.wait.ended_by, "match");
      const calls = c.meter.calls;
      const bytes = c.meter.bytes;
      await c.call("kill_session", { session_id: r.s.id });
      return { calls, bytes };
    } finally {
      await c.close();
    }
  });
  rows.push(["start a dev server and wait until it says Listening (`background`, `until`)", dev, { ...plainTool(DEV, 60), note: "never returns by itself: cut by a 60 s timeout" }]);
  // 5: a 20 MiB log, searched.
  const LOG =
    'i=0; while [ $i -lt 40 ]; do yes "INFO request handled in 3 ms by worker pool 7, nothing to report" | head -c 524288; echo; echo "ERROR disk quota exceeded on shard $i"; i=$((i+1)); done';
  const big = await timed(async () => {
    const c = await connect();
    try {
      const r = await c.call("exec_command", { cmd: LOG, yield_time_ms: 60000, max_output_tokens: 256 });
      assert.equal(r.s.state, "exited");
      const g = await c.call("grep_output", { session_id: r.s.id, pattern: "^ERROR" });
      assert.equal(g.s.matches, 40);
      return { calls: c.meter.calls, bytes: c.meter.bytes };
    } finally {
      await c.close();
    }
  });
  rows.push(["a 20 MiB log: find its errors (`exec_command` with a small view, then `grep_output ^ERROR`)", big, plainTool(LOG, 600)]);

  const kb = (b) => (b < 10240 ? `${(b / 1024).toFixed(1)} KB` : `${Math.round(b / 1024).toLocaleString("en")} KB`);
  const lines = [
    "| task | Stockade calls | Stockade text | plain tool calls | plain tool text |",
    "| --- | ---: | ---: | ---: | ---: |",
  ];
  for (const [task, st, pl] of rows) {
    const note = pl.note ? ` (${pl.note})` : "";
    lines.push(`| ${task} | ${st.calls} | ${kb(st.bytes)} in ${st.seconds.toFixed(1)} s | ${pl.calls} | ${kb(pl.bytes)} in ${pl.seconds.toFixed(1)} s${note} |`);
  }
  console.log(lines.join("\n"));
  return Object.fromEntries(rows.map(([t, st, pl]) => [t, { stockade: st, plain: pl }]));
}

const scenarios = {
  build: buildScenario,
  loud: loudScenario,
  until: untilScenario,
  progress: progressScenario,
  cancel: cancelScenario,
  list: listScenario,
  walk: walkScenario,
  schemas: schemasScenario,
  cost: costScenario,
  where: whereScenario,
};

const run = scenarios[scenario];
if (!run) {
  console.error(`usage: agents.mjs {${Object.keys(scenarios).join("|")}} --stockade BIN --home DIR`);
  process.exit(2);
}
const measured = await run();
console.log(`ok ${scenario}`);
console.log(`measured ${JSON.stringify(measured)}`);
process.exit(0);
