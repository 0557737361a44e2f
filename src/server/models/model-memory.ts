/**
 * What a model will hold in memory before it is loaded, for the registry's budget: the engine's
 * own memory plan (engine/memory-plan.ts) for the options it will be loaded with, the same sizes
 * buildEngine plans (context, KV type and pool, step buffers, weights placed over WebAssembly
 * memories), read from the file's header and tensor table only. An encoder (an embedding model
 * without an engine) holds about its file. Once loaded, the registry counts what the engine
 * measures instead (EngineStats.memoryBytes).
 */
import { statSync } from "node:fs";
import { memoryLimitBytes } from "../../backend/wasm/placement.ts";
import { defaultNumBlocks, fitToVocabulary, logitRows, withContext, type EngineOptions } from "../../engine/engine-options.ts";
import { planMemory } from "../../engine/memory-plan.ts";
import { kvLayout, resolveKVType } from "../../kv/kv-layout.ts";
import { isEncoderFile } from "../../model/encoder.ts";
import { readGGUF } from "../../model/gguf.ts";
import { readGGUFCheckpoint } from "../../model/gguf-checkpoint.ts";
import { isGGUF, openCheckpoint } from "../../model/load.ts";

/** Bytes the model at `path` will hold once loaded with `options` on WebAssembly (ModelFormatError for a bad file). */
export function estimateModelBytes(path: string, options: EngineOptions): number {
  const gguf = isGGUF(path) ? readGGUF(path) : null;
  if (gguf !== null && isEncoderFile(gguf)) return statSync(path).size;
  const checkpoint = gguf === null ? openCheckpoint(path) : readGGUFCheckpoint(path, gguf);
  const config = withContext(checkpoint.config, options.ctxSize);
  const o = fitToVocabulary(options, config);
  const layout = kvLayout(config, o.blockSize, resolveKVType(config, checkpoint.format, o.kvType).type);
  const numBlocks = o.numBlocks ?? defaultNumBlocks(config, o, layout, Infinity);
  const shape = {
    maxTokens: o.maxNumBatchedTokens, maxSeqs: o.maxNumSeqs, maxLogits: logitRows(o), blockSize: o.blockSize, numBlocks, kvBlockBytes: layout.blockBytes, threads: o.threads,
  };
  return planMemory(checkpoint, config, shape, memoryLimitBytes(o.wasmMemoryMb), Infinity).totalBytes;
}
