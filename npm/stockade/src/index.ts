// `stockade` for TypeScript: a typed client of the stockade daemon (docs/clients-typescript.md).
export { Client, type ClientOptions, type RunOptions, type StartOptions } from "./client.js";
export { Session, type Chunk, type GrepLine, type RunResult, type WaitResult } from "./session.js";
export {
  CommandFailedError,
  ConnectionLostError,
  DaemonUnavailableError,
  ErrorCode,
  InputFailedError,
  InvalidParamsError,
  LimitReachedError,
  NoSuchSessionError,
  NotSupportedError,
  SpawnFailedError,
  StockadeError,
  StockadeTimeoutError,
} from "./errors.js";
export { binaryPath } from "./binary.js";
