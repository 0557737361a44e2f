/**
 * `pagellm serve`'s HTTP server, on Bun.serve: the OpenAI routes, ollama's (ollama/routes.ts), /health and /metrics, over the
 * engine's front door (EngineClient) shared by every client. It listens before the model is loaded
 * (/health answers 503 until `ready`), and drains on shutdown: new requests get 503 while the
 * running ones finish.
 *
 * Safe by default: binds where it is told (the CLI's default is 127.0.0.1), checks the API key
 * on /v1/* in constant time, bounds what a client can hold (a body's size and the time to send it,
 * the requests in progress at once, the bytes of bodies still arriving: body-reader.ts), and turns
 * every bad request into an OpenAI error object with its status, never a stack trace, never
 * disturbing the other requests. /health says 503 when the engine loop has stopped moving with
 * work pending, so a supervisor sees a server that hangs.
 */
import type { Server } from "bun";
import type { LLM } from "../llm/llm.ts";
import type { ModelCapabilities } from "../embed/embed-types.ts";
import { InputError } from "../errors.ts";
import { ApiError, asApiError, errorResponse, methodNotAllowed, withoutPaths } from "./api-error.ts";
import { ApiKeyCheck } from "./auth.ts";
import { BodyFields } from "./body-fields.ts";
import { BodyReader } from "./body-reader.ts";
import { CorsPolicy } from "./cors.ts";
import { anthropicCountTokens, anthropicErrorResponse, anthropicMessages } from "./anthropic-messages.ts";
import { chatCompletions } from "./chat-completions.ts";
import { responses, storedResponse } from "./responses.ts";
import { completions } from "./completions.ts";
import { detokenize, embeddingTokenize, tokenize } from "./tokenize.ts";
import { embeddings, llamaEmbedding, type EmbeddingContext } from "./embeddings.ts";
import { rerank } from "./rerank.ts";
import type { ServerRequestDefaults } from "./generation-fields.ts";
import type { GenerationContext, Usage } from "./generation-run.ts";
import { ServeMetrics } from "./metrics.ts";
import { modelList, retrieveModel } from "./models.ts";
import type { OllamaContext } from "./ollama/context.ts";
import { modelNotFound, ollamaErrorResponse } from "./ollama/ollama-error.ts";
import { NDJSON_TYPE } from "./ollama/ndjson.ts";
import { isOllamaPath, ollamaRootRoute, ollamaRoute } from "./ollama/routes.ts";
import { ServedModels } from "./ollama/served-models.ts";
import { ollamaPsOf, ollamaTagsOf, type ListedModel } from "./ollama/listing.ts";
import { keepAliveMs } from "./ollama/options.ts";
import { envelope } from "./ollama/reply-run.ts";
import { MetricSet, renderMetrics } from "./metrics.ts";
import type { ModelRegistry } from "./models/registry.ts";
import { loadRoute, modelListOf, registryMetrics, requestedModel, retrieveModelOf, unloadRoute } from "./models/model-routes.ts";

export interface ServerOptions {
  /** Address(es) to listen on: one listener each, on the same port. */
  host: string | readonly string[];
  /** 0 picks a free port (the first listener's; the others take the same). */
  port: number;
  /** null: no key needed. */
  apiKey: string | null;
  /** Largest request body, in bytes. */
  maxBodyBytes: number;
  /** Sequences that may wait for the batch before requests get 429 (a request with more alone: 400). */
  maxQueue: number;
  /** Prompts one /v1/completions request may hold (400 past it; default SERVER_DEFAULTS). */
  maxPrompts?: number;
  /** Print a line per request on stderr. */
  logRequests: boolean;
  /** The name the model is served under (`model` in requests and responses). */
  modelName: string;
  /** Where request log lines go. */
  log: (line: string) => void;
  /** Time to receive a request's body from its headers, ms (408 past it; default SERVER_DEFAULTS). */
  bodyTimeoutMs?: number;
  /** Requests in progress at once, from their headers to the end of their response (429 past it). */
  maxConnections?: number;
  /** Bytes that the bodies still arriving may hold together (429 past it). */
  maxPendingBodyBytes?: number;
  /** /health answers 503 when the engine loop has made no progress for this long with work pending, ms. */
  stallTimeoutMs?: number;
  /** Defaults for the fields a request leaves out, in place of the OpenAI API's (--temperature, ...; checked by the caller). */
  requestDefaults?: ServerRequestDefaults;
  /** Origins whose browser pages may call the server (CORS), or ["*"] for any; absent or empty: none (cors.ts). */
  corsOrigins?: readonly string[];
}

/** The bounds' defaults (the CLI's options: --body-timeout, --max-connections, --max-pending-body-mb, --stall-timeout). */
export const SERVER_DEFAULTS = {
  /**
   * Prompts per /v1/completions request: half the default --max-queue (so such a request can still
   * ask for n 2), and far above what clients that batch prompts send (LangChain's 20 a request,
   * lm-evaluation-harness's batch sizes); it bounds the tokenizing done before any other check.
   */
  maxPrompts: 128,
  bodyTimeoutS: 60,
  maxConnections: 1024,
  maxPendingBodyMb: 256,
  stallTimeoutS: 60,
} as const;

type State = "loading" | "ready" | "draining";

/** `GET /v1/models/{id}`: the id is the rest of the path. */
const MODEL_PATH = "/v1/models/";
/** llama-server's and vLLM's routes outside /v1, where theirs are (they need the key as /v1 does). */
const OUTSIDE_V1_PATHS: ReadonlySet<string> = new Set(["/tokenize", "/detokenize", "/embedding", "/rerank", "/models/load", "/models/unload"]);
/** The routes of a server of several models that name their model in the body's `model`. */
const MODEL_BODY_PATHS: ReadonlySet<string> = new Set([
  "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/embeddings", "/embedding", "/v1/rerank", "/rerank",
  "/tokenize", "/detokenize",
]);
/** ollama's routes that name a model (the others list them). */
const OLLAMA_MODEL_PATHS: ReadonlySet<string> = new Set(["/api/show", "/api/chat", "/api/generate", "/api/embed", "/api/embeddings"]);
/** The routes that generate text: an embedding model or a reranker is refused on them. */
const GENERATION_PATHS: ReadonlySet<string> = new Set(["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"]);
/** `/v1/responses/{id}`: a stored response, which this server never has. */
const RESPONSE_PATH = "/v1/responses/";

/** How long close() lets finished responses flush before it closes every connection. */
const FLUSH_GRACE_MS = 2000;

/** Seconds a connection may stay silent, except while its generation runs. */
const IDLE_TIMEOUT_S = 60;

export class PagellmServer {
  private state: State = "loading";
  private llm: LLM | null = null;
  /** The models ollama's routes serve (the one loaded). */
  private ollamaModels: ServedModels | null = null;
  /** Several models, loaded on demand (readyMany); null: the one model of ready(). */
  private registry: ModelRegistry<LLM> | null = null;
  /** Each model's request metrics, kept across its loads (a server of several models). */
  private readonly metricsOf = new Map<string, ServeMetrics>();
  /** A body read before its route ran (a server of several models reads `model` first). */
  private readonly preRead = new WeakMap<Request, BodyFields>();
  private readonly metrics: ServeMetrics;
  private readonly auth: ApiKeyCheck | null;
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly bodies: BodyReader;
  private readonly maxConnections: number;
  private readonly stallTimeoutMs: number;
  private readonly cors: CorsPolicy | null;
  /** Embedding and rerank calls running (drain and close wait for them: they run outside the engine's queue). */
  private readonly embeddingsRunning = new Set<Promise<Response>>();
  /** Requests in progress (health checks and metrics scrapes, answered at once, are not counted). */
  private active = 0;
  /** One per address, in the order given. */
  private readonly listeners: Server<undefined>[] = [];
  /** The listener each request in progress came to (its idle timeout is that listener's to lift). */
  private readonly listenerOf = new WeakMap<Request, Server<undefined>>();

  constructor(private readonly opts: ServerOptions) {
    this.metrics = new ServeMetrics(opts.modelName);
    this.auth = opts.apiKey === null || opts.apiKey === "" ? null : new ApiKeyCheck(opts.apiKey);
    this.bodies = new BodyReader({
      maxBodyBytes: opts.maxBodyBytes,
      timeoutMs: opts.bodyTimeoutMs ?? SERVER_DEFAULTS.bodyTimeoutS * 1000,
      maxPendingBytes: opts.maxPendingBodyBytes ?? SERVER_DEFAULTS.maxPendingBodyMb * 2 ** 20,
    });
    this.maxConnections = opts.maxConnections ?? SERVER_DEFAULTS.maxConnections;
    this.stallTimeoutMs = opts.stallTimeoutMs ?? SERVER_DEFAULTS.stallTimeoutS * 1000;
    this.cors = opts.corsOrigins === undefined || opts.corsOrigins.length === 0 ? null : new CorsPolicy(opts.corsOrigins);
    const hosts = typeof opts.host === "string" ? [opts.host] : opts.host;
    try {
      for (const host of hosts) this.listeners.push(this.listen(host, this.listeners[0]?.port ?? opts.port));
    } catch (e) {
      for (const listener of this.listeners) void listener.stop(true);
      throw e;
    }
  }

  /** A listener on `host`:`port`; InputError naming the address when it cannot be bound. */
  private listen(host: string, port: number): Server<undefined> {
    try {
      return Bun.serve({
        hostname: host,
        port,
        // Out of the way: Bun answers a body declared past its own cap with a bare 413, before any
        // handler runs. The body reader (body-reader.ts) refuses it first, in the OpenAI shape.
        maxRequestBodySize: Number.MAX_SAFE_INTEGER,
        // Idle connections close after a minute; a generation's own connection waits as long as it runs (see route).
        idleTimeout: IDLE_TIMEOUT_S,
        fetch: (req, server) => this.respond(req, server),
        error: (e) => errorResponse(this.publicError(asApiError(e))),
      });
    } catch (e) {
      throw new InputError(`cannot listen on ${hostPort(host, port)}: ${listenProblem(e)}`);
    }
  }

  /** http://host:port of the first listening socket. */
  get url(): string {
    return this.urls[0]!;
  }

  /** http://host:port of every listening socket, in the order of the addresses given. */
  get urls(): string[] {
    return this.listeners.map((l) => l.url.href.replace(/\/$/, ""));
  }

  /** An error as a client may see it: no path of the model's files (withoutPaths). */
  private publicError(e: ApiError): ApiError {
    if (this.registry !== null) {
      return this.registry.list().reduce((err, m) => withoutPaths(err, [m.file, ...(m.model?.files ?? [])], m.name), e);
    }
    return this.llm === null ? e : withoutPaths(e, this.llm.files, this.opts.modelName);
  }

  /** Serve the models of `registry`, each loaded when a request first names it. */
  readyMany(registry: ModelRegistry<LLM>): void {
    this.registry = registry;
    this.state = "ready";
  }

  /** The models loaded now (all of a server of several; else the one). */
  private loadedModels(): LLM[] {
    if (this.registry === null) return this.llm === null ? [] : [this.llm];
    return this.registry.list().flatMap((m) => (m.model === null ? [] : [m.model]));
  }

  private modelMetrics(name: string): ServeMetrics {
    let m = this.metricsOf.get(name);
    if (m === undefined) this.metricsOf.set(name, (m = new ServeMetrics(name)));
    return m;
  }

  /** The model is loaded: serve it. */
  ready(llm: LLM): void {
    this.llm = llm;
    this.ollamaModels = ServedModels.single(this.opts.modelName, llm, Date.now());
    this.state = "ready";
  }

  /**
   * Stop accepting (503) and wait for the requests being served to finish, at most `timeoutMs`;
   * those still running then are aborted. Resolves true when all finished in time.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.state = "draining";
    const models = this.loadedModels();
    if (models.length === 0 && this.registry === null) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const idle = Promise.all([...models.map((llm) => (llm.capabilities.generate ? llm.client.whenIdle() : null)), this.embeddingsIdle()]);
    const finished = await Promise.race([idle.then(() => true as const), timedOut]);
    clearTimeout(timer);
    return finished;
  }

  /**
   * Abort what still runs and close the socket (the LLM stays the caller's to close). Responses
   * already complete get a moment to reach their clients before every connection is closed.
   */
  async close(): Promise<void> {
    this.state = "draining";
    const generating = this.loadedModels().filter((llm) => llm.capabilities.generate).map((llm) => llm.client);
    for (const client of generating) client.abortAll();
    await Promise.all(generating.map((client) => client.whenIdle()));
    await this.embeddingsIdle();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stopped = Promise.all(this.listeners.map((l) => l.stop(false)));
    await Promise.race([stopped, new Promise((resolve) => (timer = setTimeout(resolve, FLUSH_GRACE_MS)))]);
    clearTimeout(timer);
    await Promise.all(this.listeners.map((l) => l.stop(true)));
  }

  /** Resolves when no embedding or rerank call runs (their failures are their own requests'). */
  private async embeddingsIdle(): Promise<void> {
    while (this.embeddingsRunning.size > 0) await Promise.allSettled([...this.embeddingsRunning]);
  }

  /** An embedding or rerank response, counted as running until it is made. */
  private async embeddingCall(run: () => Promise<Response>): Promise<Response> {
    const call = run();
    this.embeddingsRunning.add(call);
    try {
      return await call;
    } finally {
      this.embeddingsRunning.delete(call);
    }
  }

  /** Requests in progress now (--max-connections counts them). */
  get requestsInProgress(): number {
    return this.active;
  }

  /** Bytes held now by request bodies still arriving (--max-pending-body-mb bounds them). */
  get pendingBodyBytes(): number {
    return this.bodies.pendingBytes;
  }

  /** The answer to `req`, with the CORS headers its origin is allowed; a CORS preflight is answered first of all. */
  private async respond(req: Request, server: Server<undefined>): Promise<Response> {
    this.listenerOf.set(req, server);
    if (this.cors === null) return this.handle(req, server);
    if (this.cors.isPreflight(req)) return this.cors.preflight(req);
    return this.cors.apply(req, await this.handle(req, server));
  }

  private async handle(req: Request, server: Server<undefined>): Promise<Response> {
    const path = new URL(req.url).pathname;
    // Health checks and scrapes are answered at once and hold nothing: never refused for load.
    if (path === "/health" || path === "/metrics") return this.serve(req, server, path);
    if (this.active >= this.maxConnections) {
      return errorResponse(new ApiError(
        429, `the server has ${this.active} requests in progress (--max-connections ${this.maxConnections}); retry later`,
        "rate_limit_error", null, "too_many_connections", { "Retry-After": "1", Connection: "close" },
      ));
    }
    this.active++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.active--;
    };
    let streamed = false;
    try {
      const response = await this.serve(req, server, path);
      // A stream holds its connection until its last chunk is sent or the client goes.
      if (response.body === null || !isStream(response)) return response;
      streamed = true;
      return new Response(untilEnd(response.body, release), { status: response.status, headers: response.headers });
    } finally {
      if (!streamed) release();
    }
  }

  /** The route's response (or its error as an OpenAI error object), logged as --log-requests asks. */
  private async serve(req: Request, server: Server<undefined>, path: string): Promise<Response> {
    const t0 = performance.now();
    const from = server.requestIP(req)?.address ?? "-";
    // A streamed response is logged when its last chunk is sent, with its usage.
    let status = 0;
    const log = (usage: Usage | null) => {
      if (!this.opts.logRequests) return;
      const tokens = usage === null ? "" : ` prompt ${usage.prompt_tokens} (${usage.prompt_tokens_details.cached_tokens} cached) completion ${usage.completion_tokens}`;
      this.opts.log(`${from} ${req.method} ${path} ${status} ${(performance.now() - t0).toFixed(0)} ms${tokens}`);
    };
    let finished: Usage | null = null;
    let streaming = false;
    let response: Response;
    try {
      response = await this.route(req, path, t0, (usage: Usage) => {
        finished = usage;
        if (streaming) log(usage);
      });
    } catch (e) {
      const error = this.publicError(asApiError(e));
      // The server's own failure: the operator hears of it whatever the flags (a 503 while
      // loading or shutting down is the server's state, not a failure).
      if (error.type === "server_error") process.stderr.write(`pagellm serve: ${req.method} ${path}: ${error.message}\n`);
      response = isAnthropicPath(path) ? anthropicErrorResponse(error) : isOllamaPath(path) ? ollamaErrorResponse(error) : errorResponse(error);
    }
    status = response.status;
    streaming = isStream(response);
    if (!streaming || finished !== null) log(finished);
    return response;
  }

  private async route(req: Request, path: string, arrivedMs: number, onDone: GenerationContext["onDone"]): Promise<Response> {
    if (path === "/health") {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return this.health();
    }
    if (path === "/metrics") {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      if (this.registry !== null) return this.metricsMany(this.registry);
      if (this.llm === null) throw unavailable("loading");
      if (!this.llm.capabilities.generate) throw new ApiError(404, "/metrics: the model only embeds, it runs no engine whose counters could be scraped", "not_found_error", null, "no_engine");
      return new Response(this.metrics.render(this.llm.stats()), { headers: { "Content-Type": "text/plain; version=0.0.4; charset=utf-8" } });
    }
    if (isOllamaPath(path)) return this.ollama(req, path, arrivedMs, onDone);
    if (!path.startsWith("/v1/") && !OUTSIDE_V1_PATHS.has(path)) throw new ApiError(404, `no route ${req.method} ${path}`, "not_found_error", null, "not_found");
    this.auth?.check(req);
    if (this.state !== "ready") throw unavailable(this.state);
    if (this.registry !== null) return this.routeMany(this.registry, req, path, onDone);
    const llm = this.llm!;
    if (path.startsWith(RESPONSE_PATH) && path.length > RESPONSE_PATH.length) storedResponse(path.slice(RESPONSE_PATH.length));
    if (path.startsWith(MODEL_PATH) && path.length > MODEL_PATH.length) {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return Response.json(retrieveModel(path.slice(MODEL_PATH.length), this.opts.modelName, this.created, llm.capabilities));
    }
    if (path === "/v1/models") {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return Response.json(modelList(this.opts.modelName, this.created, llm.capabilities));
    }
    return this.routeModel(req, path, llm, this.opts.modelName, this.metrics, onDone);
  }

  /** A route that runs on one model (`llm`, named `name` in its responses). */
  private async routeModel(req: Request, path: string, llm: LLM, name: string, metrics: ServeMetrics, onDone: GenerationContext["onDone"]): Promise<Response> {
    // Built when a generation route asks: a model that only embeds has no engine client.
    const generation = (): GenerationContext => this.generationContext(llm, name, req, onDone, metrics);
    if (GENERATION_PATHS.has(path) && !llm.capabilities.generate) throw cannotGenerate(name, path, llm.capabilities);
    const embedding: EmbeddingContext = { model: llm, name, onDone };
    switch (path) {
      case "/v1/embeddings":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return this.embeddingCall(async () => embeddings(embedding, await this.readFields(req)));
      case "/embedding":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return this.embeddingCall(async () => llamaEmbedding(embedding, await this.readFields(req)));
      case "/v1/rerank":
      case "/rerank":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return this.embeddingCall(async () => rerank(embedding, await this.readFields(req)));
      case "/v1/chat/completions":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return chatCompletions(llm.tokenizer, generation(), await this.readFields(req));
      case "/v1/completions":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return completions(llm.tokenizer, generation(), await this.readFields(req));
      case "/tokenize":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        if (!llm.capabilities.generate) return embeddingTokenize(llm, name, await this.readFields(req));
        const embedIds = llm.capabilities.embed ? (text: string, parseSpecial: boolean) => llm.embedTokenIds(text, parseSpecial) : null;
        return tokenize(llm.client, name, await this.readFields(req), embedIds);
      case "/detokenize":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return detokenize(llm.client, name, await this.readFields(req));
      case "/v1/messages":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return anthropicMessages(llm.tokenizer, generation(), await this.readFields(req));
      case "/v1/messages/count_tokens":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return anthropicCountTokens(generation(), await this.readFields(req));
      case "/v1/responses":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return responses(generation(), await this.readFields(req));
      default:
        throw new ApiError(404, `no route ${req.method} ${path}`, "not_found_error", null, "not_found");
    }
  }

  /**
   * A route of a server of several models: the listings and load/unload answered from the
   * registry; a model's route run on the model its body names, loaded first when it is not, and
   * held loaded until the response ends (a stream: its last chunk, or the client going).
   */
  private async routeMany(registry: ModelRegistry<LLM>, req: Request, path: string, onDone: GenerationContext["onDone"]): Promise<Response> {
    if (path.startsWith(RESPONSE_PATH) && path.length > RESPONSE_PATH.length) storedResponse(path.slice(RESPONSE_PATH.length));
    if (path.startsWith(MODEL_PATH) && path.length > MODEL_PATH.length) {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return Response.json(retrieveModelOf(registry, path.slice(MODEL_PATH.length), this.created));
    }
    if (path === "/v1/models") {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return Response.json(modelListOf(registry, this.created));
    }
    if (path === "/models/load" || path === "/models/unload") {
      if (req.method !== "POST") throw methodNotAllowed(req, "POST");
      const f = await this.readFields(req);
      return path === "/models/load" ? loadRoute(registry, f) : unloadRoute(registry, f);
    }
    if (!MODEL_BODY_PATHS.has(path)) throw new ApiError(404, `no route ${req.method} ${path}`, "not_found_error", null, "not_found");
    if (req.method !== "POST") throw methodNotAllowed(req, "POST");
    const f = await this.readFields(req);
    this.preRead.set(req, f);
    const requested = requestedModel(f);
    const lease = await registry.acquire(requested);
    return holdUntilEnd(() => this.routeModel(req, path, lease.model, requested, this.modelMetrics(lease.name), onDone), lease.release);
  }

  /** /metrics of a server of several models: each loaded model's series labelled with its name, and the registry's. */
  private metricsMany(registry: ModelRegistry<LLM>): Response {
    const set = new MetricSet();
    registryMetrics(registry, set);
    const models = registry.list().map((m) => ({
      metrics: this.modelMetrics(m.name), stats: m.model !== null && m.model.capabilities.generate ? m.model.stats() : null,
    }));
    return new Response(renderMetrics(models, true, set), { headers: { "Content-Type": "text/plain; version=0.0.4; charset=utf-8" } });
  }

  /** What a generation route of `llm` is given, its responses naming the model `name`. */
  private generationContext(llm: LLM, name: string, req: Request, onDone: GenerationContext["onDone"], metrics = this.metrics): GenerationContext {
    return {
      client: llm.client, metrics, maxQueue: this.opts.maxQueue, maxPrompts: this.opts.maxPrompts ?? SERVER_DEFAULTS.maxPrompts,
      model: name, defaults: this.opts.requestDefaults ?? {}, signal: req.signal, onDone,
    };
  }

  /** ollama's routes (ollama/routes.ts): `/` answered in any state, `/api/*` behind the key as /v1 is. */
  private ollama(req: Request, path: string, arrivedMs: number, onDone: GenerationContext["onDone"]): Promise<Response> | Response {
    if (path === "/") {
      const root = ollamaRootRoute(req);
      if (root === null) throw methodNotAllowed(req, "GET, HEAD");
      return root;
    }
    this.auth?.check(req);
    if (this.state !== "ready") throw unavailable(this.state);
    if (this.registry !== null) return this.ollamaMany(this.registry, req, path, arrivedMs, onDone);
    const ctx: OllamaContext = {
      models: this.ollamaModels!,
      generation: (model, requested) => this.generationContext(model.llm, requested, req, onDone),
      embedding: (model) => ({ model: model.llm, name: model.name, onDone }),
      defaults: this.opts.requestDefaults ?? {},
      arrivedMs,
    };
    return ollamaRoute(req, path, ctx, { readFields: () => this.readFields(req), embeddingCall: (run) => this.embeddingCall(run) });
  }

  /**
   * ollama's routes on a server of several models: /api/tags lists them all, /api/ps the loaded
   * ones; a route that names a model holds it (loaded first) until its response ends, with the
   * request's keep_alive. An empty prompt (or no messages) with keep_alive 0 unloads it, as
   * ollama does, without loading it first.
   */
  private async ollamaMany(registry: ModelRegistry<LLM>, req: Request, path: string, arrivedMs: number, onDone: GenerationContext["onDone"]): Promise<Response> {
    const listed = (): ListedModel[] => registry.list().map((m) => ({
      name: m.name, file: m.file, llm: m.model, bytes: m.bytes, expiresAt: m.expiresAt, inUse: m.inFlight > 0, keepAliveMs: registry.keepAliveOf(m.name),
    }));
    if (path === "/api/tags" || path === "/api/ps") {
      if (!isGet(req)) throw methodNotAllowed(req, "GET, HEAD");
      return path === "/api/tags" ? ollamaTagsOf(listed()) : ollamaPsOf(listed(), Date.now());
    }
    const serving = { readFields: () => this.readFields(req), embeddingCall: (run: () => Promise<Response>) => this.embeddingCall(run) };
    const context = (models: ServedModels): OllamaContext => ({
      models,
      generation: (model, requested) => this.generationContext(model.llm, requested, req, onDone, this.modelMetrics(registry.resolve(requested) ?? requested)),
      embedding: (model) => ({ model: model.llm, name: model.name, onDone }),
      defaults: this.opts.requestDefaults ?? {},
      arrivedMs,
    });
    if (!OLLAMA_MODEL_PATHS.has(path) || req.method !== "POST") return ollamaRoute(req, path, context(new ServedModels([])), serving);
    const f = await this.readFields(req);
    this.preRead.set(req, f);
    // ollama's show takes the older `name` too.
    const requested = requestedModel(f, path === "/api/show" && f.body.model === undefined && f.body.name !== undefined ? "name" : "model");
    const keepAlive = keepAliveMs(f.body.keep_alive ?? undefined);
    if (keepAlive === 0 && isLoadOnly(path, f)) {
      if (registry.resolve(requested) === null) throw modelNotFound(requested);
      await registry.unload(requested);
      const empty = path === "/api/chat" ? { message: { role: "assistant", content: "" } } : { response: "" };
      return Response.json({ ...envelope(requested), ...empty, done: true, done_reason: "unload" });
    }
    if (registry.resolve(requested) === null) throw modelNotFound(requested);
    const lease = await registry.acquire(requested, keepAlive);
    const served = ServedModels.single(requested, lease.model, registry.statusOf(requested).loadedAt ?? Date.now());
    return holdUntilEnd(() => ollamaRoute(req, path, context(served), serving), lease.release);
  }

  /** A generation request's body (within the bounds of body-reader.ts) as checked JSON fields. */
  private async readFields(req: Request): Promise<BodyFields> {
    const early = this.preRead.get(req);
    if (early !== undefined) {
      this.preRead.delete(req);
      return early;
    }
    const text = await this.bodies.read(req);
    // The body is in: a non-streamed generation sends nothing until it ends, a stream nothing
    // while it waits in the queue, so the idle timeout no longer applies to this connection.
    this.listenerOf.get(req)?.timeout(req, 0);
    return BodyFields.parse(text);
  }

  /** 200 when serving and the engine loop moves; 503 while loading, draining, or stalled with work pending. */
  private health(): Response {
    if (this.state !== "ready") return Response.json({ status: this.state }, { status: 503 });
    const stalled = this.stallReason();
    if (stalled !== null) return Response.json({ status: "stalled", reason: stalled }, { status: 503 });
    return Response.json({ status: "ok" });
  }

  /** Why the engine loop counts as stalled (work pending, no progress for --stall-timeout), or null. */
  private stallReason(): string | null {
    const stats = this.llm?.capabilities.generate === true ? this.llm.stats() : undefined;
    if (stats === undefined || stats.stalledMs < this.stallTimeoutMs) return null;
    return `the engine loop has made no progress for ${(stats.stalledMs / 1000).toFixed(1)} s with ${stats.numRequests} requests pending (--stall-timeout ${this.stallTimeoutMs / 1000})`;
  }
}

/** host:port, an IPv6 address in brackets. */
function hostPort(host: string, port: number): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Why Bun could not listen, in words a user acts on. */
function listenProblem(e: unknown): string {
  switch ((e as { code?: unknown }).code) {
    case "EADDRINUSE":
      return "the port is in use (another server? --port 0 picks a free one)";
    case "EADDRNOTAVAIL":
      return "no network interface of this machine has that address";
    case "EACCES":
      return "not allowed to listen there (ports below 1024 need privileges)";
    case "EINVAL":
      return "not an address this machine can listen on";
    default:
      return e instanceof Error ? e.message.split("\n")[0]! : String(e);
  }
}

/** Anthropic's Messages API: its errors have Anthropic's shape. */
function isAnthropicPath(path: string): boolean {
  return path === "/v1/messages" || path.startsWith("/v1/messages/");
}

/** GET, or HEAD (the same answer without its body, which Bun leaves out). */
function isGet(req: Request): boolean {
  return req.method === "GET" || req.method === "HEAD";
}

/** A streamed response: server-sent events, or ollama's NDJSON lines. */
function isStream(response: Response): boolean {
  const type = response.headers.get("content-type") ?? "";
  return type.startsWith("text/event-stream") || type.startsWith(NDJSON_TYPE);
}

/** The response `run` makes, `release` called when it has been sent: at once, or when a stream ends (or fails, or the client goes). */
async function holdUntilEnd(run: () => Promise<Response>, release: () => void): Promise<Response> {
  let response: Response;
  try {
    response = await run();
  } catch (e) {
    release();
    throw e;
  }
  if (response.body === null || !isStream(response)) {
    release();
    return response;
  }
  return new Response(untilEnd(response.body, release), { status: response.status, headers: response.headers });
}

/** An ollama request that only loads (or with keep_alive 0 unloads) its model: /api/generate without a prompt, /api/chat without messages. */
function isLoadOnly(path: string, f: BodyFields): boolean {
  if (path === "/api/generate") return f.body.prompt === undefined || f.body.prompt === null || f.body.prompt === "";
  if (path === "/api/chat") return f.body.messages === undefined || f.body.messages === null || (Array.isArray(f.body.messages) && f.body.messages.length === 0);
  return false;
}

/** `body` passed through unchanged; `onEnd` runs once when it ends, fails or is cancelled (the client went). */
function untilEnd(body: ReadableStream<Uint8Array>, onEnd: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    onEnd();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done } = await reader.read();
        if (done) {
          end();
          controller.close();
        } else controller.enqueue(value);
      } catch (e) {
        end();
        controller.error(e);
      }
    },
    cancel(reason) {
      end();
      return reader.cancel(reason);
    },
  });
}

/** A generation route asked of a model that only embeds or reranks: a 400 saying what it does instead. */
function cannotGenerate(name: string, path: string, caps: ModelCapabilities): ApiError {
  const what = caps.rerank ? "a reranker: it scores documents on /v1/rerank" : `an embedding model (pooling ${caps.pooling}): it embeds on /v1/embeddings`;
  return new ApiError(400, `${path}: '${name}' is ${what}, it cannot generate text`, "invalid_request_error", "model", "model_cannot_generate");
}

function unavailable(state: State): ApiError {
  const why = state === "loading" ? "the model is still loading" : "the server is shutting down";
  return new ApiError(503, why, "service_unavailable", null, state === "loading" ? "model_loading" : "shutting_down", { "Retry-After": "1" });
}
