/**
 * `pagellm serve`'s HTTP server, on Bun.serve: the OpenAI routes, /health and /metrics, over one
 * engine loop shared by every client. It listens before the model is loaded (/health answers 503
 * until `ready`), and drains on shutdown: new requests get 503 while the running ones finish.
 *
 * Safe by default: binds where it is told (the CLI's default is 127.0.0.1), checks the API key
 * on /v1/* in constant time, caps request bodies, and turns every bad request into an OpenAI
 * error object with its status, never a stack trace, never disturbing the other requests.
 */
import type { Server } from "bun";
import type { LLM } from "../engine/llm.ts";
import { ApiError, asApiError, errorResponse } from "./api-error.ts";
import { ApiKeyCheck } from "./auth.ts";
import { BodyFields } from "./body-fields.ts";
import { chatCompletions } from "./chat-completions.ts";
import { completions } from "./completions.ts";
import { EngineLoop } from "./engine-loop.ts";
import type { GenerationContext, Usage } from "./generation-run.ts";
import { ServeMetrics } from "./metrics.ts";
import { modelList } from "./models.ts";

export interface ServerOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** null: no key needed. */
  apiKey: string | null;
  /** Largest request body, in bytes. */
  maxBodyBytes: number;
  /** Sequences that may wait for the batch before requests get 429. */
  maxQueue: number;
  /** Print a line per request on stderr. */
  logRequests: boolean;
  /** The name the model is served under (`model` in requests and responses). */
  modelName: string;
  /** Where request log lines go. */
  log: (line: string) => void;
}

type State = "loading" | "ready" | "draining";

/** How long close() lets finished responses flush before it closes every connection. */
const FLUSH_GRACE_MS = 2000;

/** Seconds a connection may stay silent, except while its generation runs. */
const IDLE_TIMEOUT_S = 60;

export class PagellmServer {
  private state: State = "loading";
  private llm: LLM | null = null;
  private loop: EngineLoop | null = null;
  private readonly metrics: ServeMetrics;
  private readonly auth: ApiKeyCheck | null;
  private readonly created = Math.floor(Date.now() / 1000);
  readonly server: Server<undefined>;

  constructor(private readonly opts: ServerOptions) {
    this.metrics = new ServeMetrics(opts.modelName);
    this.auth = opts.apiKey === null || opts.apiKey === "" ? null : new ApiKeyCheck(opts.apiKey);
    this.server = Bun.serve({
      hostname: opts.host,
      port: opts.port,
      // Bun's own cap is a backstop above ours (ours answers in the OpenAI shape).
      maxRequestBodySize: opts.maxBodyBytes + (1 << 20),
      // Idle connections close after a minute; a generation's own connection waits as long as it runs (see route).
      idleTimeout: IDLE_TIMEOUT_S,
      fetch: (req, server) => this.handle(req, server),
      error: (e) => errorResponse(asApiError(e)),
    });
  }

  /** http://host:port of the listening socket. */
  get url(): string {
    return this.server.url.href.replace(/\/$/, "");
  }

  /** The model is loaded: start the engine loop and serve. */
  ready(llm: LLM): void {
    this.llm = llm;
    this.loop = new EngineLoop(llm.engine, this.metrics, { maxQueue: this.opts.maxQueue });
    this.state = "ready";
  }

  /**
   * Stop accepting (503) and wait for the requests being served to finish, at most `timeoutMs`;
   * those still running then are aborted. Resolves true when all finished in time.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.state = "draining";
    const loop = this.loop;
    if (loop === null) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const finished = await Promise.race([loop.whenIdle().then(() => true as const), timedOut]);
    clearTimeout(timer);
    return finished;
  }

  /**
   * Abort what still runs, end the engine loop and close the socket (the LLM stays the caller's
   * to close). Responses already complete get a moment to reach their clients before every
   * connection is closed.
   */
  async close(): Promise<void> {
    this.state = "draining";
    await this.loop?.stop();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.server.stop(false), new Promise((resolve) => (timer = setTimeout(resolve, FLUSH_GRACE_MS)))]);
    clearTimeout(timer);
    await this.server.stop(true);
  }

  private async handle(req: Request, server: Server<undefined>): Promise<Response> {
    const t0 = performance.now();
    const path = new URL(req.url).pathname;
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
      response = await this.route(req, path, (usage: Usage) => {
        finished = usage;
        if (streaming) log(usage);
      });
    } catch (e) {
      const error = asApiError(e);
      // The server's own failure: the operator hears of it whatever the flags.
      if (error.status >= 500) process.stderr.write(`pagellm serve: ${req.method} ${path}: ${error.message}\n`);
      response = errorResponse(error);
    }
    status = response.status;
    streaming = response.headers.get("content-type")?.startsWith("text/event-stream") === true;
    if (!streaming || finished !== null) log(finished);
    return response;
  }

  private async route(req: Request, path: string, onDone: GenerationContext["onDone"]): Promise<Response> {
    if (path === "/health") {
      if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(req, "GET");
      return this.state === "ready" ? Response.json({ status: "ok" }) : Response.json({ status: this.state }, { status: 503 });
    }
    if (path === "/metrics") {
      if (req.method !== "GET") throw methodNotAllowed(req, "GET");
      if (this.llm === null) throw unavailable("loading");
      return new Response(this.metrics.render(this.llm.engine.stats), { headers: { "Content-Type": "text/plain; version=0.0.4; charset=utf-8" } });
    }
    if (!path.startsWith("/v1/")) throw new ApiError(404, `no route ${req.method} ${path}`, "not_found_error", null, "not_found");
    this.auth?.check(req);
    if (this.state !== "ready") throw unavailable(this.state);
    const llm = this.llm!;
    // A non-streamed generation sends nothing until it ends, a stream nothing while it waits in the queue.
    if (req.method === "POST") this.server.timeout(req, 0);
    const ctx: GenerationContext = { loop: this.loop!, model: this.opts.modelName, signal: req.signal, onDone };
    switch (path) {
      case "/v1/models":
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        return Response.json(modelList(this.opts.modelName, this.created));
      case "/v1/chat/completions":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return chatCompletions(llm, ctx, BodyFields.parse(await this.readBody(req)));
      case "/v1/completions":
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        return completions(llm, ctx, BodyFields.parse(await this.readBody(req)));
      default:
        throw new ApiError(404, `no route ${req.method} ${path}`, "not_found_error", null, "not_found");
    }
  }

  /** The body as text, at most --max-body-mb: 413 past it (by Content-Length, or counted as it arrives). */
  private async readBody(req: Request): Promise<string> {
    const limit = this.opts.maxBodyBytes;
    const tooLarge = () => new ApiError(413, `request body is larger than ${limit} bytes (--max-body-mb)`, "invalid_request_error", null, "request_too_large");
    const declared = Number(req.headers.get("content-length") ?? "0");
    if (declared > limit) throw tooLarge();
    if (req.body === null) return "";
    const chunks: Uint8Array[] = [];
    let size = 0;
    for await (const chunk of req.body) {
      size += chunk.byteLength;
      if (size > limit) throw tooLarge();
      chunks.push(chunk);
    }
    return new TextDecoder().decode(Buffer.concat(chunks));
  }
}

function methodNotAllowed(req: Request, allowed: string): ApiError {
  return new ApiError(405, `${req.method} is not allowed here; use ${allowed}`, "invalid_request_error", null, "method_not_allowed", { Allow: allowed });
}

function unavailable(state: State): ApiError {
  const why = state === "loading" ? "the model is still loading" : "the server is shutting down";
  return new ApiError(503, why, "service_unavailable", null, state === "loading" ? "model_loading" : "shutting_down", { "Retry-After": "1" });
}
