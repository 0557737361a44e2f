/**
 * One benchmark run against a server: requests from a source sent with at most `concurrency` in
 * flight (a new one the moment one ends, as vLLM's benchmark does with --max-concurrency), bounded
 * by the source's count and by a time limit after which nothing new is sent and requests still
 * streaming are cut. A 4xx answer stops new requests too: the server rejects the requests' shape,
 * and every other request would fail the same way.
 *
 * `beforeEach` (the chat's cold probe) runs before a request is sent, so the request waits for it;
 * its time is taken out of the run's duration (it runs one request at a time, so nothing of the
 * workload runs meanwhile).
 */
import { sendRequest, type BenchRequest, type RequestOutcome, type ServerTarget } from "./openai-client.ts";
import type { RequestSource } from "./serve-workloads.ts";

export interface RunOptions {
  concurrency: number;
  /** Seconds after which nothing new is sent and streaming requests are cut. */
  timeLimitS: number;
  ignoreEos: boolean;
  /** Awaited before each request is sent; `signal` is the run's time limit. */
  beforeEach?: (req: BenchRequest, signal: AbortSignal) => Promise<void>;
}

export interface ServeRun {
  /** Every request sent, in the order they ended. */
  outcomes: RequestOutcome[];
  /** From the first request sent to the last one ended, less the time `beforeEach` took, seconds. */
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
  /** Time spent in beforeEach. */
  let hooked = 0;
  let sent = 0;
  const launch = (req: BenchRequest): void => {
    sent++;
    const p: Promise<void> = sendRequest(target, req, { ignoreEos: o.ignoreEos, signal: controller.signal, runStartMs: start }).then(async (outcome) => {
      outcomes.push(outcome);
      end = performance.now();
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
        if (o.beforeEach !== undefined) {
          const t = performance.now();
          await o.beforeEach(req, controller.signal);
          hooked += performance.now() - t;
        }
        launch(req);
      }
      if (inFlight.size === 0) break;
      await Promise.race(inFlight);
    }
  } finally {
    clearTimeout(timer);
  }
  return { outcomes, durationS: (end - start - hooked) / 1000, unsent: Math.max(0, source.total - sent), stoppedBy };
}
