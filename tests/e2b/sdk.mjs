// Drives `stockade daemon run --e2b` with E2B's unmodified JS SDK in debug mode (which talks to
// http://localhost:49983), as the e2b tests run it: inside a private network and PID namespace,
// so nothing else holds the port and everything started here dies with it.
//
// Usage: node sdk.mjs STOCKADE_BIN [SCENARIO...]. The same scenarios as sdk.py: starts the daemon
// (its own home, working directory and environment), prints one `ok NAME facts` line per
// scenario that held, stops the daemon; a failed scenario throws (non-zero exit).
// `client-start` and `client-connect PID` are the two halves of the reconnect scenario, each a
// separate process (a client restart).

import { spawn, execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createRequire } from 'node:module'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

process.env.E2B_DEBUG = 'true'
const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(path.join(here, '../../target/e2b-js/package.json'))
const { Sandbox, TimeoutError } = require('e2b')

const MIB = 1024 * 1024
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
// Debug mode sends no access token; a platform hands the SDK one with the sandbox, and the SDK
// then builds the sandbox as here (its `create` does the same with the API's answer).
async function sandbox() {
  const token = process.env.STOCKADE_E2B_TOKEN
  if (!token) throw new Error('no STOCKADE_E2B_TOKEN: the door always has a token')
  return new Sandbox({ sandboxId: 'debug_sandbox_id', envdVersion: '99.99.99', envdAccessToken: token })
}
function assert(cond, ...what) {
  if (!cond) throw new Error(`assertion failed: ${what.map((w) => JSON.stringify(w)).join(' ')}`)
}

async function echo(sb) {
  let r = await sb.commands.run('echo hello; echo oops >&2')
  assert(r.stdout === 'hello\n' && r.stderr === 'oops\n' && r.exitCode === 0, r)
  r = await sb.commands.run('cd /tmp && pwd && echo $GREETING', { envs: { GREETING: 'hi' }, cwd: '/' })
  assert(r.stdout === '/tmp\nhi\n', r)
  let code
  try {
    await sb.commands.run('exit 7')
  } catch (e) {
    code = e.exitCode
  }
  assert(code === 7, code)
  console.log('ok echo')
}

async function bigOutput(sb, ctx) {
  const digest = createHash('sha256')
  let size = 0
  const r = await sb.commands.run("seq -f '%015g' 1 6553600", {
    timeoutMs: 600_000,
    onStdout: (s) => {
      const b = Buffer.from(s)
      digest.update(b)
      size += b.length
    },
  })
  assert(r.exitCode === 0, r.exitCode)
  assert(size === 100 * MIB, size)
  const spools = []
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name === 'output.log' && fs.statSync(p).size === size) spools.push(p)
    }
  }
  walk(path.join(ctx.home, 'spool'))
  assert(spools.length === 1, spools)
  const spool = createHash('sha256').update(fs.readFileSync(spools[0])).digest('hex')
  const got = digest.digest('hex')
  assert(spool === got, spool, got)
  console.log(`ok big_output bytes=${size} sha256=${got.slice(0, 16)}`)
}

async function reconnect(sb, ctx) {
  const me = [process.argv[1], ctx.bin]
  const pid = Number(execFileSync(process.execPath, [...me, 'client-start']).toString().trim())
  const out = execFileSync(process.execPath, [...me, 'client-connect', String(pid)]).toString()
  const lines = out.split('\n').filter((l) => l)
  const want = Array.from({ length: 100 }, (_, i) => `line${i + 1}`)
  assert(JSON.stringify(lines) === JSON.stringify(want), lines.slice(0, 5))
  console.log(`ok reconnect lines=${lines.length}`)
}

async function clientStart() {
  const sb = await sandbox()
  const h = await sb.commands.run('for i in $(seq 1 100); do echo line$i; sleep 0.01; done', { background: true })
  console.log(h.pid)
  await h.disconnect()
}

async function clientConnect(pid) {
  const sb = await sandbox()
  const h = await sb.commands.connect(pid)
  const r = await h.wait()
  process.stdout.write(r.stdout)
}

async function stdin(sb) {
  const h = await sb.commands.run('cat', { background: true, stdin: true })
  await sb.commands.sendStdin(h.pid, 'first\n')
  await sb.commands.sendStdin(h.pid, 'second\n')
  await sb.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert(r.stdout === 'first\nsecond\n', r)
  console.log('ok stdin')
}

async function pty(sb) {
  let seen = ''
  const h = await sb.pty.create({ rows: 24, cols: 80, onData: (d) => (seen += Buffer.from(d).toString()) })
  const until = async (text) => {
    const deadline = Date.now() + 10_000
    while (!seen.includes(text)) {
      assert(Date.now() < deadline, text, seen.slice(-500))
      await sleep(50)
    }
  }
  const type = (s) => sb.pty.sendInput(h.pid, new TextEncoder().encode(s))
  await type('stty size\n')
  await until('24 80')
  await sb.pty.resize(h.pid, { rows: 40, cols: 100 })
  await type('stty size\n')
  await until('40 100')
  await type('exit\n')
  await h.wait()
  console.log('ok pty sizes=24x80,40x100')
}

function census(marker) {
  let n = 0
  for (const p of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue
    try {
      if (fs.readFileSync(`/proc/${p}/cmdline`).includes(marker)) n++
    } catch {}
  }
  return n
}

async function kill(sb) {
  const marker = '318.25'
  const h = await sb.commands.run(
    `setsid sleep ${marker} & setsid sh -c 'sleep ${marker}' & sleep ${marker}`,
    { background: true }
  )
  let deadline = Date.now() + 10_000
  while (census(marker) < 3) {
    assert(Date.now() < deadline, census(marker))
    await sleep(50)
  }
  assert(await sb.commands.kill(h.pid))
  deadline = Date.now() + 5_000
  while (census(marker) && Date.now() < deadline) await sleep(50)
  const left = census(marker)
  assert(left === 0, left)
  assert(!(await sb.commands.kill(h.pid)))
  console.log(`ok kill left=${left}`)
}

// A command and a PTY past their timeoutMs: the SDK raises its timeout, and the command's whole
// tree is gone within 1 s of it (envd ends the process at the deadline).
async function timeout(sb) {
  const facts = []
  for (const kind of ['command', 'pty']) {
    const marker = kind === 'command' ? '293.5' : '294.5'
    const started = Date.now()
    let raised = null
    try {
      if (kind === 'command') {
        await sb.commands.run(`setsid sleep ${marker} & sleep ${marker}`, { timeoutMs: 2000 })
      } else {
        const h = await sb.pty.create({ rows: 24, cols: 80, onData: () => {}, timeoutMs: 2000 })
        await sb.pty.sendInput(h.pid, new TextEncoder().encode(`sleep ${marker}\n`))
        await h.wait()
      }
    } catch (e) {
      assert(e instanceof TimeoutError, e)
      raised = (Date.now() - started) / 1000
    }
    assert(raised !== null && raised > 1.5 && raised < 10, kind, raised)
    const deadline = Date.now() + 1000
    while (census(marker) && Date.now() < deadline) await sleep(50)
    assert(census(marker) === 0, kind, census(marker))
    facts.push(`${kind}_raised_after=${raised.toFixed(1)}s`)
  }
  console.log(`ok timeout ${facts.join(' ')} left=0`)
}

// The SDK's signed download and upload URLs, fetched with no token (as a browser would):
// accepted with and without an expiration; an altered one refused.
async function signed(sb, ctx) {
  const file = path.join(ctx.scratch, 'signed.txt')
  const data = 'signed bytes\n'
  await sb.files.write(file, data)
  for (const url of [await sb.downloadUrl(file), await sb.downloadUrl(file, { useSignatureExpiration: 60 })]) {
    const r = await fetch(url)
    const text = await r.text()
    assert(r.status === 200 && text === data, url, r.status, text)
  }
  const up = path.join(ctx.scratch, 'signed-up.txt')
  for (const url of [await sb.uploadUrl(up), await sb.uploadUrl(up, { useSignatureExpiration: 60 })]) {
    const form = new FormData()
    form.append('file', new Blob(['uploaded\n']), 'signed-up.txt')
    const r = await fetch(url, { method: 'POST', body: form })
    assert(r.status === 200, r.status, await r.text())
    assert((await sb.files.read(up)) === 'uploaded\n')
  }
  const altered = (await sb.downloadUrl(file)).replace('signed.txt', 'signed-up.txt')
  const r = await fetch(altered)
  assert(r.status === 401, altered, r.status)
  console.log('ok signed download=2 upload=2 refused=1')
}

// A command's environment is envd's: none of the daemon's own variables; /init's envVars (as a
// platform sets them) under the request's envs.
async function env(sb) {
  let r = await sb.commands.run('env')
  const names = new Set(r.stdout.split('\n').filter((l) => l.includes('=')).map((l) => l.split('=')[0]))
  for (const own of ['STOCKADE_HOME', 'DAEMON_ONLY_VAR']) assert(!names.has(own), own, r.stdout)
  for (const want of ['PATH', 'HOME', 'USER']) assert(names.has(want), want, r.stdout)
  r = await sb.commands.run('echo $FROM_INIT', { envs: { FROM_INIT: 'request' } })
  assert(r.stdout === 'request\n', r.stdout)
  console.log(`ok env names=${names.size} leaked=0`)
}

// What the door does not store is refused in a sentence, never dropped: metadata; no file is
// left behind.
async function refusals(sb, ctx) {
  const file = path.join(ctx.scratch, 'refused.txt')
  for (const [opts, words] of [[{ metadata: { owner: 'me' } }, 'metadata']]) {
    let refused = null
    try {
      await sb.files.write(file, 'data\n', opts)
    } catch (e) {
      refused = String(e)
    }
    assert(refused !== null && refused.includes(words), opts, refused)
    assert(!fs.existsSync(file), opts)
  }
  console.log('ok refusals metadata=refused')
}

// write({ gzip: true }) is stored decoded; read with and without gzip gives it back.
async function gzip(sb, ctx) {
  const file = path.join(ctx.scratch, 'gz.txt')
  const data = 'compressible '.repeat(10000)
  await sb.files.write(file, data, { gzip: true })
  assert(fs.readFileSync(file, 'utf8') === data, 'stored decoded')
  assert((await sb.files.read(file)) === data)
  assert((await sb.files.read(file, { gzip: true })) === data)
  console.log(`ok gzip bytes=${data.length} stored=decoded`)
}

// 20 runs of `mkdir -p a/b/c` under a recursive watch: every directory is seen created (the door
// adds a new directory's watch, then reports what appeared in it meanwhile).
async function watchMkdir(sb, ctx) {
  for (let run = 0; run < 20; run++) {
    const d = path.join(ctx.scratch, `deep${run}`)
    fs.mkdirSync(d)
    const seen = new Set()
    const h = await sb.files.watchDir(d, (e) => e.type === 'create' && seen.add(e.name), { recursive: true })
    await sb.commands.run(`mkdir -p ${d}/a/b/c && touch ${d}/a/b/c/f`)
    const want = ['a', 'a/b', 'a/b/c', 'a/b/c/f']
    const deadline = Date.now() + 10_000
    while (!want.every((w) => seen.has(w))) {
      assert(Date.now() < deadline, run, want.filter((w) => !seen.has(w)), [...seen])
      await sleep(20)
    }
    await h.stop()
  }
  console.log('ok watch_mkdir runs=20 missed=0')
}

async function list(sb) {
  const h = await sb.commands.run('sleep 30', { background: true })
  const procs = await sb.commands.list()
  const mine = procs.filter((p) => p.pid === h.pid)
  assert(mine.length === 1, procs)
  assert(mine[0].cmd === '/bin/bash' && mine[0].args.at(-1) === 'sleep 30', mine)
  await sb.commands.kill(h.pid)
  assert((await sb.commands.list()).every((p) => p.pid !== h.pid))
  console.log(`ok list processes=${procs.length}`)
}

async function files(sb, ctx) {
  const d = path.join(ctx.scratch, 'files')
  await sb.files.write(`${d}/a.txt`, 'hello')
  await sb.files.write(`${d}/b.bin`, new Uint8Array([0, 255, 98]).buffer)
  assert((await sb.files.read(`${d}/a.txt`)) === 'hello')
  const bytes = await sb.files.read(`${d}/b.bin`, { format: 'bytes' })
  assert(Buffer.from(bytes).equals(Buffer.from([0, 255, 98])), [...bytes])
  const names = (await sb.files.list(d)).map((e) => e.name).sort()
  assert(JSON.stringify(names) === '["a.txt","b.bin"]', names)
  assert(await sb.files.exists(`${d}/a.txt`))
  await sb.files.remove(`${d}/a.txt`)
  assert(!(await sb.files.exists(`${d}/a.txt`)))
  await sb.files.makeDir(`${d}/sub`)
  await sb.files.rename(`${d}/b.bin`, `${d}/sub/c.bin`)
  const sub = (await sb.files.list(`${d}/sub`)).map((e) => e.name)
  assert(JSON.stringify(sub) === '["c.bin"]', sub)
  console.log('ok files')
}

// As root, a command run as `nobody` is nobody's (uid, HOME, USER; cwd their home, or / when it
// is not a directory), a file written as nobody is nobody's, and a user with no account is
// refused with a sentence.
async function user(sb, ctx) {
  const [, , uid, , , dir] = execFileSync('getent', ['passwd', 'nobody']).toString().trim().split(':')
  const r = await sb.commands.run('id -un; id -u; echo $HOME $USER; pwd', { user: 'nobody' })
  const home = fs.existsSync(dir) && fs.statSync(dir).isDirectory() ? dir : '/'
  const want = `nobody\n${uid}\n${dir} nobody\n${home}\n`
  assert(r.stdout === want, r.stdout, want)
  const f = path.join(ctx.scratch, 'owned', 'by-nobody.txt')
  await sb.files.write(f, 'mine', { user: 'nobody' })
  const owners = new Set([f, path.dirname(f)].map((p) => String(fs.statSync(p).uid)))
  assert(owners.size === 1 && owners.has(uid), [...owners])
  let refused = ''
  try {
    await sb.commands.run('true', { user: 'no-such-user-e2b' })
  } catch (e) {
    refused = String(e.message)
  }
  assert(refused.includes('user no-such-user-e2b does not exist'), refused)
  console.log(`ok user uid=${uid}`)
}

const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length

// files.watchDir sees a file created, written, renamed, chmod'ed and removed (each by name and
// type); after 20 watch/stop cycles the daemon holds no more descriptors than before, within a
// few.
async function watch(sb, ctx) {
  const d = path.join(ctx.scratch, 'watched')
  fs.mkdirSync(d)
  const seen = new Set()
  const h = await sb.files.watchDir(d, (e) => seen.add(`${e.name} ${e.type}`))
  await sb.files.write(`${d}/new.txt`, 'one')
  await sb.commands.run(`echo more >> ${d}/new.txt && chmod 600 ${d}/new.txt`)
  await sb.files.rename(`${d}/new.txt`, `${d}/moved.txt`)
  await sb.files.remove(`${d}/moved.txt`)
  const want = ['new.txt create', 'new.txt write', 'new.txt chmod', 'new.txt rename',
    'moved.txt create', 'moved.txt remove']
  const deadline = Date.now() + 10_000
  while (!want.every((w) => seen.has(w))) {
    assert(Date.now() < deadline, want.filter((w) => !seen.has(w)), [...seen])
    await sleep(50)
  }
  await h.stop()
  const before = fdCount(ctx.daemon)
  for (let i = 0; i < 20; i++) await (await sb.files.watchDir(d, () => {})).stop()
  const until = Date.now() + 5_000
  while (fdCount(ctx.daemon) > before + 3 && Date.now() < until) await sleep(50)
  const after = fdCount(ctx.daemon)
  assert(after <= before + 3, before, after)
  console.log(`ok watch events=${seen.size} fds_before=${before} fds_after=${after}`)
}

const SCENARIOS = { echo, big_output: bigOutput, reconnect, stdin, pty, kill, list, files, watch, user, timeout, signed, env, refusals, gzip, watch_mkdir: watchMkdir }

// `stockade daemon run --e2b` from another directory, with another environment.
function startDaemon(bin, home) {
  // DAEMON_ONLY_VAR: a variable of the daemon's own, which no command may see (the env scenario).
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin', STOCKADE_HOME: home, HOME: home, DAEMON_ONLY_VAR: 'leak' }
  // The TLS set-up (tls-ns.sh) runs the daemon in its own network namespace, on its address.
  const wrap = (process.env.STOCKADE_E2B_WRAP ?? '').split(' ').filter((w) => w)
  const door = (process.env.STOCKADE_E2B_ARGS ?? '--e2b').split(' ').filter((w) => w)
  const argv = [...wrap, bin, 'daemon', 'run', ...door]
  const d = spawn(argv[0], argv.slice(1), { cwd: home, env, stdio: ['ignore', 'ignore', 'pipe'] })
  return new Promise((resolve, reject) => {
    let err = ''
    const timer = setTimeout(() => reject(new Error(`the daemon did not start: ${err}`)), 30_000)
    d.stderr.on('data', (b) => {
      err += b
      if (err.includes('listening on')) {
        clearTimeout(timer)
        // The door always has a token: without --token-file, the one it made in its home.
        if (!door.includes('--token-file')) {
          process.env.STOCKADE_E2B_TOKEN = fs.readFileSync(path.join(home, 'e2b-token'), 'utf8').trim()
        }
        resolve(d)
      }
    })
    d.on('exit', (code) => reject(new Error(`the daemon exited (${code}): ${err}`)))
  })
}

async function main() {
  const [bin, ...names] = process.argv.slice(2)
  if (names[0] === 'client-start') return clientStart()
  if (names[0] === 'client-connect') return clientConnect(Number(names[1]))
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-home-'))
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-scratch-'))
  const d = await startDaemon(bin, home)
  try {
    const sb = await sandbox()
    const ctx = { home, scratch, bin, daemon: d.pid }
    for (const name of names.length ? names : Object.keys(SCENARIOS)) await SCENARIOS[name](sb, ctx)
  } finally {
    const exited = new Promise((r) => d.on('exit', r))
    d.kill('SIGTERM')
    await Promise.race([exited, sleep(20_000)])
    fs.rmSync(home, { recursive: true, force: true })
    fs.rmSync(scratch, { recursive: true, force: true })
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  }
)
