// The daemon's JSON-RPC over its two doors: the Unix socket (one JSON per line) and the
// WebSocket door (one JSON per text message). Requests are multiplexed by id on one connection.
// A binary raw read (`encoding: "binary"`) is answered by its JSON line followed by exactly
// `binary_len` raw bytes on the socket, or by one binary message on the WebSocket.
import { readFileSync } from "node:fs";
import { connect as netConnect, type Socket } from "node:net";
import WebSocket from "ws";
import { ConnectionLostError, DaemonUnavailableError, fromRpcError, StockadeError } from "./errors.js";

/** One answer: the `result` object, and the raw bytes that followed it (binary reads only). */
export interface Answer {
  result: Record<string, unknown>;
  bytes: Buffer | null;
}

interface Pending {
  resolve: (answer: Answer) => void;
  reject: (err: StockadeError) => void;
  /** The request never left: its write failed (the daemon had closed the connection). */
  unsent: boolean;
}

/**
 * The connection was found broken when the request was written: nothing of it reached the
 * daemon, so it can be sent again on a new connection.
 */
export class NotSentError extends ConnectionLostError {}

/** What both doors share: ids, the requests waiting for answers, and how an answer settles one. */
export abstract class Transport {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  protected closedError: StockadeError | null = null;

  request(method: string, params: Record<string, unknown>): Promise<Answer> {
    if (this.closedError !== null) return Promise.reject(this.closedError);
    const id = this.nextId++;
    const line = JSON.stringify({ jsonrpc: "2.0", id, method, params });
    return new Promise<Answer>((resolve, reject) => {
      const waiting: Pending = { resolve, reject, unsent: false };
      this.pending.set(id, waiting);
      this.hold(true);
      this.send(line, () => {
        waiting.unsent = true;
      });
    });
  }

  /**
   * Whether the connection keeps the program alive: only while an answer is awaited, so a
   * program that is done ends without `close()`, as with `fetch`.
   */
  protected hold(_busy: boolean): void {}

  private settled(): void {
    if (this.pending.size === 0) this.hold(false);
  }

  /** Whether the connection has ended (every request on it fails). */
  get closed(): boolean {
    return this.closedError !== null;
  }

  abstract close(): void;
  /** Writes `message`; calls `unsent` when the write failed. */
  protected abstract send(message: string, unsent: () => void): void;

  /** Parses one answer; returns its `binary_len` when raw bytes follow it. */
  protected answer(text: string): { id: number; len: number; result: Record<string, unknown> } | null {
    let msg: { id?: unknown; result?: unknown; error?: { code?: unknown; message?: unknown; data?: unknown } };
    try {
      msg = JSON.parse(text);
    } catch {
      this.fail(new ConnectionLostError(`the daemon sent something that is not JSON (${text.slice(0, 80)}); is this a stockade daemon?`));
      return null;
    }
    const id = typeof msg.id === "number" ? msg.id : null;
    const waiting = id === null ? undefined : this.pending.get(id);
    if (msg.error !== undefined) {
      const err = fromRpcError(msg.error ?? {});
      if (waiting !== undefined && id !== null) {
        this.pending.delete(id);
        this.settled();
        waiting.reject(err);
      } else {
        // An error with id null answers no request of ours in particular (e.g. a line too long):
        // the connection can no longer be trusted to match answers.
        this.fail(err);
      }
      return null;
    }
    const result = (msg.result ?? {}) as Record<string, unknown>;
    const len = result.binary_len;
    if (typeof len === "number" && id !== null) return { id, len, result };
    if (waiting !== undefined && id !== null) {
      this.pending.delete(id);
      this.settled();
      waiting.resolve({ result, bytes: null });
    }
    return null;
  }

  protected settleBinary(id: number, result: Record<string, unknown>, bytes: Buffer): void {
    const waiting = this.pending.get(id);
    if (waiting === undefined) return;
    this.pending.delete(id);
    this.settled();
    waiting.resolve({ result, bytes });
  }

  /** Ends every request still waiting, and every later one, with `err`. */
  protected fail(err: StockadeError): void {
    if (this.closedError === null) this.closedError = err;
    for (const waiting of this.pending.values()) waiting.reject(waiting.unsent ? new NotSentError(err.message) : err);
    this.pending.clear();
    this.settled();
  }
}

/** The Unix socket: newline-delimited JSON, with raw bytes after the line of a binary read. */
export class SocketTransport extends Transport {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** A binary read whose bytes are arriving: its answer and how many bytes are still due. */
  private binary: { id: number; result: Record<string, unknown>; len: number } | null = null;
  /** How many leading chunks are known to hold no newline. */
  private scanned = 0;

  private constructor(private readonly socket: Socket) {
    super();
    socket.unref();
    socket.on("data", (data: Buffer) => this.onData(data));
    socket.on("error", (err) => this.fail(new ConnectionLostError(`the connection to the daemon failed: ${err.message}`)));
    socket.on("close", () => this.fail(new ConnectionLostError("the daemon closed the connection; is it still running?")));
  }

  static open(path: string): Promise<SocketTransport> {
    return new Promise((resolve, reject) => {
      const socket = netConnect({ path });
      socket.once("connect", () => {
        socket.removeAllListeners("error");
        resolve(new SocketTransport(socket));
      });
      socket.once("error", (err) =>
        reject(new DaemonUnavailableError(`cannot connect to the daemon's socket ${path}: ${err.message}`)),
      );
    });
  }

  close(): void {
    this.fail(new ConnectionLostError("the client was closed"));
    this.socket.destroy();
  }

  protected send(message: string, unsent: () => void): void {
    this.socket.write(message + "\n", (err) => {
      if (err) unsent();
    });
  }

  protected override hold(busy: boolean): void {
    if (busy) this.socket.ref();
    else this.socket.unref();
  }

  private onData(data: Buffer): void {
    this.chunks.push(data);
    this.buffered += data.length;
    for (;;) {
      if (this.binary !== null) {
        if (this.buffered < this.binary.len) return;
        const { id, result, len } = this.binary;
        this.binary = null;
        this.settleBinary(id, result, this.take(len));
        continue;
      }
      const end = this.indexOfNewline();
      if (end < 0) return;
      const line = this.take(end + 1).toString("utf8", 0, end);
      if (line.trim() === "") continue;
      const framed = this.answer(line);
      if (framed !== null) this.binary = framed;
    }
  }

  private indexOfNewline(): number {
    // A JSON answer of megabytes arrives in many chunks: each is searched once, not per arrival.
    let offset = 0;
    for (let i = 0; i < this.chunks.length; i++) {
      const chunk = this.chunks[i] as Buffer;
      if (i >= this.scanned) {
        const at = chunk.indexOf(10);
        if (at >= 0) return offset + at;
        this.scanned = i + 1;
      }
      offset += chunk.length;
    }
    return -1;
  }

  /** Removes and returns the first `n` buffered bytes. */
  private take(n: number): Buffer {
    this.scanned = 0;
    let out: Buffer;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let filled = 0;
      while (filled < n) {
        const chunk = this.chunks[0] as Buffer;
        const want = Math.min(chunk.length, n - filled);
        chunk.copy(out, filled, 0, want);
        filled += want;
        if (want === chunk.length) this.chunks.shift();
        else this.chunks[0] = chunk.subarray(want);
      }
    }
    this.buffered -= n;
    return out;
  }
}

/** The WebSocket door (ws:// or wss://) with a bearer token. */
export class WebSocketTransport extends Transport {
  private binary: { id: number; result: Record<string, unknown> } | null = null;

  private constructor(private readonly ws: WebSocket) {
    super();
    ws.on("message", (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => this.onMessage(toBuffer(data), isBinary));
    ws.on("error", (err) => this.fail(new ConnectionLostError(`the connection to the daemon failed: ${err.message}`)));
    ws.on("close", (code, reason) =>
      this.fail(new ConnectionLostError(`the daemon closed the connection (code ${code}${reason.length ? `: ${reason.toString()}` : ""})`)),
    );
  }

  static open(url: string, token: string, caFile: string | null): Promise<WebSocketTransport> {
    let ca: Buffer | undefined;
    if (caFile !== null) {
      try {
        ca = readFileSync(caFile);
      } catch (err) {
        return Promise.reject(new DaemonUnavailableError(`cannot read the CA file ${caFile}: ${(err as Error).message}`));
      }
    }
    return new Promise((resolve, reject) => {
      // Binary reads answer at most 16 MiB a message; the JSON ones far less.
      const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` }, ca, maxPayload: 64 << 20 });
      ws.once("open", () => {
        ws.removeAllListeners("error");
        ws.removeAllListeners("unexpected-response");
        resolve(new WebSocketTransport(ws));
      });
      ws.once("unexpected-response", (_req, res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (s: string) => (body += s));
        res.on("end", () => {
          ws.terminate();
          reject(new DaemonUnavailableError(`the daemon at ${url} refused the connection: HTTP ${res.statusCode} ${body.trim()}`));
        });
      });
      ws.once("error", (err) => reject(new DaemonUnavailableError(`cannot connect to ${url}: ${err.message}`)));
    });
  }

  close(): void {
    this.fail(new ConnectionLostError("the client was closed"));
    this.ws.close();
  }

  protected send(message: string, unsent: () => void): void {
    this.ws.send(message, (err) => {
      if (err) unsent();
    });
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (isBinary) {
      const pending = this.binary;
      this.binary = null;
      if (pending === null) {
        this.fail(new ConnectionLostError("the daemon sent bytes no read asked for; reconnect"));
        return;
      }
      this.settleBinary(pending.id, pending.result, data);
      return;
    }
    const text = data.toString("utf8");
    const framed = this.answer(text);
    if (framed !== null) this.binary = { id: framed.id, result: framed.result };
  }
}

function toBuffer(data: Buffer | ArrayBuffer | Buffer[]): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}
