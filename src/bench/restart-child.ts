/**
 * One process of `bench prefix --restart`: loads the model (with the disk tier when the job names a
 * folder), runs one greedy request, flushes the tier, and prints the result and the tier's counters
 * as one JSON line. Run by prefix-restart.ts as `bun restart-child.ts JOB_JSON`, so each request
 * meets a fresh process: an empty memory pool, the disk as the only cache.
 */
import { LLM } from "../llm/llm.ts";
import type { RestartJob, RestartChildResult } from "./prefix-restart.ts";

const job = JSON.parse(process.argv[2] ?? "{}") as RestartJob;
const llm = LLM.load({ model: job.model, tokenizer: job.tokenizer, engine: job.engine, kvCacheDir: job.kvCacheDir ?? undefined });
try {
  const [result] = await llm.generate([{ promptTokenIds: job.promptTokenIds, maxTokens: 1, temperature: 0 }]);
  await llm.flush();
  if (result === undefined || result.finish_reason === "error") throw new Error(`request failed: ${result?.error ?? "no result"}`);
  const out: RestartChildResult = { result, tier: llm.stats().tier, loadMs: llm.loadMs };
  process.stdout.write(`${JSON.stringify(out)}\n`);
} finally {
  llm.close();
}
