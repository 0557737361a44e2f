/**
 * `pagellm bench serve`: a seeded serving workload against any OpenAI-compatible server (--url),
 * or, given a model (default: random SmolLM2-135M-shaped Q8_0), against `pagellm serve` started
 * here, with the serving floors (throughput, cached TTFT) measured in the same run and, with --llama-server, llama.cpp's
 * server on the same file for the aims. The measuring lives in src/bench/serve/.
 */
import { defineCommand, type ArgsDef } from "citty";
import { existsSync, statSync } from "node:fs";
import { InputError, ServerError } from "../errors.ts";
import { isGGUF } from "../model/load.ts";
import { isModelMix, MODEL_MIXES, type ModelMix } from "../synth/gguf-model-writer.ts";
import { benchModel, DEFAULT_MODELS_DIR, parseShape, SHAPE_HELP } from "../bench/bench-models.ts";
import { commonArgs, nonNegInt, posint, str } from "./bench-options.ts";
import { progress, reportText } from "../bench/bench-report.ts";
import { makeReport } from "../bench/schema.ts";
import { runFailure, runServeBench, type LocalServers, type RemoteServer, type ServeBenchOptions, type WorkloadShapes } from "../bench/serve/serve-bench.ts";
import { apiBaseOf } from "../bench/serve/openai-client.ts";
import { serveNotes, serveTables } from "../bench/serve/serve-report.ts";
import { SERVE_WORKLOADS, type ServeWorkloadName } from "../bench/serve/serve-workloads.ts";
import { benchOutputArgs, startRun, writeOutputs } from "./bench-output.ts";
import { checkKnownOptions, type ParsedValues } from "./options.ts";

/** The model the serving floors and aims are set for: SmolLM2-135M's shape in Q8_0 at 2 threads. */
const DEFAULT_SHAPE = "smollm2-135m";
const DEFAULT_MIX: ModelMix = "Q8_0";
const DEFAULT_THREADS = 2;
/** A --url server's vocabulary is unknown: token ids stay below the smallest common size (Llama 2's). */
const DEFAULT_VOCAB = 32000;

export const benchServeArgs = {
  ...benchOutputArgs,
  seed: commonArgs.seed,
  url: {
    type: "string",
    description: "An OpenAI-compatible server to bench (pagellm serve, llama-server, vLLM, ...), e.g. http://127.0.0.1:8080; without it, pagellm serve is started here on --model",
    valueHint: "url",
  },
  model: {
    type: "string",
    description: `With --url: the request's model name (default: the first of /v1/models). Without: the GGUF file to serve (default: random ${DEFAULT_SHAPE} ${DEFAULT_MIX}, written once into --models-dir)`,
    valueHint: "name|path",
  },
  "api-key": { type: "string", description: "With --url: sent as Authorization: Bearer KEY (default: $OPENAI_API_KEY if set)", valueHint: "key" },
  workload: { type: "string", description: `${SERVE_WORKLOADS.join(" | ")} (default prefix)`, valueHint: "name" },
  concurrency: { type: "string", description: "Requests in flight at once (default 4)", valueHint: "n" },
  requests: { type: "string", description: "Requests of the prefix and random workloads (default 40)", valueHint: "n" },
  prefixes: { type: "string", description: "prefix: shared prefixes (default 5)", valueHint: "n" },
  "prefix-tokens": { type: "string", description: "prefix: tokens of each shared prefix (default 512)", valueHint: "n" },
  "suffix-tokens": { type: "string", description: "prefix: unique tokens after it (default 64)", valueHint: "n" },
  "prompt-tokens": { type: "string", description: "random: prompt tokens of each request (default 512)", valueHint: "n" },
  "output-tokens": { type: "string", description: "Tokens each request generates (default 32)", valueHint: "n" },
  conversations: { type: "string", description: "chat: conversations interleaved (default 16)", valueHint: "n" },
  turns: { type: "string", description: "chat: turns of each conversation (default 4)", valueHint: "n" },
  "user-words": { type: "string", description: "chat: words of each user message (default 64)", valueHint: "n" },
  "system-words": { type: "string", description: "chat: words of a system prompt every conversation shares (default 0: none)", valueHint: "n" },
  "time-limit": { type: "string", description: "Seconds after which a run sends nothing new and cuts what still streams (default 600)", valueHint: "s" },
  "ignore-eos": { type: "boolean", default: true, description: "Send ignore_eos so every reply has exactly --output-tokens tokens (--no-ignore-eos for servers that reject it)" },
  "vocab-size": { type: "string", description: `With --url: token ids of prompts are drawn below this (default ${DEFAULT_VOCAB}; a local model's own size otherwise)`, valueHint: "n" },
  "cold-probe": {
    type: "boolean",
    description:
      "chat: before each turn send it with max_tokens 1 warm, then cold (pagellm serve and --url: a fresh cache_salt; llama-server: cache_prompt false " +
      "on a slot of its own, added to --llama-slots) and report per turn the prompt and cached tokens, time to the first token warm and cold, their " +
      "ratio and whether the tokens match; needs --concurrency 1",
  },
  "probe-reps": { type: "string", description: "Repetitions of the cold vs fully cached TTFT measurement (default 3; 0: skip it)", valueHint: "n" },
  shape: { type: "string", description: `Without --url or --model: shape of the random GGUF model: ${SHAPE_HELP} (default ${DEFAULT_SHAPE})`, valueHint: "shape" },
  type: { type: "string", description: `Its tensor type or mix: ${Object.keys(MODEL_MIXES).join(" | ")} (default ${DEFAULT_MIX})`, valueHint: "mix" },
  "models-dir": { type: "string", description: "Cache folder of random models (default: models/ in pagellm's folder)", valueHint: "dir" },
  threads: { type: "string", description: `Threads of the servers started here and of the in-process baseline (default ${DEFAULT_THREADS})`, valueHint: "n" },
  "llama-server": {
    type: "string",
    description: "llama.cpp's llama-server binary: also run it on the same model file, threads and --llama-slots, one after the other, for the aims",
    valueHint: "path",
  },
  "llama-slots": { type: "string", description: "llama-server's parallel slots, -np (default: --concurrency)", valueHint: "n" },
  "llama-args": { type: "string", description: "More llama-server flags, space-separated, e.g. \"--cache-ram 0\"", valueHint: "flags" },
  "pagellm-args": {
    type: "string",
    description: "More pagellm serve flags, space-separated, e.g. \"--max-prefill-while-decoding 512\" (the in-process baseline does not take them)",
    valueHint: "flags",
  },
  "ready-timeout": { type: "string", description: "Seconds a server started here may take to load (default 300)", valueHint: "s" },
} as const satisfies ArgsDef;

function workloadOf(values: ParsedValues): ServeWorkloadName {
  const raw = str(values, "workload") ?? "prefix";
  if (!(SERVE_WORKLOADS as readonly string[]).includes(raw)) throw new InputError(`--workload: "${raw}" is not one of ${SERVE_WORKLOADS.join(", ")}`);
  return raw as ServeWorkloadName;
}

function shapesOf(values: ParsedValues): WorkloadShapes {
  const requests = posint(values, "requests", 40);
  const outputTokens = posint(values, "output-tokens", 32);
  return {
    prefix: { prefixes: posint(values, "prefixes", 5), prefixTokens: posint(values, "prefix-tokens", 512), suffixTokens: posint(values, "suffix-tokens", 64), requests, outputTokens },
    random: { requests, promptTokens: posint(values, "prompt-tokens", 512), outputTokens },
    chat: {
      conversations: posint(values, "conversations", 16), turns: posint(values, "turns", 4), userWords: posint(values, "user-words", 64),
      systemWords: nonNegInt(values, "system-words", 0), outputTokens,
    },
  };
}

/** Options that only mean something with (or without) --url. */
const LOCAL_ONLY = ["shape", "type", "models-dir", "threads", "llama-server", "llama-slots", "llama-args", "pagellm-args", "ready-timeout"];
const URL_ONLY = ["api-key", "vocab-size"];

function remoteServer(values: ParsedValues, url: string): RemoteServer {
  const given = LOCAL_ONLY.find((o) => str(values, o) !== undefined);
  if (given !== undefined) throw new InputError(`--${given} is for servers started here; with --url the server is yours`);
  const key = str(values, "api-key") ?? process.env.OPENAI_API_KEY;
  return { kind: "url", apiBase: apiBaseOf(url), apiKey: key === undefined || key === "" ? null : key, model: str(values, "model") ?? null };
}

/** A space-separated list of flags (none for an empty or absent one). */
function flagsOf(values: ParsedValues, name: string): string[] {
  return (str(values, name) ?? "").split(/\s+/).filter((f) => f !== "");
}

function localServers(values: ParsedValues, workload: ServeWorkloadName, concurrency: number): LocalServers {
  const given = URL_ONLY.find((o) => str(values, o) !== undefined);
  if (given !== undefined) throw new InputError(`--${given} is for a --url server`);
  // Checked before a model is written.
  const llamaServer = str(values, "llama-server") ?? null;
  if (llamaServer !== null && !(existsSync(llamaServer) && statSync(llamaServer).isFile())) throw new InputError(`--llama-server ${llamaServer}: no such file`);
  const llamaArgs = flagsOf(values, "llama-args");
  if (llamaArgs.length > 0 && llamaServer === null) throw new InputError("--llama-args needs --llama-server");
  const file = str(values, "model");
  const modelsDir = str(values, "models-dir") ?? DEFAULT_MODELS_DIR;
  let model;
  if (file !== undefined) {
    if (str(values, "shape") !== undefined || str(values, "type") !== undefined) throw new InputError("--model serves a file: --shape and --type are for a random model");
    if (!existsSync(file)) throw new InputError(`${file}: model file not found`);
    if (!isGGUF(file)) throw new InputError(`${file}: bench serve starts servers on GGUF files (llama-server reads nothing else)`);
    model = benchModel({ model: file, shape: parseShape(DEFAULT_SHAPE), format: "f32", modelsDir }, progress);
  } else {
    const mix = str(values, "type") ?? DEFAULT_MIX;
    if (!isModelMix(mix)) throw new InputError(`--type: "${mix}" is not one of ${Object.keys(MODEL_MIXES).join(", ")}`);
    model = benchModel({ shape: parseShape(str(values, "shape") ?? DEFAULT_SHAPE), format: "f32", mix, modelsDir }, progress);
  }
  return {
    kind: "local", model, threads: posint(values, "threads", DEFAULT_THREADS), inProcess: workload !== "chat", llamaServer,
    llamaSlots: posint(values, "llama-slots", concurrency), llamaArgs, pagellmArgs: flagsOf(values, "pagellm-args"),
    readyTimeoutS: posint(values, "ready-timeout", 300),
  };
}

export const benchServeCommand = defineCommand({
  meta: {
    name: "serve",
    description:
      "Serving benchmark of an OpenAI-compatible server (--url), streamed: requests/s, output tokens/s, TTFT p50/p90/p99, inter-token latency, " +
      "end-to-end latency, cached-token share. Without --url: pagellm serve started here, with the serving floors (vs the same requests in-process; " +
      "cached vs cold TTFT) and, with --llama-server, the aims against llama.cpp on the same file",
  },
  args: benchServeArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, benchServeArgs);
    const run = startRun(args, rawArgs);
    const workload = workloadOf(args);
    const concurrency = posint(args, "concurrency", 4);
    const coldProbe = args["cold-probe"] === true;
    if (coldProbe && workload !== "chat") throw new InputError("--cold-probe sends chat turns again cold: it needs --workload chat");
    if (coldProbe && concurrency !== 1) throw new InputError("--cold-probe times each turn alone: it needs --concurrency 1");
    const url = str(args, "url");
    const server = url === undefined ? localServers(args, workload, concurrency) : remoteServer(args, url);
    const vocabSize = server.kind === "local" ? server.model.config.vocabSize : posint(args, "vocab-size", DEFAULT_VOCAB);
    if (vocabSize < 4) throw new InputError(`a vocabulary of ${vocabSize} tokens is too small to draw prompts from`);
    const shapes = shapesOf(args);
    const o: ServeBenchOptions = {
      workload, shapes, seed: nonNegInt(args, "seed", 1), vocabSize, concurrency, timeLimitS: posint(args, "time-limit", 600), ignoreEos: args["ignore-eos"] !== false,
      probe: { reps: nonNegInt(args, "probe-reps", 3), promptTokens: shapes.prefix.prefixTokens + shapes.prefix.suffixTokens },
      coldProbe, server,
    };
    const r = await runServeBench(o);
    const settings = {
      workload, concurrency, seed: o.seed, timeLimitS: o.timeLimitS, ignoreEos: o.ignoreEos, vocabSize, probeReps: o.probe.reps, coldProbe,
      ...(server.kind === "url" ? { url: server.apiBase } : { threads: server.threads, llamaServer: server.llamaServer !== null, llamaSlots: server.llamaSlots, llamaArgs: server.llamaArgs.join(" ") }),
      ...Object.fromEntries(Object.entries(shapes[workload]).map(([k, v]) => [k, v as number])),
    };
    const report = makeReport("serve", run.date, settings, serveNotes(r), r);
    writeOutputs({ doc: report, text: reportText(report, serveTables(r)) }, run.out);
    // Every finished figure is out: now the failures, as the run's error.
    const failure = runFailure(r);
    if (failure !== null) throw new ServerError(failure);
  },
});
