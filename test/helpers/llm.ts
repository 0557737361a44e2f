/**
 * Models a test file opens, always closed: `const llms = openedLLMs()` at the top of a file
 * registers hooks that close every LLM it loaded after each test (and after all, for those loaded
 * in a describe's beforeAll), so that no test leaves worker threads or GPU buffers behind.
 */
import { afterAll, afterEach } from "bun:test";
import type { EngineOptions } from "../../src/engine/engine-options.ts";
import { LLM, type LoadOptions } from "../../src/llm/llm.ts";
import type { CompletionResult } from "../../src/llm/completion.ts";
import type { EngineOutput } from "../../src/engine/engine-output.ts";
import type { GenerateRequest, RequestInput } from "../../src/llm/generate-request.ts";
import { testThreads } from "./threads.ts";

export interface OpenedLLMs {
  /** LLM.load with the test's thread count unless `opts.engine.threads` says otherwise; closed by the hooks. */
  load(opts: LoadOptions): LLM;
  /** Keep `llm` to be closed by the hooks. */
  keep(llm: LLM): LLM;
  /** Close every LLM opened so far (the hooks call it; a test may call it between two phases). */
  closeAll(): void;
  /** The LLMs open now, in the order they were opened. */
  readonly open: readonly LLM[];
}

export function openedLLMs(hooks: { afterEach: boolean } = { afterEach: true }): OpenedLLMs {
  const open: LLM[] = [];
  const closeAll = () => {
    for (const llm of open.splice(0)) llm.close();
  };
  if (hooks.afterEach) afterEach(closeAll);
  afterAll(closeAll);
  return {
    load(opts: LoadOptions): LLM {
      const engine: Partial<EngineOptions> = { threads: testThreads(), ...opts.engine };
      return this.keep(LLM.load({ ...opts, engine }));
    },
    keep(llm: LLM): LLM {
      open.push(llm);
      return llm;
    },
    closeAll,
    open,
  };
}

/** Every output of a submission through the front door, in the order the engine made them. */
export async function allOutputs(llm: LLM, requests: readonly RequestInput[]): Promise<EngineOutput[]> {
  const outputs: EngineOutput[] = [];
  for await (const output of llm.client.submit(requests)) outputs.push(output);
  return outputs;
}

/** The parts of a result that must be equal between two runs (no timings). */
export function comparable(r: CompletionResult): Omit<CompletionResult, "ttft_ms" | "latency_ms" | "speculative"> {
  const { ttft_ms: _t, latency_ms: _l, speculative: _s, ...rest } = r;
  return rest;
}

/** A result as two runs of one request must agree on it: no timings, no cache counts, each tool call as its function (call ids are random). */
export function sameOutputView(r: CompletionResult) {
  return { ...comparable(r), cached_tokens: 0, cached_tokens_memory: 0, tool_calls: r.tool_calls?.map((c) => c.function) };
}

/** Each request run alone, the prefix cache emptied before each: what a batch of them must equal. */
export async function eachAlone(llm: LLM, requests: readonly GenerateRequest[]): Promise<ReturnType<typeof sameOutputView>[]> {
  const alone: ReturnType<typeof sameOutputView>[] = [];
  for (const r of requests) {
    if (!(await llm.client.resetPrefixCache())) throw new Error("the prefix cache could not be emptied: a request still holds blocks");
    alone.push(...(await llm.generate([r])).map(sameOutputView));
  }
  return alone;
}
