/**
 * A child process of the disk KV cache tests: one "process lifetime" of an LLM over a cache folder.
 * argv[2] is a JSON job: { model, tokenizer?, kvCacheDir?, engine, requests }; prints the results
 * and the tier's counters as one JSON line.
 */
import { LLM, type GenerateRequest } from "../../src/llm/llm.ts";
import type { EngineOptions } from "../../src/engine/engine-options.ts";

interface Job {
  model: string;
  tokenizer?: string;
  kvCacheDir?: string;
  engine: Partial<EngineOptions>;
  requests: GenerateRequest[];
}

const job = JSON.parse(process.argv[2]!) as Job;
const warnings: string[] = [];
const llm = LLM.load({ model: job.model, tokenizer: job.tokenizer, engine: job.engine, kvCacheDir: job.kvCacheDir, onWarning: (l) => warnings.push(l) });
const results = await llm.generate(job.requests);
await llm.flush();
process.stdout.write(`${JSON.stringify({ results, tier: llm.stats().tier, warnings })}\n`);
llm.close();
