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
 * A field of a generation request (src/llm/generate-request.ts) of the wrong type or out of
 * range. `field` is its path as the request type spells it ("topP", "logitBias.50256",
 * "messages[2].role"); `problem` says what is wrong without naming it ("must be at most 1, got 5"),
 * so that each front end names the field its own way: the server as the JSON field (a 400 with
 * `param`), the command line as the option or the JSONL field.
 */
export class RequestFieldError extends InputError {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field} ${problem}`);
  }

  /** The field's first segment, the request property ("logitBias" of "logitBias.50256"). */
  get property(): string {
    return /^[A-Za-z]+/.exec(this.field)?.[0] ?? this.field;
  }

  /** The message with the field named as `name` names it, the rest of its path kept ("'logit_bias.50256' must be ..."). */
  renamed(name: (property: string) => string): string {
    return `${name(this.property)}${this.field.slice(this.property.length)} ${this.problem}`;
  }
}

/**
 * A request that can never be served: its prompt plus max_tokens exceeds the context or the whole
 * KV pool. (A pool that is merely busy never fails a request: the scheduler preempts and resumes.)
 * `field` names the request field at fault: the prompt (too long alone) or maxTokens.
 */
export class RequestTooLongError extends PagellmError {
  override readonly exitCode = 3;
  constructor(
    message: string,
    readonly field: "prompt" | "maxTokens" | "n" | null = null,
  ) {
    super(message);
  }
}

/** The engine's queue holds as many sequences as it may (a server's --max-queue): try again later. */
export class QueueFullError extends PagellmError {
  override readonly exitCode = 3;
}

/** The engine client was closed (a server shutting down): it takes no more work. */
export class EngineClosedError extends PagellmError {
  override readonly exitCode = 1;
}

/** A worker thread died or threw while running a kernel. */
export class WorkerPoolError extends PagellmError {
  override readonly exitCode = 4;
}

/** An embedding the engine ended without its vector (a step failed, the engine closed under it); names the input. */
export class EmbeddingFailedError extends PagellmError {
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

/**
 * A request for something the loaded model cannot do: a generation on a model that only embeds
 * (an encoder), an embedding or rerank on a model without pooling or a rerank head. `capability`
 * names what was asked; the server answers a 400 with the message.
 */
export class ModelCapabilityError extends InputError {
  constructor(
    readonly capability: "generate" | "embed" | "rerank",
    message: string,
  ) {
    super(message);
  }
}
