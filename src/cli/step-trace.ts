/**
 * `PAGELLM_DEBUG=steps` (pagellm serve): one line per engine step on stderr, with its decode and prompt tokens, its
 * wall time, and the time the process spent outside steps since the previous one (HTTP, rendering
 * and tokenizing prompts, writing streams, GC). A long gap between a stream's tokens is then either
 * a long step (and which tokens made it long) or a long time between steps.
 */
import type { EngineClient, StepReport } from "../llm/engine-client.ts";

/** Whether PAGELLM_DEBUG (a comma-separated list) asks for the step trace. */
export function stepTraceAsked(env: Record<string, string | undefined> = process.env): boolean {
  return (env.PAGELLM_DEBUG ?? "").split(",").some((part) => part.trim() === "steps");
}

/** Writes one line per step of `client` to `write` from now on; returns what stops it. */
export function traceSteps(client: EngineClient, write: (line: string) => void): () => void {
  let lastEndMs: number | null = null;
  return client.onStep((r) => {
    write(stepLine(r, lastEndMs));
    lastEndMs = r.endMs;
  });
}

/** `step 812: 3 decode + 32 prompt tokens, 5 outputs, 451.2 ms; 0.8 ms outside steps before it`. */
export function stepLine(r: StepReport, lastEndMs: number | null): string {
  const outside = lastEndMs === null ? "" : `; ${(r.startMs - lastEndMs).toFixed(1)} ms outside steps before it`;
  return `step ${r.step}: ${r.decodeTokens} decode + ${r.promptTokens} prompt tokens, ${r.outputs} outputs, ${(r.endMs - r.startMs).toFixed(1)} ms${outside}`;
}
