/**
 * Run as a child process by test/memory-footprint.test.ts: loads MODEL at --ctx-size CTX on
 * WebAssembly (one thread), generates 8 tokens, and prints JSON: the resident set after the load
 * and after the generation, and the total `pagellm info` reports for the model at that context
 * and the run's KV type.
 */
import { LLM } from "../../src/llm/llm.ts";
import { estimateMemory, summarizeModel } from "../../src/hub/summary.ts";
import { readGGUF } from "../../src/model/gguf.ts";

const [model, ctx] = process.argv.slice(2);
const ctxSize = Number(ctx);
const llm = LLM.load({ model: model!, engine: { threads: 1, ctxSize } });
const afterLoad = process.memoryUsage().rss;
await llm.generate([{ prompt: "Once upon a time", maxTokens: 8, temperature: 0 }]);
const afterGenerate = process.memoryUsage().rss;
const info = estimateMemory(summarizeModel(model!, readGGUF(model!)), ctxSize, llm.info.kvLayout.type);
llm.close();
process.stdout.write(JSON.stringify({ afterLoad, afterGenerate, infoTotal: info.totalBytes, infoWeights: info.weightBytes }));
