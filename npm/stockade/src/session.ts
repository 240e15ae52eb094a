// A session of the daemon: its output by cursor, waits, input, size, and its end.
import type { Answer } from "./transport.js";
import { InvalidParamsError, StockadeTimeoutError } from "./errors.js";

/** What a session needs of its client (a `Client` is one): a call, and whether binary reads work. */
export interface Caller {
  binaryReads: boolean | null;
  call(method: string, params: Record<string, unknown>): Promise<Answer>;
}

/** The longest wait one request may ask for (`rpc::MAX_WAIT_MS`); longer waits are looped. */
const MAX_WAIT_MS = 300_000;
/** Bytes per raw read: the daemon's caps (16 MiB binary, 4 MiB base64). */
const BINARY_READ_BYTES = 16 << 20;
const BASE64_READ_BYTES = 4 << 20;
const TERMINAL = new Set(["exited", "signaled", "killed", "timed_out", "failed"]);

export interface RunResult {
  id: string;
  command: string;
  /** `exited`, `signaled`, `killed`, `timed_out`, `failed` (or `running`). */
  state: string;
  /** The exit code; minus the signal number for `signaled` (as Node's and Python's subprocess); null otherwise. */
  exitCode: number | null;
  /** The daemon's view of the output (stdout and stderr merged): its tail, at most `maxBytes`. */
  output: string;
  truncated: boolean;
  /** What the view left out and where to read it (the daemon's `notice`), or null. */
  notice: Record<string, unknown> | null;
  nextCursor: number;
  totalBytes: number;
  spoolPath: string | null;
  /** The daemon's whole answer. */
  raw: Record<string, unknown>;
}

/** Bytes of the output log from a cursor. */
export interface Chunk {
  data: Uint8Array;
  /** Where to read on (`after` of the next read). */
  nextCursor: number;
  state: string;
  /** The session has ended and every byte up to here has been read. */
  eof: boolean;
  totalBytes: number;
}

export interface WaitResult {
  state: string;
  exitCode: number | null;
  /** `exit` (the session ended) or `match` (a line matched `until`). */
  endedBy: string;
  /** The line that matched `until`. */
  matched: string | null;
  /** The cursor just after the matched line. */
  cursor: number | null;
}

export interface GrepLine {
  lineNumber: number;
  offset: number;
  text: string;
  isMatch: boolean;
}

export class Session {
  constructor(
    private readonly client: Caller,
    readonly id: string,
    readonly pid: number | null,
    /** The answer of `start` (null for `Client.session`). */
    readonly started: RunResult | null = null,
  ) {}

  /** The idempotency key it was started with (null for `Client.session`). */
  idempotencyKey: string | null = null;

  /**
   * Raw bytes from `after` (exact: any bytes, NULs, invalid UTF-8). `waitMs` long-polls when no
   * byte is there yet. A walk `after = chunk.nextCursor` until `chunk.eof` reproduces the spool.
   */
  async read(options: { after?: number; maxBytes?: number; waitMs?: number } = {}): Promise<Chunk> {
    const params: Record<string, unknown> = { id: this.id, after: options.after ?? 0, raw: true };
    if (options.waitMs !== undefined) params.wait_ms = options.waitMs;
    if (this.client.binaryReads !== false) {
      try {
        const answer = await this.client.call("read", {
          ...params,
          encoding: "binary",
          max_bytes: options.maxBytes ?? BINARY_READ_BYTES,
        });
        this.client.binaryReads = true;
        return toChunk(answer.result, answer.bytes ?? new Uint8Array(0));
      } catch (err) {
        // A daemon without binary reads refuses the field; any other error is real.
        if (!(err instanceof InvalidParamsError && err.message.includes("unknown field `encoding`"))) throw err;
        this.client.binaryReads = false;
      }
    }
    const answer = await this.client.call("read", { ...params, max_bytes: options.maxBytes ?? BASE64_READ_BYTES });
    const b64 = answer.result.bytes_b64;
    return toChunk(answer.result, typeof b64 === "string" ? Buffer.from(b64, "base64") : new Uint8Array(0));
  }

  /**
   * Waits until a line of the output after the cursor `after` (default 0: from its start, then as
   * it arrives) matches `until` (a Rust regex, as `grep`; a prompt without its newline counts), or
   * without `until` until the session ends. Past `timeoutMs` a `StockadeTimeoutError`; without
   * it, for ever.
   */
  async wait(options: { until?: string; after?: number; timeoutMs?: number } = {}): Promise<WaitResult> {
    const deadline = options.timeoutMs === undefined ? null : Date.now() + options.timeoutMs;
    let after = options.after ?? 0;
    for (;;) {
      const left = deadline === null ? MAX_WAIT_MS : Math.max(0, deadline - Date.now());
      const params: Record<string, unknown> = {
        id: this.id,
        after,
        mode: "tail",
        max_bytes: 1,
        collect: true,
        wait_ms: Math.min(left, MAX_WAIT_MS),
      };
      if (options.until !== undefined) params.until = options.until;
      const result = (await this.client.call("read", params)).result;
      const wait = (result.wait ?? null) as { ended_by?: string; matched?: { line?: string; cursor?: number } } | null;
      const state = String(result.state);
      if (wait?.ended_by === "match" && wait.matched) {
        return { state, exitCode: exitCodeOf(result), endedBy: "match", matched: wait.matched.line ?? null, cursor: wait.matched.cursor ?? null };
      }
      if (TERMINAL.has(state)) {
        // A session that had already ended is answered at once, without a look for `until`: the
        // lines it printed are searched here, so a quick command does not race its wait.
        const found = options.until === undefined ? null : await this.firstMatch(options.until, after);
        if (found !== null) return { state, exitCode: exitCodeOf(result), endedBy: "match", ...found };
        return { state, exitCode: exitCodeOf(result), endedBy: "exit", matched: null, cursor: null };
      }
      if (deadline !== null && Date.now() >= deadline) {
        const what = options.until === undefined ? "the session to end" : `a line matching ${JSON.stringify(options.until)}`;
        throw new StockadeTimeoutError(`waited ${options.timeoutMs} ms for ${what} of ${this.id}; it is still ${state}`, result);
      }
      // Lines before this answer's end have been looked at: the next slice starts there.
      if (typeof result.next_cursor === "number") after = Math.max(after, result.next_cursor);
    }
  }

  /** The first line matching `pattern` that ends after `after`, with the cursor just past it. */
  private async firstMatch(pattern: string, after: number): Promise<{ matched: string; cursor: number } | null> {
    for (const line of await this.grep(pattern, { maxMatches: 10_000 })) {
      const end = line.offset + Buffer.byteLength(line.text) + 1;
      if (line.isMatch && end > after) return { matched: line.text, cursor: end };
    }
    return null;
  }

  /** Types `data` into the session's terminal or stdin pipe (a string as text, bytes exactly). */
  async write(data: string | Uint8Array, options: { closeStdin?: boolean } = {}): Promise<void> {
    const params: Record<string, unknown> = { id: this.id, yield_ms: 0 };
    if (typeof data === "string") params.chars = data;
    else params.bytes_b64 = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
    if (options.closeStdin) params.close_stdin = true;
    await this.client.call("write", params);
  }

  /** Sets the terminal size of a PTY session (the command gets SIGWINCH). */
  async resize(rows: number, cols: number): Promise<void> {
    await this.client.call("resize", { id: this.id, rows, cols });
  }

  /** Terminates the session's whole tree; answers the daemon's report (`terminated`, `survivors`, …). */
  async kill(options: { signal?: string; graceMs?: number } = {}): Promise<Record<string, unknown>> {
    const params: Record<string, unknown> = { id: this.id };
    if (options.signal !== undefined) params.signal = options.signal;
    if (options.graceMs !== undefined) params.grace_ms = options.graceMs;
    const result = (await this.client.call("kill", params)).result;
    return (result.report ?? {}) as Record<string, unknown>;
  }

  /**
   * The output's lines from `after` (without their `\n`, UTF-8 with replacement characters),
   * following the session while it runs, until it has ended and every byte was read.
   */
  async *lines(options: { after?: number } = {}): AsyncGenerator<string, void, undefined> {
    let after = options.after ?? 0;
    let partial: Buffer[] = [];
    for (;;) {
      const chunk = await this.read({ after, waitMs: 30_000 });
      after = chunk.nextCursor;
      let data = Buffer.from(chunk.data.buffer, chunk.data.byteOffset, chunk.data.byteLength);
      for (let nl = data.indexOf(10); nl >= 0; nl = data.indexOf(10)) {
        partial.push(data.subarray(0, nl));
        yield Buffer.concat(partial).toString("utf8");
        partial = [];
        data = data.subarray(nl + 1);
      }
      if (data.length > 0) partial.push(data);
      if (chunk.eof) break;
    }
    if (partial.length > 0) yield Buffer.concat(partial).toString("utf8");
  }

  /** Lines of the whole output matching `pattern` (a Rust regex, as ripgrep). */
  async grep(pattern: string, options: { context?: number; maxMatches?: number; ignoreCase?: boolean } = {}): Promise<GrepLine[]> {
    const params: Record<string, unknown> = { id: this.id, pattern };
    if (options.context !== undefined) params.context = options.context;
    if (options.maxMatches !== undefined) params.max_matches = options.maxMatches;
    if (options.ignoreCase) params.ignore_case = true;
    const result = (await this.client.call("grep", params)).result;
    const lines = (result.lines ?? []) as { line_number: number; offset: number; text: string; is_match: boolean }[];
    return lines.map((l) => ({ lineNumber: l.line_number, offset: l.offset, text: l.text, isMatch: l.is_match }));
  }

  /** The session's state now (`state`, `code`, …, `total_bytes`), without its output. */
  async info(): Promise<Record<string, unknown>> {
    const result = (await this.client.call("read", { id: this.id, max_bytes: 1, mode: "tail" })).result;
    // The fields of the one-byte view say nothing about the session.
    for (const key of ["output", "notice", "truncated", "start_cursor", "omitted_bytes", "omitted_lines", "stream"]) delete result[key];
    return result;
  }

  /** Terminates it if running and deletes its output and record. */
  async forget(): Promise<void> {
    await this.client.call("forget", { id: this.id });
  }
}

export function toRunResult(raw: Record<string, unknown>, command: string): RunResult {
  return {
    id: String(raw.id),
    command,
    state: String(raw.state),
    exitCode: exitCodeOf(raw),
    output: typeof raw.output === "string" ? raw.output : "",
    truncated: raw.truncated === true,
    notice: (raw.notice ?? null) as Record<string, unknown> | null,
    nextCursor: Number(raw.next_cursor ?? 0),
    totalBytes: Number(raw.total_bytes ?? 0),
    spoolPath: typeof raw.spool_path === "string" ? raw.spool_path : null,
    raw,
  };
}

function exitCodeOf(raw: Record<string, unknown>): number | null {
  if (raw.state === "exited" && typeof raw.code === "number") return raw.code;
  if (raw.state === "signaled" && typeof raw.signal === "number") return -raw.signal;
  return null;
}

function toChunk(result: Record<string, unknown>, data: Uint8Array): Chunk {
  const state = String(result.state);
  const nextCursor = Number(result.next_cursor ?? 0);
  const totalBytes = Number(result.total_bytes ?? 0);
  return { data, nextCursor, state, eof: TERMINAL.has(state) && nextCursor >= totalBytes, totalBytes };
}
