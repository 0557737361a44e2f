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
} from "./llm/llm.ts";
// ---- embeddings and reranking (encoders; decoder embedders)
//   const llm = await LLM.open({ model: "bge-small-Q8_0.gguf" }); // llm.capabilities says what it can do
//   const { embeddings } = await llm.embed(["a text", [101, 7592, 102]], { dimensions: 128 });
export type {
  EmbedInput, EmbedOptions, EmbedResult, Embedding, ModelCapabilities, Pooling, RerankOptions, RerankResult, RerankScore,
} from "./embed/embed-types.ts";
export { MAX_LOGPROBS, MAX_STOPS, MAX_LOGIT_BIAS, MAX_PENALTY, type RequestInput } from "./llm/generate-request.ts";
export { DEFAULT_ENGINE_OPTIONS, DEFAULT_CONTEXT, type EngineOptions } from "./engine/engine-options.ts";

// ---- the front door: every request, score and statistic goes through it (llm.client)
//   const stream = llm.client.submit({ prompt: "Once upon a time", maxTokens: 16, n: 2 });
//   for await (const out of stream) process.stdout.write(out.text); // immutable snapshots, step by step
export {
  EngineClient,
  type ClientStats,
  type EngineInfo,
  type ScoreRequest,
  type ScoreResult,
  type StepReport,
  type SubmitOptions,
} from "./llm/engine-client.ts";
export { PreparedRequest, type PrepareOptions } from "./llm/input-processor.ts";
export type { EngineStats } from "./engine/engine.ts";
export type { EngineOutput, FinishReason, OutputTiming, OutputUsage } from "./engine/engine-output.ts";
export { OutputStream, type SubmittedRequest } from "./llm/output-stream.ts";
export { Sampler, DEFAULT_SAMPLING, argmax, type SamplingParams } from "./engine/sampler.ts";
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
export type { ModelForward, DeviceKind } from "./backend/model-forward.ts";
export { chooseDevice, webgpuRefusal, type ChosenDevice } from "./backend/device-choice.ts";
export { selectDevice, acquireGpu, type DeviceChoice, type GpuAdapterSummary } from "./backend/webgpu/device.ts";
export { WebGpuBackend, type BackendOptions } from "./backend/webgpu/backend.ts";

// ---- models and files
export { openCheckpoint } from "./model/load.ts";
export { readLlama2cCheckpoint } from "./model/llama2c.ts";
export { readGGUF, GGUFFile } from "./model/gguf.ts";
export { makeConfig, type ModelConfig, type RopeStyle } from "./model/config.ts";
export type { Checkpoint, TensorInfo } from "./model/checkpoint.ts";
export { writeLlama2c, quantizeQ80, type Llama2cWeights, type Llama2cFormat } from "./synth/llama2c-writer.ts";
export { randomWeights } from "./synth/random-weights.ts";

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
  RequestFieldError,
  QueueFullError,
  EngineClosedError,
  WorkerPoolError,
  DeviceError,
  ModelCapabilityError,
} from "./errors.ts";
