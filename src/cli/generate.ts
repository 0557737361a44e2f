/**
 * `pagellm generate`: run one prompt (text streamed to stdout as it is generated) or many (files,
 * a folder, a JSONL of requests) together through the continuous-batching engine, each result
 * written and flushed the moment its request finishes.
 */
import { defineCommand, type ArgsDef } from "citty";
import { InputError, RequestTooLongError } from "../errors.ts";
import { kvCacheSummary } from "../engine/engine-builder.ts";
import type { CompletionResult } from "../llm/completion.ts";
import type { PreparedRequest } from "../llm/input-processor.ts";
import type { GenerateRequest } from "../llm/generate-request.ts";
import type { LLM } from "../llm/llm.ts";
import { jsonlRequests, promptFileRequests, promptRequest, promptsDirRequests, requestErrorText, type InputRequest } from "./inputs.ts";
import {
  checkKnownOptions, engineArgs, engineOptions, modelArgs, speculativeArgs, repeated, requestDefaults, samplingArgs, type ParsedValues, type RequestDefaults,
} from "./options.ts";
import { loadLLM, noteChatFormat } from "./load.ts";
import { imageArgs, imageInputs, withVision, type ImageInputs } from "./image-options.ts";
import type { VisionModel } from "../vision/vision-model.ts";
import { constraintArgs, constraintOption } from "./constraint-options.ts";
import { ProgressBar } from "./batch-progress.ts";
import { ResultsFile } from "./results-file.ts";
import { InterruptedError, onInterrupt } from "./interrupt.ts";
import { info } from "./output.ts";
import { diskTierLine } from "./cache-command.ts";

export const generateArgs = {
  ...modelArgs,
  prompt: { type: "string", description: "Prompt text", valueHint: "text" },
  "prompt-file": { type: "string", description: "Read a prompt from a file, - for stdin (repeatable: runs them together)", valueHint: "path" },
  "prompts-dir": { type: "string", description: "Run every *.txt file in a folder", valueHint: "dir" },
  prompts: {
    type: "string",
    description:
      'JSONL file, one request per line: {"id","prompt"|"prompt_file"|"messages","max_tokens","temperature","top_p","top_k","min_p","repetition_penalty",' +
      '"repeat_last_n","frequency_penalty","presence_penalty","logit_bias","seed","stop","cache_salt","logprobs","ignore_eos","chat_template_kwargs","reasoning_budget",' +
      '"response_format"|"json_schema"|"grammar"|"structured_outputs"|"guided_json"|"guided_regex"|"guided_choice"|"guided_grammar"}',
    valueHint: "path",
  },
  output: { type: "string", description: "Write each result as a JSON line to this file as soon as it finishes", valueHint: "path" },
  resume: { type: "boolean", description: "Keep the results already in --output and skip their ids" },
  json: { type: "boolean", description: "Print one JSON result per request on stdout instead of text" },
  chat: { type: "boolean", description: "Send each prompt as a user message in the chat template (the model's own unless --template names one)" },
  system: { type: "string", description: "System prompt of --chat requests", valueHint: "text" },
  template: { type: "string", description: "Chat format of --chat and \"messages\" requests: raw | llama2 | chatml | a Jinja file (default: the model's own template; ChatML for a model without one)", valueHint: "name|file" },
  "chat-template-kwargs": { type: "string", description: 'More chat template variables as a JSON object, e.g. \'{"enable_thinking": false}\' for Qwen3', valueHint: "json" },
  ...samplingArgs,
  ...constraintArgs,
  ...imageArgs,
  ...engineArgs,
  ...speculativeArgs,
} as const satisfies ArgsDef;

export const generateCommand = defineCommand({
  meta: { name: "generate", description: "Generate text for one or many prompts" },
  args: generateArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, generateArgs);
    await runGenerate(args, rawArgs);
  },
});

async function runGenerate(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const defaults = requestDefaults(values, rawArgs);
  const constraint = constraintOption(values, rawArgs);
  if (constraint !== null) defaults.constraint = constraint.spec;
  const inputs = collectInputs(values, rawArgs, defaults);
  const output = typeof values.output === "string" ? ResultsFile.open(values.output, values.resume === true) : null;
  if (values.resume === true && output === null) throw new InputError("--resume needs --output");
  if (values.logprobs !== undefined && values.json !== true && output === null) {
    throw new InputError("--logprobs adds log-probabilities to JSON results: give --json or --output FILE too");
  }
  const images = imageInputs(values, rawArgs);
  if (images !== null && (inputs.length !== 1 || values.chat === true || !("request" in inputs[0]!) || inputs[0].request.prompt === undefined)) {
    throw new InputError("--image goes with one text prompt (--prompt or --prompt-file) holding a <__media__> marker per image, without --chat");
  }
  let todo = inputs.filter((r) => !output?.doneIds.has("request" in r ? r.request.id! : r.rejected.id));
  const llm = await loadLLM(values);
  if (images !== null) todo = await withVision(llm, images.mmproj, engineOptions(values).threads, async (vision) => todo.map((r) => imagePrompt(r, vision, images, llm)));
  if (values.chat === true || todo.some((r) => "request" in r && r.request.messages !== undefined)) noteChatFormat(llm, "--template");
  const json = values.json === true;
  const streamText = !json && todo.length === 1 && inputs.length === 1 && output === null;
  const sink = new ResultSink(output, json, streamText);
  const requests: PreparedRequest[] = [];
  for (const r of todo) {
    if ("rejected" in r) {
      sink.rejected(r.rejected.id, r.rejected.error);
      continue;
    }
    try {
      requests.push(llm.client.prepare(values.chat === true ? asChat(r.request, values) : r.request));
    } catch (e) {
      if (!(e instanceof InputError || e instanceof RequestTooLongError)) throw e;
      sink.rejected(r.request.id!, requestErrorText(e, r.where, r.line, r.constraintLabel ?? constraint?.option));
    }
  }

  const controller = new AbortController();
  const stopListening = onInterrupt(() => controller.abort());
  const progress = new ProgressBar();
  const t0 = performance.now();
  try {
    for await (const event of llm.stream(requests, { signal: controller.signal })) {
      if (event.kind === "text") {
        if (streamText) process.stdout.write(event.delta);
        continue;
      }
      sink.done(event.result);
      if (!streamText) {
        const s = llm.stats();
        progress.update({
          done: sink.finished, total: requests.length, generatedTokens: sink.generatedTokens,
          cacheHitRate: s.prefixQueries === 0 ? 0 : s.prefixHits / s.prefixQueries,
        });
      }
    }
  } finally {
    stopListening();
    progress.end();
    output?.close();
    await llm.flush();
  }
  // A streamed reply cut short still ends its line.
  if (streamText && controller.signal.aborted) process.stdout.write("\n");
  // Stats describe work done: a run whose every request was rejected ends with just the error.
  if (sink.generatedTokens > 0 || sink.finished > sink.errors.length) reportStats(llm, sink, (performance.now() - t0) / 1000);
  if (controller.signal.aborted) {
    throw new InterruptedError(
      `interrupted: ${sink.finished} of ${requests.length} requests finished` + (output ? `, results in ${output.path}` : ""),
    );
  }
  if (sink.errors.length > 0) {
    throw new RequestTooLongError(sink.errors.length === 1 ? sink.errors[0]! : `${sink.errors.length} requests were rejected (see their results)`);
  }
}

/** A text prompt with images in place of its markers: token ids and the images' spans (VisionModel.prompt). */
function imagePrompt(r: InputRequest, vision: VisionModel, images: ImageInputs, llm: LLM): InputRequest {
  if (!("request" in r) || r.request.prompt === undefined) return r;
  const { prompt, ...rest } = r.request;
  const p = vision.prompt(prompt, images.images, llm.tokenizer, llm.addBos);
  return { ...r, request: { ...rest, promptTokenIds: p.tokens, embeds: p.embeds } };
}

/** A prompt as a user message (after the --system prompt, when given) of a chat request. */
function asChat(request: GenerateRequest, values: ParsedValues): GenerateRequest {
  if (request.prompt === undefined) return request;
  const system = typeof values.system === "string" && values.system !== "" ? [{ role: "system", content: values.system }] : [];
  const { prompt, ...rest } = request;
  return { ...rest, messages: [...system, { role: "user", content: prompt }] };
}

function collectInputs(values: ParsedValues, rawArgs: readonly string[], defaults: RequestDefaults): InputRequest[] {
  const inputs: InputRequest[] = [];
  if (typeof values.prompt === "string") inputs.push(promptRequest(values.prompt, defaults));
  inputs.push(...promptFileRequests(repeated(rawArgs, "prompt-file"), defaults));
  if (typeof values["prompts-dir"] === "string") inputs.push(...promptsDirRequests(values["prompts-dir"], defaults));
  if (typeof values.prompts === "string") inputs.push(...jsonlRequests(values.prompts, defaults));
  if (inputs.length === 0) throw new InputError("nothing to generate: give --prompt, --prompt-file, --prompts-dir or --prompts");
  const ids = new Set<string>();
  for (const r of inputs) {
    const id = "request" in r ? r.request.id! : r.rejected.id;
    if (ids.has(id)) throw new InputError(`two requests have the id "${id}"`);
    ids.add(id);
  }
  return inputs;
}

/** Where finished results go: the output file, JSON lines on stdout, or text blocks on stdout. */
class ResultSink {
  finished = 0;
  generatedTokens = 0;
  promptTokens = 0;
  cachedTokens = 0;
  readonly errors: string[] = [];
  /** The result, when exactly one request finished. */
  single: CompletionResult | null = null;
  private firstTokenSeconds: number[] = [];

  constructor(
    private readonly output: ResultsFile | null,
    private readonly json: boolean,
    private readonly streamed: boolean,
  ) {}

  rejected(id: string, error: string): void {
    this.done({
      id, prompt_tokens: 0, cached_tokens: 0, cached_tokens_memory: 0, cached_tokens_disk: 0, completion_tokens: 0, token_ids: [], text: "",
      finish_reason: "error", ttft_ms: 0, latency_ms: 0, error,
    });
  }

  done(result: CompletionResult): void {
    // An aborted request is not a result: --resume runs it again.
    if (result.finish_reason === "abort") return;
    this.finished++;
    this.single = this.finished === 1 ? result : null;
    this.generatedTokens += result.completion_tokens;
    this.promptTokens += result.prompt_tokens;
    this.cachedTokens += result.cached_tokens;
    this.firstTokenSeconds.push(result.ttft_ms / 1000);
    if (result.error !== undefined) {
      this.errors.push(`${result.id}: ${result.error}`);
      if (this.streamed || !(this.json || this.output)) return;
    }
    this.output?.write(result);
    if (this.json) process.stdout.write(JSON.stringify(result) + "\n");
    else if (this.streamed) process.stdout.write("\n");
    else if (!this.output) process.stdout.write(`==> ${result.id} <==\n${result.text}\n\n`);
  }

  get meanTtftSeconds(): number {
    return this.firstTokenSeconds.reduce((a, b) => a + b, 0) / Math.max(1, this.firstTokenSeconds.length);
  }
}

/** ", 3 WebAssembly memories" when the model is placed over several. */
function memoriesNote(llm: LLM): string {
  const n = llm.info.numMemories;
  return n > 1 && llm.info.device === "wasm" ? `, ${n} WebAssembly memories` : "";
}

/** The device and why, load time, prompt speed and generation speed, on stderr. */
function reportStats(llm: LLM, sink: ResultSink, seconds: number): void {
  const s = llm.stats();
  const hitRate = s.prefixQueries === 0 ? 0 : (100 * s.prefixHits) / s.prefixQueries;
  const rate = (tokens: number, secs: number) => (secs > 0 ? (tokens / secs).toFixed(1) : "-");
  const lines = [llm.device, `load: ${llm.loadMs.toFixed(0)} ms (${llm.checkpoint.format}, ${kvCacheSummary(llm.info.kvLayout, llm.info.numBlocks)}${memoriesNote(llm)})`];
  const one = sink.single;
  if (one !== null) {
    const computed = one.prompt_tokens - one.cached_tokens;
    const decodeSecs = (one.latency_ms - one.ttft_ms) / 1000;
    const cached = one.cached_tokens_disk > 0 ? `${one.cached_tokens} cached, ${one.cached_tokens_disk} from disk` : `${one.cached_tokens} cached`;
    lines.push(
      `prompt: ${one.prompt_tokens} tokens (${cached}) in ${one.ttft_ms.toFixed(1)} ms, ${rate(computed, one.ttft_ms / 1000)} tokens/s`,
      `generation: ${one.completion_tokens} tokens in ${decodeSecs.toFixed(2)} s, ${rate(Math.max(0, one.completion_tokens - 1), decodeSecs)} tokens/s`,
    );
  } else {
    lines.push(
      `requests: ${sink.finished} in ${seconds.toFixed(2)} s; prompts ${sink.promptTokens} tokens (${sink.cachedTokens} cached, ${s.prefixTierHits} from disk), mean time to first token ${(1000 * sink.meanTtftSeconds).toFixed(1)} ms`,
      `generation: ${sink.generatedTokens} tokens, ${rate(sink.generatedTokens, seconds)} tokens/s overall`,
    );
  }
  lines.push(`prefix cache: hit rate ${hitRate.toFixed(1)}%, ${s.evictions} evictions, ${s.preemptions} preemptions`);
  const spec = llm.info.speculative;
  if (spec !== null) {
    const rate = s.draftedTokens === 0 ? "" : ` (acceptance ${((100 * s.acceptedTokens) / s.draftedTokens).toFixed(1)}%)`;
    lines.push(`speculative (${spec.method}, up to ${spec.tokens} tokens): ${s.draftedTokens} drafted, ${s.acceptedTokens} accepted${rate}`);
  }
  if (s.tier !== null) lines.push(diskTierLine(s.tier));
  for (const line of lines) info(line);
}
