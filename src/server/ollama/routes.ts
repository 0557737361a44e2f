/**
 * ollama's API (`/` and `/api/*`) as a route table: each path, the methods it takes, and its
 * handler. The server hooks it in ahead of its own routes (server.ts) and gives each request an
 * OllamaContext; errors leave in ollama's shape (ollama-error.ts). Not here: pulling, pushing,
 * creating, copying and deleting models (`/api/pull`, `/api/delete`, ...): this server serves the
 * model it was started with.
 */
import { ApiError, methodNotAllowed } from "../api-error.ts";
import type { BodyFields } from "../body-fields.ts";
import { ollamaChat } from "./chat.ts";
import type { OllamaContext } from "./context.ts";
import { ollamaEmbed, ollamaEmbeddings } from "./embed.ts";
import { ollamaGenerate } from "./generate.ts";
import { ollamaPs, ollamaRoot, ollamaTags, ollamaVersion } from "./listing.ts";
import { ollamaShow } from "./show.ts";

/** How a route answers: without a body (GET), or with the request's JSON body read. */
type OllamaRoute =
  | { method: "GET"; answer: (ctx: OllamaContext) => Response }
  | { method: "POST"; answer: (ctx: OllamaContext, f: BodyFields) => Response | Promise<Response>; embeds?: boolean };

const ROUTES: ReadonlyMap<string, OllamaRoute> = new Map<string, OllamaRoute>([
  ["/api/version", { method: "GET", answer: () => ollamaVersion() }],
  ["/api/tags", { method: "GET", answer: (ctx) => ollamaTags(ctx.models) }],
  ["/api/ps", { method: "GET", answer: (ctx) => ollamaPs(ctx.models) }],
  ["/api/show", { method: "POST", answer: (ctx, f) => ollamaShow(ctx.models, ctx.defaults, f) }],
  ["/api/chat", { method: "POST", answer: ollamaChat }],
  ["/api/generate", { method: "POST", answer: ollamaGenerate }],
  ["/api/embed", { method: "POST", answer: ollamaEmbed, embeds: true }],
  ["/api/embeddings", { method: "POST", answer: ollamaEmbeddings, embeds: true }],
]);

/** ollama's paths: its root (what apps probe) and everything under /api/. */
export function isOllamaPath(path: string): boolean {
  return path === "/" || path.startsWith("/api/");
}

/** `GET /` and `HEAD /`: answered whatever the server's state, as ollama answers them. */
export function ollamaRootRoute(req: Request): Response | null {
  if (req.method !== "GET" && req.method !== "HEAD") return null;
  return ollamaRoot();
}

/** What the server does for a route: read the body, count an embedding call as running. */
export interface OllamaServing {
  readFields(): Promise<BodyFields>;
  embeddingCall(run: () => Promise<Response>): Promise<Response>;
}

/** The answer of the route at `path` (a 404 for another, a 405 for another method). */
export async function ollamaRoute(req: Request, path: string, ctx: OllamaContext, serving: OllamaServing): Promise<Response> {
  const route = ROUTES.get(path);
  if (route === undefined) throw new ApiError(404, `404 page not found: ${req.method} ${path} (pull, push, create, copy and delete are not served: this server serves the model it was started with)`, "not_found_error", null, "not_found");
  const isGet = req.method === "GET" || req.method === "HEAD";
  if (route.method === "GET") {
    if (!isGet) throw methodNotAllowed(req, "GET, HEAD");
    return route.answer(ctx);
  }
  if (req.method !== "POST") throw methodNotAllowed(req, "POST");
  if (route.embeds === true) return serving.embeddingCall(async () => route.answer(ctx, await serving.readFields()));
  return route.answer(ctx, await serving.readFields());
}
