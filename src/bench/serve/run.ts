/**
 * One benchmark run against a server: requests from a source sent with at most `concurrency` in
 * flight (a new one the moment one ends, as vLLM's benchmark does with --max-concurrency), bounded
 * by the source's count and by a time limit after which nothing new is sent and requests still
 * streaming are cut. A 4xx answer stops new requests too: the server rejects the requests' shape,
 * and every other request would fail the same way.
 *
 * `afterEach` (the chat's cold probe) runs after a request ends and before its source hears of it,
 * so a conversation's next turn waits for it; its time is taken out of the run's duration (it runs
 * one request at a time, so nothing of the workload runs meanwhile).
 */
import { sendRequest, type BenchRequest, type RequestOutcome, type ServerTarget } from "./openai-client.ts";
import type { RequestSource } from "./workloads.ts";

export interface RunOptions {
  concurrency: number;
  /** Seconds after which nothing new is sent and streaming requests are cut. */
  timeLimitS: number;
  ignoreEos: boolean;
  /** Awaited after each request ends, before the source is told; `signal` is the run's time limit. */
  afterEach?: (req: BenchRequest, outcome: RequestOutcome, signal: AbortSignal) => Promise<void>;
}

export interface ServeRun {
  /** Every request sent, in the order they ended. */
  outcomes: RequestOutcome[];
  /** From the first request sent to the last one ended, less the time `afterEach` took before it, seconds. */
  durationS: number;
  /** Requests the source held that were never sent (time limit, a 4xx, conversations ended by a failure). */
  unsent: number;
  /** Why sending stopped early, when it did. */
  stoppedBy: string | null;
}

export async function runRequests(target: ServerTarget, source: RequestSource, o: RunOptions): Promise<ServeRun> {
  const controller = new AbortController();
  let stoppedBy: string | null = null;
  const timer = setTimeout(() => {
    stoppedBy = `the time limit of ${o.timeLimitS} s`;
    controller.abort();
  }, o.timeLimitS * 1000);
  const outcomes: RequestOutcome[] = [];
  const inFlight = new Set<Promise<void>>();
  const start = performance.now();
  let end = start;
  /** Time spent in afterEach, and that part of it which ended before the last request did. */
  let hooked = 0;
  let hookedBeforeEnd = 0;
  let sent = 0;
  const launch = (req: BenchRequest): void => {
    sent++;
    const p: Promise<void> = sendRequest(target, req, { ignoreEos: o.ignoreEos, signal: controller.signal, runStartMs: start }).then(async (outcome) => {
      outcomes.push(outcome);
      end = performance.now();
      hookedBeforeEnd = hooked;
      if (o.afterEach !== undefined) {
        const t = performance.now();
        await o.afterEach(req, outcome, controller.signal);
        hooked += performance.now() - t;
      }
      source.finished(req, outcome);
      const status = outcome.ok ? null : outcome.failure.status;
      if (status !== null && status >= 400 && status < 500 && stoppedBy === null) stoppedBy = `HTTP ${status} on ${req.id}`;
      inFlight.delete(p);
    });
    inFlight.add(p);
  };
  try {
    for (;;) {
      while (stoppedBy === null && inFlight.size < o.concurrency) {
        const req = source.next();
        if (req === null) break;
        launch(req);
      }
      if (inFlight.size === 0) break;
      await Promise.race(inFlight);
    }
  } finally {
    clearTimeout(timer);
  }
  return { outcomes, durationS: (end - start - hookedBeforeEnd) / 1000, unsent: Math.max(0, source.total - sent), stoppedBy };
}
