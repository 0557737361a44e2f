/**
 * Typed errors. Library code throws these and never exits the process; the CLI maps each kind to a
 * one-line message and an exit code (see src/cli/errors.ts).
 */

/** Base class: every error pagellm throws on purpose is a PagellmError. */
export class PagellmError extends Error {
  /** Process exit code the CLI uses for this kind of error. */
  readonly exitCode: number = 1;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A model or tokenizer file that is missing, truncated, foreign, or inconsistent. Names the file. */
export class ModelFormatError extends PagellmError {
  override readonly exitCode = 2;
  constructor(readonly file: string, problem: string) {
    super(`${file}: ${problem}`);
  }
}

/** Bad user input: a missing prompt file, a malformed request, an option out of range. */
export class InputError extends PagellmError {
  override readonly exitCode = 2;
}

/**
 * A request that can never be served: its prompt plus max_tokens exceeds the context or the whole
 * KV pool. (A pool that is merely busy never fails a request: the scheduler preempts and resumes.)
 */
export class RequestTooLongError extends PagellmError {
  override readonly exitCode = 3;
}

/** A worker thread died or threw while running a kernel. */
export class WorkerPoolError extends PagellmError {
  override readonly exitCode = 4;
}

/** The requested compute device cannot be used: no WebGPU adapter, a null or broken one, a failed check. */
export class DeviceError extends PagellmError {
  override readonly exitCode = 2;
}

/**
 * An HTTP server the client side talks to (`bench serve --url`, a server it started) could not be
 * reached, did not start, or answered with an error. Names the address and, where there is one,
 * the status and the server's own message.
 */
export class ServerError extends PagellmError {
  override readonly exitCode = 5;
}

/**
 * A JSON Schema, regular expression, choice list or GBNF grammar that cannot be compiled into a
 * constraint. The message names where (a JSON pointer such as `#/properties/age/pattern`, or a GBNF
 * line) and what; the server answers it with a 400 naming the request field, never with
 * unconstrained output.
 */
export class GrammarError extends PagellmError {
  override readonly exitCode = 2;
}

/**
 * Compiling a constraint went over one of its bounds (time, size, memory; src/grammar/limits.ts).
 * The message names the limit and its value.
 */
export class GrammarLimitError extends GrammarError {
  constructor(readonly limit: string, message: string) {
    super(message);
  }
}
