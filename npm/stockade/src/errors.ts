// Errors of the client: the daemon's JSON-RPC errors keep its one-sentence message.

/** JSON-RPC error codes of the daemon (docs/protocol.md, "Errors"). */
export const ErrorCode = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  NO_SUCH_SESSION: -32001,
  LIMIT_REACHED: -32002,
  SPAWN_FAILED: -32003,
  NOT_SUPPORTED: -32004,
  STORAGE: -32005,
  SHUTTING_DOWN: -32006,
  INPUT_FAILED: -32007,
  NO_SUCH_SCHEDULE: -32008,
  RESOURCE: -32009,
} as const;

/** Every error of this package. `message` is the daemon's sentence (or the client's own). */
export class StockadeError extends Error {
  /** The JSON-RPC error code, or null for an error of the client itself. */
  readonly code: number | null;
  /** The error's `data` (e.g. `{written, total}` of `INPUT_FAILED`), or null. */
  readonly data: unknown;

  constructor(message: string, code: number | null = null, data: unknown = null) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.data = data ?? null;
  }
}

export class NoSuchSessionError extends StockadeError {}
export class SpawnFailedError extends StockadeError {}
export class NotSupportedError extends StockadeError {}
export class InvalidParamsError extends StockadeError {}
export class LimitReachedError extends StockadeError {}
export class InputFailedError extends StockadeError {}
/** The daemon could not be started or reached (the binary's sentence, or the connect error). */
export class DaemonUnavailableError extends StockadeError {}
/**
 * The connection to the daemon closed while requests were waiting for their answers. From
 * `start`: `idempotencyKey` is the key to start again with (that session, or a new one).
 */
export class ConnectionLostError extends StockadeError {
  idempotencyKey: string | null = null;
}

/** A run or a wait that reached its time limit; `result` is what was known then. */
export class StockadeTimeoutError extends StockadeError {
  readonly result: unknown;
  constructor(message: string, result: unknown) {
    super(message);
    this.result = result;
  }
}

/** `run(…, { check: true })` of a command that did not exit 0; `result` is its `RunResult`. */
export class CommandFailedError extends StockadeError {
  readonly result: unknown;
  constructor(message: string, result: unknown) {
    super(message);
    this.result = result;
  }
}

/** The error for a JSON-RPC error answer, of the class its code names. */
export function fromRpcError(err: { code?: unknown; message?: unknown; data?: unknown }): StockadeError {
  const code = typeof err.code === "number" ? err.code : null;
  const message = typeof err.message === "string" ? err.message : "the daemon answered an error without a message";
  switch (code) {
    case ErrorCode.NO_SUCH_SESSION:
      return new NoSuchSessionError(message, code, err.data);
    case ErrorCode.SPAWN_FAILED:
      return new SpawnFailedError(message, code, err.data);
    case ErrorCode.NOT_SUPPORTED:
      return new NotSupportedError(message, code, err.data);
    case ErrorCode.INVALID_PARAMS:
      return new InvalidParamsError(message, code, err.data);
    case ErrorCode.LIMIT_REACHED:
      return new LimitReachedError(message, code, err.data);
    case ErrorCode.INPUT_FAILED:
      return new InputFailedError(message, code, err.data);
    default:
      return new StockadeError(message, code, err.data);
  }
}
