// The client: a connection to the local daemon (started on demand by the bundled binary, exactly
// as the CLI starts it) or to a remote daemon's WebSocket door, and the calls that start commands.
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { lstatSync, readFileSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { binaryPath } from "./binary.js";
import { CommandFailedError, ConnectionLostError, DaemonUnavailableError, StockadeError, StockadeTimeoutError } from "./errors.js";
import { Session, toRunResult, type RunResult } from "./session.js";
import { NotSentError, SocketTransport, Transport, WebSocketTransport, type Answer } from "./transport.js";

export interface ClientOptions {
  /** State directory of the local daemon (`--home`); default the binary's (`STOCKADE_HOME`, else ~/.local/state/stockade). */
  home?: string;
  /** A remote daemon's door, `wss://HOST:PORT` (or `ws://` on loopback). No auto-start. */
  remote?: string;
  /** With `remote`: the file holding the bearer token (default `STOCKADE_TOKEN_FILE`). Mode 0600. */
  tokenFile?: string;
  /** With a `wss://` remote: PEM file of the CA that signed the daemon's certificate (default `STOCKADE_CA_FILE`, else the system's roots). */
  caFile?: string;
  /** The stockade executable to start the local daemon with; default the one npm installed. */
  binary?: string;
  /** How long connecting (and starting the daemon) may take, in ms; default 60 000. */
  timeoutMs?: number;
}

export interface RunOptions {
  /** Where the command runs; relative to `process.cwd()`. Default: `process.cwd()` (a local daemon). */
  cwd?: string;
  /** Added on top of this process's environment (a local daemon), which the command starts from, as with `child_process`. */
  env?: Record<string, string>;
  /** Aborting it terminates the command's tree and rejects `run` with the signal's reason. */
  signal?: AbortSignal;
  /** The daemon terminates the command's tree after this long; then a `StockadeTimeoutError`. */
  timeoutMs?: number;
  /** Throw a `CommandFailedError` when the command does not exit 0. */
  check?: boolean;
  /** The shell that runs the command string; default `/bin/sh`. */
  shell?: string;
  /** At most this many bytes of output in the answer (its tail); default 50 KiB. */
  maxBytes?: number;
}

export interface StartOptions {
  /** Where the command runs; relative to `process.cwd()`. Default: `process.cwd()` (a local daemon). */
  cwd?: string;
  /** Added on top of this process's environment (a local daemon). */
  env?: Record<string, string>;
  /** Run on a new pseudo-terminal of this size. */
  pty?: { rows: number; cols: number };
  /** Give the command a stdin pipe that `write` feeds (without `pty`). */
  stdin?: boolean;
  timeoutMs?: number;
  /** With `waitMs`: stop waiting at the first output line matching this regex. */
  until?: string;
  /** Wait up to this long before answering (earlier if it exits, or at an `until` line). */
  waitMs?: number;
  shell?: string;
  /**
   * The start's idempotency key (1 to 128 printable ASCII characters); default a fresh one. A
   * start with the key of a session the daemon keeps answers that session and starts nothing.
   */
  idempotencyKey?: string;
}

/** One connection to a stockade daemon; requests on it run concurrently. */
export class Client {
  private readonly options: ClientOptions;
  private transport: Transport | null = null;
  private connecting: Promise<Transport> | null = null;
  /** Whether the daemon answers binary raw reads; null until the first raw read tells. */
  binaryReads: boolean | null = process.env.STOCKADE_NO_BINARY_READ === "1" ? false : null;

  constructor(options: ClientOptions = {}) {
    this.options = options;
  }

  /** Connects now (otherwise the first call does). Starts the local daemon if none runs. */
  async connect(): Promise<void> {
    await this.ensure();
  }

  close(): void {
    this.transport?.close();
    this.transport = null;
    this.connecting = null;
  }

  // Node 20.4 and later define the symbol (`await using client = new Client()`).
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  /**
   * Runs `command` in the foreground and answers once it has exited (one bounded answer). With a
   * local daemon it runs in this process's directory and environment, as `child_process` runs
   * commands; aborting `options.signal` terminates it.
   */
  async run(command: string, options: RunOptions = {}): Promise<RunResult> {
    checkArgs("run", command, options);
    const params = this.startParams(command, options);
    setIf(params, "timeout_ms", options.timeoutMs);
    setIf(params, "shell", options.shell);
    setIf(params, "max_bytes", options.maxBytes);
    const answer = options.signal === undefined ? await this.call("run", params) : await this.abortable(params, options.signal);
    const result = toRunResult(answer.result, command);
    if (result.state === "timed_out") {
      throw new StockadeTimeoutError(`the command ran past its time limit of ${options.timeoutMs} ms and was terminated (session ${result.id})`, result);
    }
    if (options.check && result.exitCode !== 0) {
      throw new CommandFailedError(`the command ended ${describe(result)} (session ${result.id})`, result);
    }
    return result;
  }

  /** `command`, `cwd` and the environment: the caller's world for a local daemon, the daemon's for a remote one. */
  private startParams(command: string, options: { cwd?: string; env?: Record<string, string> }): Record<string, unknown> {
    const params: Record<string, unknown> = { command };
    if (this.options.remote === undefined) {
      params.cwd = resolvePath(process.cwd(), options.cwd ?? ".");
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
      params.base_env = env;
    } else {
      setIf(params, "cwd", options.cwd);
    }
    setIf(params, "env", options.env);
    return params;
  }

  /**
   * A foreground run on a connection of its own, so that an abort can end it: the daemon ends a
   * foreground run whose connection closes, and the run's key finds it to make sure.
   */
  private async abortable(params: Record<string, unknown>, signal: AbortSignal): Promise<Answer> {
    signal.throwIfAborted();
    const key = idempotencyKey(undefined);
    params.idempotency_key = key;
    const transport = await this.open();
    const call = transport.request("run", params);
    const abort: { killed: Promise<void> | null } = { killed: null };
    const onAbort = (): void => {
      // Closing the connection rejects `call` at once; the key makes sure of the end.
      transport.close();
      abort.killed = this.terminateKeyed(key);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await call;
    } catch (e) {
      if (abort.killed === null) throw e;
      await abort.killed;
      throw signal.reason;
    } finally {
      signal.removeEventListener("abort", onAbort);
      transport.close();
    }
  }

  /** Terminates the session started with `key`, if it runs (best effort: the daemon may have ended it first). */
  private async terminateKeyed(key: string): Promise<void> {
    try {
      const listed = (await this.call("list", { idempotency_key: key, state: "running" })).result;
      for (const s of (listed.sessions ?? []) as { id?: unknown }[]) {
        if (typeof s.id === "string") await this.call("kill", { id: s.id });
      }
    } catch {
      // Nothing left to terminate.
    }
  }

  /** Starts `command` in the background and answers with its `Session`. */
  async start(command: string, options: StartOptions = {}): Promise<Session> {
    checkArgs("start", command, options);
    const params = this.startParams(command, options);
    params.background = true;
    setIf(params, "shell", options.shell);
    setIf(params, "timeout_ms", options.timeoutMs);
    if (options.pty !== undefined) params.pty = { rows: options.pty.rows, cols: options.pty.cols };
    if (options.stdin) params.stdin = "pipe";
    setIf(params, "until", options.until);
    setIf(params, "yield_ms", options.waitMs);
    const key = idempotencyKey(options.idempotencyKey);
    params.idempotency_key = key;
    let result;
    try {
      result = (await this.call("run", params)).result;
    } catch (e) {
      if (e instanceof ConnectionLostError) {
        // The request may have reached the daemon: say how to find what it started.
        const lost = new ConnectionLostError(`${e.message}; the command may have started: see \`stockade ps --key ${key}\`, or start it again with { idempotencyKey: "${key}" } to get its session`);
        lost.idempotencyKey = key;
        throw lost;
      }
      throw e;
    }
    const pid = typeof result.pid === "number" ? result.pid : null;
    const session = new Session(this, String(result.id), pid, toRunResult(result, command));
    session.idempotencyKey = key;
    return session;
  }

  /** The session with this id (no call is made). */
  session(id: string): Session {
    return new Session(this, id, null);
  }

  /** Every session the daemon keeps (wire `list`). */
  async sessions(): Promise<Record<string, unknown>[]> {
    const result = (await this.call("list", {})).result;
    return (result.sessions ?? []) as Record<string, unknown>[];
  }

  /** The daemon's `status`: pid, socket, home, version, containment, sessions. */
  async status(): Promise<Record<string, unknown>> {
    return (await this.call("status", {})).result;
  }

  /** One JSON-RPC call; for methods this class has no wrapper for. */
  async call(method: string, params: Record<string, unknown>): Promise<Answer> {
    const transport = await this.ensure();
    try {
      return await transport.request(method, params);
    } catch (e) {
      if (!(e instanceof NotSentError)) throw e;
      // The daemon went away since the last call (stopped, restarted) and nothing was sent:
      // send it on a new connection, to the daemon started again if need be.
      return (await this.ensure()).request(method, params);
    }
  }

  private ensure(): Promise<Transport> {
    if (this.transport !== null && !this.transport.closed) return Promise.resolve(this.transport);
    if (this.transport !== null) {
      // The connection was lost (e.g. the daemon restarted): the next call connects again, and a
      // local daemon that is gone is started again, as the CLI would.
      this.transport = null;
      this.connecting = null;
      if (process.env.STOCKADE_NO_BINARY_READ !== "1") this.binaryReads = null;
    }
    if (this.connecting === null) {
      this.connecting = this.open().then(
        (transport) => {
          this.transport = transport;
          return transport;
        },
        (err: unknown) => {
          this.connecting = null;
          throw err;
        },
      );
    }
    return this.connecting;
  }

  private async open(): Promise<Transport> {
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    if (this.options.remote !== undefined) {
      const tokenFile = this.options.tokenFile ?? process.env.STOCKADE_TOKEN_FILE;
      if (tokenFile === undefined || tokenFile === "") {
        throw new DaemonUnavailableError("a remote daemon needs its token: pass tokenFile (or set STOCKADE_TOKEN_FILE)");
      }
      const caFile = this.options.caFile ?? process.env.STOCKADE_CA_FILE ?? null;
      return withTimeout(WebSocketTransport.open(this.options.remote, readToken(tokenFile), caFile || null), timeoutMs, this.options.remote);
    }
    const socket = await this.startDaemon(timeoutMs);
    return withTimeout(SocketTransport.open(socket), timeoutMs, socket);
  }

  /** Runs `stockade daemon start --json`, which starts the daemon as the CLI would; answers its socket. */
  private async startDaemon(timeoutMs: number): Promise<string> {
    let bin: string;
    try {
      bin = this.options.binary ?? binaryPath();
    } catch (err) {
      throw new DaemonUnavailableError((err as Error).message);
    }
    const args = this.options.home !== undefined ? ["--home", this.options.home] : [];
    args.push("daemon", "start", "--json");
    const out = await new Promise<string>((resolve, reject) => {
      execFile(bin, args, { timeout: timeoutMs, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
        if (err) {
          const sentence = stderr.trim().replace(/^stockade: /, "");
          reject(new DaemonUnavailableError(sentence || `\`${bin} daemon start\` failed: ${err.message}`));
        } else {
          resolve(stdout);
        }
      });
    });
    let socket: unknown;
    try {
      socket = JSON.parse(out).socket;
    } catch {
      socket = undefined;
    }
    if (typeof socket !== "string") {
      throw new DaemonUnavailableError(`\`${bin} daemon start --json\` did not name a socket; is ${bin} a stockade binary?`);
    }
    return socket;
  }
}

/** The token in `path` (surrounding whitespace removed), by the rules the daemon applies to its own. */
function readToken(path: string): string {
  let token: string;
  try {
    const st = lstatSync(path);
    if (!st.isFile()) throw new DaemonUnavailableError(`the token file ${path} is not a regular file (symlinks are refused); pass the file itself`);
    if ((st.mode & 0o077) !== 0) {
      throw new DaemonUnavailableError(`the token file ${path} can be read or written by others; chmod 600 ${path}`);
    }
    token = readFileSync(path, "utf8").trim();
  } catch (err) {
    if (err instanceof StockadeError) throw err;
    throw new DaemonUnavailableError(`cannot read the token file ${path}: ${(err as Error).message}`);
  }
  if (token.length < 16) throw new DaemonUnavailableError(`the token in ${path} is shorter than 16 characters; make one with \`openssl rand -hex 32\``);
  return token;
}

/** The key a start carries: the caller's (checked), else a fresh one. */
function idempotencyKey(given: string | undefined): string {
  if (given === undefined) return `js-${randomUUID()}`;
  if (typeof given !== "string" || given.length < 1 || given.length > 128 || !/^[\x20-\x7e]+$/.test(given)) {
    throw new TypeError("idempotencyKey must be 1 to 128 printable ASCII characters");
  }
  return given;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DaemonUnavailableError(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The arguments `run` and `start` share, checked with a sentence naming the wrong one. */
function checkArgs(method: string, command: unknown, options: unknown): void {
  const wrong = (what: string, value: unknown): TypeError =>
    new TypeError(`${method}: ${what}, not ${value === null ? "null" : typeof value} ${JSON.stringify(value) ?? String(value)}`);
  if (typeof command !== "string") throw wrong("command must be a string (a shell command line)", command);
  if (typeof options !== "object" || options === null) throw wrong("options must be an object", options);
  const o = options as Record<string, unknown>;
  if (o.cwd !== undefined && typeof o.cwd !== "string") throw wrong("options.cwd must be a string (a directory)", o.cwd);
  if (o.env !== undefined) {
    if (typeof o.env !== "object" || o.env === null) throw wrong("options.env must be an object of strings", o.env);
    for (const [k, v] of Object.entries(o.env)) {
      if (typeof v !== "string") throw wrong(`options.env.${k} must be a string`, v);
    }
  }
  for (const name of ["timeoutMs", "maxBytes", "waitMs"]) {
    const v = o[name];
    if (v !== undefined && (typeof v !== "number" || !Number.isFinite(v) || v < 0)) {
      throw wrong(`options.${name} must be a number of ${name === "maxBytes" ? "bytes" : "milliseconds"} (0 or more)`, v);
    }
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw wrong("options.signal must be an AbortSignal", o.signal);
}

function setIf(params: Record<string, unknown>, key: string, value: unknown): void {
  if (value !== undefined && value !== null) params[key] = value;
}

function describe(result: RunResult): string {
  if (result.state === "exited") return `with exit code ${result.exitCode}`;
  if (result.state === "signaled") return `by signal ${-(result.exitCode ?? 0)}`;
  const reason = result.raw.reason;
  return typeof reason === "string" ? `${result.state}: ${reason}` : result.state;
}
