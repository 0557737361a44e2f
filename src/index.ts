/**
 * pagellm's public library API. The CLI uses exactly these.
 *
 *   import { LLM } from "pagellm";
 *   const llm = LLM.load({ model: "stories260K.bin", tokenizer: "tok512.bin", engine: { threads: 2 } });
 *   const [r] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 100, temperature: 0 }]);
 *   for await (const ev of llm.stream([{ prompt: "The dog" }])) if (ev.kind === "text") process.stdout.write(ev.delta);
 *   llm.close();
 */

// ---- load a model, tokenize, generate
export {
  LLM,
  type CompletionResult,
  type GenerateRequest,
  type GenerationEvent,
  type LoadOptions,
  type OpenOptions,
  type SpeculationResult,
  type StreamOptions,
} from "./engine/llm.ts";
export { LLMEngine, DEFAULT_ENGINE_OPTIONS, type EngineOptions, type EngineStats, type NewRequest, type StepEvent } from "./engine/engine.ts";
export { Sequence, type FinishReason, type GenerationParams } from "./engine/sequence.ts";
export { Sampler, DEFAULT_SAMPLING, argmax, type SamplingParams } from "./engine/sampler.ts";
export { Scheduler, type SchedulePolicy, type SchedulerOptions, type SchedulerOutput } from "./engine/scheduler.ts";
export {
  DEFAULT_SPECULATIVE, Drafter, type SpeculationCounts, type SpeculativeMethod, type SpeculativeOptions,
} from "./engine/speculative.ts";
export { proposeNgram, type NgramRange } from "./engine/ngram-proposer.ts";
export { ChatHistory, CHAT_TEMPLATES, userTurnIds, type ChatTemplateName } from "./chat/builtin-formats.ts";
export type { EncodeOptions, StreamDecoder, Tokenizer } from "./tokenizer/tokenizer.ts";
export { loadTokenizer, type LoadedTokenizer } from "./tokenizer/load.ts";
export { SpmTokenizer } from "./tokenizer/spm.ts";

// ---- backends: the forward pass on WebAssembly or WebGPU, behind one interface
//   const llm = await LLM.open({ model: "stories260K.gguf", device: "auto" }); // llm.device says which and why
export type { ModelForward, DeviceKind } from "./engine/model-forward.ts";
export { chooseDevice, webgpuRefusal, type ChosenDevice } from "./backend/device-choice.ts";
export { selectDevice, acquireGpu, type DeviceChoice, type GpuAdapterSummary } from "./backend/webgpu/device.ts";
export { WebGpuBackend, type BackendOptions } from "./backend/webgpu/backend.ts";

// ---- models and files
export { openCheckpoint } from "./model/load.ts";
export { readLlama2cCheckpoint } from "./model/llama2c.ts";
export { readGGUF, GGUFFile } from "./model/gguf.ts";
export { makeConfig, type ModelConfig, type RopeStyle } from "./model/config.ts";
export type { Checkpoint, TensorInfo } from "./model/checkpoint.ts";
export { writeLlama2c, quantizeQ80, type Llama2cWeights, type Llama2cFormat } from "./model/llama2c-writer.ts";
export { randomWeights } from "./model/random-weights.ts";

// ---- the KV cache with automatic prefix caching
export {
  KVCacheManager,
  KVCacheBlock,
  Request,
  hashBlockTokens,
  measureHashCost,
  FreeKVCacheBlockQueue,
  LoraExtraKey,
  MultimodalExtraKey,
  CacheSaltExtraKey,
  ROOT_PARENT_HASH,
  EVICTION_POLICIES,
  HASH_ALGORITHMS,
  type BlockHash,
  type ComputedBlocks,
  type EvictionPolicyName,
  type HashAlgorithm,
  type KVCacheManagerOptions,
  type MultimodalItem,
  type RequestOptions,
} from "./kv/index.ts";

// ---- errors
export {
  PagellmError,
  ModelFormatError,
  InputError,
  RequestTooLongError,
  WorkerPoolError,
  DeviceError,
} from "./errors.ts";
