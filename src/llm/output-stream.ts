/**
 * The stream of one submission's outputs (engine-client.ts): an async iterable of EngineOutput
 * snapshots in the order the engine made them, ending once every sample of every request in the
 * submission has finished. The front door's loop pushes; the consumer pulls. A consumer that stops
 * early (break, return, throw) aborts what is still running.
 */
import type { EngineOutput } from "../engine/engine-output.ts";

/** What the front door knows of a submitted request once it was accepted. */
export interface SubmittedRequest {
  readonly id: string;
  /** The prompt as the engine runs it (rendered and tokenized). */
  readonly promptTokenIds: readonly number[];
  /** Samples of the prompt. */
  readonly n: number;
}

export class OutputStream implements AsyncIterable<EngineOutput> {
  private readonly queue: EngineOutput[] = [];
  private wake: (() => void) | null = null;
  /** Samples still running, per request id. */
  private readonly running = new Map<string, number>();
  private consumed = false;
  /** The engine failure that ended the stream's requests (their outputs say "error"), or null. */
  error: Error | null = null;

  constructor(
    /** The submission's requests, in the order given. */
    readonly requests: readonly SubmittedRequest[],
    /** Aborts the submission's unfinished requests (the client's abort). */
    private readonly abortAll: () => void,
  ) {
    for (const r of requests) this.running.set(r.id, r.n);
  }

  /** Whether every sample of every request has finished. */
  get finished(): boolean {
    return this.running.size === 0;
  }

  /** Ids of the requests still running. */
  get runningIds(): string[] {
    return [...this.running.keys()];
  }

  /** Aborts what still runs; its last outputs (finish_reason "abort") still come through the stream. */
  abort(): void {
    if (!this.finished) this.abortAll();
  }

  /** A step failed while this stream's requests ran: they end with finish_reason "error". */
  fail(error: Error): void {
    this.error ??= error;
  }

  /** The loop hands over an output of one of this stream's requests. */
  push(output: EngineOutput): void {
    this.queue.push(output);
    if (output.finishReason !== null) {
      const left = (this.running.get(output.requestId) ?? 1) - 1;
      if (left <= 0) this.running.delete(output.requestId);
      else this.running.set(output.requestId, left);
    }
    this.wake?.();
  }

  /** Every output until the end, in order. */
  async *[Symbol.asyncIterator](): AsyncGenerator<EngineOutput> {
    if (this.consumed) throw new Error("an OutputStream can be iterated once");
    this.consumed = true;
    try {
      for (;;) {
        while (this.queue.length > 0) yield this.queue.shift()!;
        if (this.finished) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
      }
    } finally {
      // A consumer that stopped early must not leave requests holding KV blocks.
      this.abort();
    }
  }
}
