/**
 * `pagellm serve`: the OpenAI-compatible HTTP server (src/server/) on one model. Listens first
 * (so /health says 503 while the model loads), prints one line with the address and the model
 * once it serves, a line per request with --log-requests. SIGTERM or SIGINT: stop accepting,
 * let the running requests finish within --shutdown-timeout seconds, exit 0; a second signal
 * exits at once.
 */
import { defineCommand, type ArgsDef } from "citty";
import { basename } from "node:path";
import { InputError } from "../errors.ts";
import { apiKeyProblem } from "../server/auth.ts";
import { corsOriginProblem } from "../server/cors.ts";
import { PagellmServer, SERVER_DEFAULTS } from "../server/server.ts";
import { loadLLM, noteChatFormat } from "./load.ts";
import { kvCacheSummary } from "../engine/engine-builder.ts";
import type { ServerRequestDefaults } from "../server/generation-fields.ts";
import { checkKnownOptions, checkOptions, engineArgs, modelArgs, poolingArg, numberOption, repeated, seedOption, speculativeArgs, type ParsedValues } from "./options.ts";
import { info } from "./output.ts";
import { stepTraceAsked, traceSteps } from "./step-trace.ts";
import { DEFAULT_KEEP_ALIVE, manyModels, servesManyModels } from "./serve-models.ts";

export const serveArgs = {
  ...modelArgs,
  host: {
    type: "string",
    description: "Address(es) to listen on, comma-separated or repeated, one listener each on the same port (default 127.0.0.1: this machine only; 0.0.0.0 for every IPv4 interface, :: for every interface)",
    valueHint: "addr[,addr]",
  },
  port: { type: "string", description: "Port to listen on (default 8080; 0 = any free port)", valueHint: "n" },
  cors: {
    type: "string",
    description: "Let browser pages of these origins call the server (CORS): scheme://host[:port], comma-separated or repeated; * for any page, which lets every website the browser opens use the server (default: none)",
    valueHint: "origin[,origin]",
  },
  "api-key": { type: "string", description: "Require 'Authorization: Bearer KEY' on /v1/* (default: $PAGELLM_API_KEY, else none)", valueHint: "key" },
  "served-model-name": { type: "string", description: "The model's name in requests and responses (default: the model file's name)", valueHint: "name" },
  "chat-template": {
    type: "string",
    description: "Chat format of /v1/chat/completions: raw | llama2 | chatml | a Jinja template file (default: the model's own template; ChatML for a model without one)",
    valueHint: "name|file",
  },
  "chat-template-kwargs": { type: "string", description: 'More chat template variables as a JSON object, e.g. \'{"enable_thinking": false}\' for Qwen3', valueHint: "json" },
  "max-queue": {
    type: "string",
    description: "Sequences (prompts x n) that may wait for a place in the batch; more get 429 with Retry-After, a request with more alone 400 (default 256)",
    valueHint: "n",
  },
  "max-prompts": { type: "string", description: `Prompts one /v1/completions request may hold; more get 400 (default ${SERVER_DEFAULTS.maxPrompts})`, valueHint: "n" },
  "max-body-mb": { type: "string", description: "Largest request body in MiB; larger get 413 (default 8)", valueHint: "mb" },
  "body-timeout": { type: "string", description: `Seconds a client has to send a request's body, from its headers; slower get 408 and the connection closed (default ${SERVER_DEFAULTS.bodyTimeoutS})`, valueHint: "s" },
  "max-connections": { type: "string", description: `Requests in progress at once (receiving, waiting, generating, streaming); more get 429 (default ${SERVER_DEFAULTS.maxConnections})`, valueHint: "n" },
  "max-pending-body-mb": { type: "string", description: `MiB that request bodies still arriving may hold, all together; past it 429 (default ${SERVER_DEFAULTS.maxPendingBodyMb})`, valueHint: "mb" },
  "stall-timeout": { type: "string", description: `Seconds without progress of the engine loop, with requests pending, after which /health answers 503 (default ${SERVER_DEFAULTS.stallTimeoutS})`, valueHint: "s" },
  "shutdown-timeout": { type: "string", description: "Seconds running requests get to finish after SIGTERM/SIGINT (default 30)", valueHint: "s" },
  "log-requests": { type: "boolean", description: "Print a line per request on stderr" },
  "models-dir": {
    type: "string",
    description: "Serve every model in this folder (GGUF files, subfolders of one, a Hugging Face cache as `pagellm pull` fills it), each loaded when a request first names it",
    valueHint: "dir",
  },
  "models-preset": { type: "string", description: "Per-model options (TOML: a table per model; see docs/server.md): ctx-size, kv-type, threads, chat-template, pooling, aliases, pinned, keep-alive, model", valueHint: "file" },
  "memory-budget": { type: "string", description: "Memory all loaded models may hold together, in MiB or with a unit (8G); least recently used idle models are unloaded to fit (default: the memory available at start)", valueHint: "size" },
  "keep-alive": { type: "string", description: `How long a model stays loaded after its last request, with several models: a duration (5m, 1h), seconds, -1 for ever (default ${DEFAULT_KEEP_ALIVE}; a request's keep_alive overrides it)`, valueHint: "duration" },
  ...requestDefaultArgs(),
  ...poolingArg,
  ...engineArgs,
  ...speculativeArgs,
} as const satisfies ArgsDef;

export const serveCommand = defineCommand({
  meta: { name: "serve", description: "Serve the model (or several: --models-dir, --model NAME=PATH) over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /v1/models, /health, /metrics) and ollama's (/api/*)" },
  args: serveArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, serveArgs);
    await runServe(args, rawArgs);
  },
});

async function runServe(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const many = servesManyModels(values, rawArgs);
  if (!many && (typeof values.model !== "string" || values.model === "")) throw new InputError("--model is required (or --models-dir DIR)");
  const port = numberOption(values, "port", "int", { min: 0, max: 65535 }) ?? 8080;
  const maxQueue = numberOption(values, "max-queue", "posint") ?? 256;
  const maxPrompts = numberOption(values, "max-prompts", "posint") ?? SERVER_DEFAULTS.maxPrompts;
  const maxBodyMb = numberOption(values, "max-body-mb", "number", { min: 0, minOpen: true }) ?? 8;
  const shutdownSeconds = numberOption(values, "shutdown-timeout", "number", { min: 0 }) ?? 30;
  const bodyTimeoutS = numberOption(values, "body-timeout", "number", { min: 0, minOpen: true }) ?? SERVER_DEFAULTS.bodyTimeoutS;
  const maxConnections = numberOption(values, "max-connections", "posint") ?? SERVER_DEFAULTS.maxConnections;
  const maxPendingBodyMb = numberOption(values, "max-pending-body-mb", "number", { min: 0, minOpen: true }) ?? SERVER_DEFAULTS.maxPendingBodyMb;
  const stallTimeoutS = numberOption(values, "stall-timeout", "number", { min: 0, minOpen: true }) ?? SERVER_DEFAULTS.stallTimeoutS;
  const hosts = hostOption(rawArgs);
  const apiKey = serveApiKey(values);
  const corsOrigins = corsOption(rawArgs);
  const requestDefaults = serveRequestDefaults(values);
  const registry = many ? manyModels(values, rawArgs, maxQueue) : null;
  const name = registry !== null ? "" : typeof values["served-model-name"] === "string" && values["served-model-name"] !== "" ? values["served-model-name"] : basename(values.model as string);

  let server: PagellmServer;
  try {
    server = new PagellmServer({
      host: hosts, port, apiKey, maxBodyBytes: Math.floor(maxBodyMb * 2 ** 20), maxQueue, maxPrompts,
      logRequests: values["log-requests"] === true, modelName: name, log: (line) => process.stderr.write(`${line}\n`),
      bodyTimeoutMs: bodyTimeoutS * 1000, maxConnections, maxPendingBodyBytes: Math.floor(maxPendingBodyMb * 2 ** 20), stallTimeoutMs: stallTimeoutS * 1000,
      corsOrigins, requestDefaults,
    });
  } catch (e) {
    if (e instanceof InputError) throw e;
    throw new InputError(`cannot listen on ${hosts.join(", ")} port ${port}: ${(e as Error).message}`);
  }
  const shutdown = shutdownOnSignal(shutdownSeconds);
  if (registry !== null) {
    await serveMany(server, registry, shutdown.requested, shutdownSeconds).finally(() => shutdown.remove());
    return;
  }
  try {
    const llm = await loadLLM({ ...values, template: values["chat-template"] }, "--chat-template");
    noteChatFormat(llm, "--chat-template");
    server.ready(llm);
    const caps = llm.capabilities;
    if (caps.generate) {
      if (stepTraceAsked()) traceSteps(llm.client, (line) => process.stderr.write(`pagellm serve: ${line}\n`));
      const i = llm.info;
      process.stdout.write(`pagellm serve: ${server.urls.join(", ")} serving ${name} (${i.description}, ${i.maxPositions}-token context, ${kvCacheSummary(i.kvLayout, i.numBlocks)})\n`);
    } else {
      const what = caps.rerank ? "a reranker" : `an embedding model, pooling ${caps.pooling}`;
      process.stdout.write(`pagellm serve: ${server.urls.join(", ")} serving ${name} (${what}, ${caps.embeddingWidth} wide)\n`);
    }
    await shutdown.requested;
    const finished = await server.drain(shutdownSeconds * 1000);
    if (!finished) info(`pagellm serve: --shutdown-timeout ${shutdownSeconds} s passed; aborting the requests still running`);
    await server.close();
    if (caps.generate) await llm.flush();
    llm.close();
  } catch (e) {
    await server.close();
    throw e;
  } finally {
    shutdown.remove();
  }
}

/** Serves the registry's models until `stop`, then drains, closes and unloads them all. */
async function serveMany(server: PagellmServer, many: ReturnType<typeof manyModels>, stop: Promise<void>, shutdownSeconds: number): Promise<void> {
  const { registry } = many;
  try {
    server.readyMany(registry);
    const names = registry.list().map((m) => m.name);
    process.stdout.write(`pagellm serve: ${server.urls.join(", ")} serving ${names.length} models (${names.join(", ")}), ${many.budgetNote}\n`);
    // A pinned model that cannot load is its own requests' error; the others serve.
    await registry.loadPinned().catch((e: Error) => info(`pagellm serve: a pinned model did not load: ${e.message}`));
    await stop;
    const finished = await server.drain(shutdownSeconds * 1000);
    if (!finished) info(`pagellm serve: --shutdown-timeout ${shutdownSeconds} s passed; aborting the requests still running`);
    await server.close();
  } catch (e) {
    await server.close();
    throw e;
  } finally {
    await registry.closeAll();
  }
}

/** --api-key, else $PAGELLM_API_KEY, else none (null); a key no request could match is refused at start. */
function serveApiKey(values: ParsedValues): string | null {
  const given = typeof values["api-key"] === "string";
  const key = given ? (values["api-key"] as string) : (process.env.PAGELLM_API_KEY ?? "");
  if (key === "") return null;
  const problem = apiKeyProblem(key);
  if (problem !== null) throw new InputError(`${given ? "--api-key" : "$PAGELLM_API_KEY"} ${problem}`);
  return key;
}

/**
 * The options that set the defaults of the fields a request leaves out, in place of the OpenAI
 * API's (what llama-server's and vLLM's sampling options do for their servers).
 */
function requestDefaultArgs() {
  const byDefault = (what: string, openAi: string, hint: string) => ({ type: "string", description: `${what} of a request that gives none (default: ${openAi})`, valueHint: hint }) as const;
  return {
    "max-tokens": byDefault("Most tokens to generate", "OpenAI's: a chat until a stop or the end of the context, a text completion 16", "n"),
    temperature: byDefault("Sampling temperature (0 = greedy)", "OpenAI's, 1", "t"),
    "top-k": byDefault("Top-k (0 = off)", "off", "k"),
    "top-p": byDefault("Top-p (1 = off)", "1, off", "p"),
    "min-p": byDefault("Min-p (0 = off)", "0, off", "p"),
    seed: byDefault("Random seed (every such request then samples the same way)", "a random seed per request", "n"),
    "repeat-penalty": byDefault("Repetition penalty (1 = off)", "1, off", "x"),
    "repeat-last-n": byDefault("Tokens the repetition penalty looks back over", "the whole context", "n"),
    "frequency-penalty": byDefault("Frequency penalty (-2 to 2)", "0", "x"),
    "presence-penalty": byDefault("Presence penalty (-2 to 2)", "0", "x"),
  } as const satisfies ArgsDef;
}

/** The request defaults the options set, checked by the engine's request check (an error names the option). */
function serveRequestDefaults(values: ParsedValues): ServerRequestDefaults {
  const num = (name: string) => numberOption(values, name, "number");
  const defaults: ServerRequestDefaults = {
    maxTokens: num("max-tokens"), temperature: num("temperature"), topK: num("top-k"), topP: num("top-p"), minP: num("min-p"), seed: seedOption(values),
    repetitionPenalty: num("repeat-penalty"), repeatLastN: num("repeat-last-n"), frequencyPenalty: num("frequency-penalty"), presencePenalty: num("presence-penalty"),
  };
  for (const key of Object.keys(defaults) as (keyof ServerRequestDefaults)[]) if (defaults[key] === undefined) delete defaults[key];
  checkOptions(defaults);
  return defaults;
}

/** --host's addresses, comma-separated or repeated (default 127.0.0.1), each once. */
function hostOption(rawArgs: readonly string[]): string[] {
  const given = repeated(rawArgs, "host").flatMap((v) => v.split(",")).map((h) => h.trim());
  if (given.length === 0) return ["127.0.0.1"];
  if (given.includes("")) throw new InputError("--host needs an address (e.g. 127.0.0.1, ::1, 0.0.0.0)");
  return [...new Set(given)];
}

/** --cors's origins, comma-separated or repeated; each checked at start. */
function corsOption(rawArgs: readonly string[]): string[] {
  const origins = repeated(rawArgs, "cors").flatMap((v) => v.split(",")).map((o) => o.trim());
  for (const origin of origins) {
    const problem = origin === "" ? "needs an origin (scheme://host[:port]) or *" : corsOriginProblem(origin);
    if (problem !== null) throw new InputError(`--cors ${problem}`);
  }
  return origins;
}

/** Resolves `requested` on the first SIGTERM/SIGINT (a second exits at once, code 130). */
function shutdownOnSignal(seconds: number): { requested: Promise<void>; remove: () => void } {
  let count = 0;
  let resolve!: () => void;
  const requested = new Promise<void>((r) => (resolve = r));
  const handler = (signal: NodeJS.Signals) => {
    count++;
    if (count > 1) process.exit(130);
    info(`pagellm serve: ${signal}: not accepting new requests; finishing the running ones (at most ${seconds} s; again to exit now)`);
    resolve();
  };
  process.on("SIGINT", handler);
  process.on("SIGTERM", handler);
  return {
    requested,
    remove: () => {
      process.off("SIGINT", handler);
      process.off("SIGTERM", handler);
    },
  };
}
