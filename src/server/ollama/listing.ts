/**
 * ollama's listing routes: `GET /` ("Ollama is running", what apps probe), `GET /api/version`,
 * `GET /api/tags` (the models it can serve) and `GET /api/ps` (those loaded: with one model per
 * process, the served one, loaded for as long as the server runs).
 */
import type { LLM } from "../../llm/llm.ts";
import { fileFacts, modelFacts, type ModelFacts } from "./model-facts.ts";
import { withTag, type ServedModels } from "./served-models.ts";

/**
 * The version /api/version reports: apps refuse servers older than they need (Open WebUI and
 * others check for at least 0.6.4 before using `think`, tools or structured outputs).
 */
export const OLLAMA_VERSION = "0.12.0";

/** ollama's answer to `GET /` (`HEAD /` gets its headers). */
export function ollamaRoot(): Response {
  return new Response("Ollama is running", { headers: { "Content-Type": "text/plain; charset=utf-8" } });
}

export function ollamaVersion(): Response {
  return Response.json({ version: OLLAMA_VERSION });
}

/** One entry of /api/tags. */
function listed(name: string, facts: ModelFacts): Record<string, unknown> {
  return { name, model: name, modified_at: facts.modifiedAt, size: facts.size, digest: facts.digest, details: facts.details };
}

export function ollamaTags(models: ServedModels): Response {
  return Response.json({ models: models.all.map((m) => listed(m.name, modelFacts(m.llm))) });
}

/** Far enough ahead to mean never: ollama's expires_at for a model kept loaded (keep_alive < 0) is now plus Go's largest duration. */
const NEVER_MS = 292 * 365.25 * 24 * 3600 * 1000;

export function ollamaPs(models: ServedModels): Response {
  return Response.json({ models: models.all.map((m) => running(m.name, m.llm, memoryOf(m.llm, modelFacts(m.llm).size), null)) });
}

/** One entry of /api/ps: `expiresAt` null for never. */
function running(name: string, llm: LLM, memory: number, expiresAt: number | null): Record<string, unknown> {
  return {
    ...listed(name, modelFacts(llm)), expires_at: new Date(expiresAt ?? Date.now() + NEVER_MS).toISOString(), size: memory,
    size_vram: llm.capabilities.generate && llm.info.device === "webgpu" ? memory : 0, context_length: contextLength(llm),
  };
}

/** A model of a server of several, as its listings see it: loaded (llm) or only a file. */
export interface ListedModel {
  name: string;
  file: string;
  llm: LLM | null;
  /** Bytes it holds, as the server's memory budget counts them. */
  bytes: number | null;
  /** When it unloads unless used (ms since the epoch); null: never, or in use. */
  expiresAt: number | null;
  inUse: boolean;
  /** How long it stays loaded after its last request, ms (negative: never). */
  keepAliveMs: number;
}

/** /api/tags of a server of several models: each with its tag, loaded or not. */
export function ollamaTagsOf(models: readonly ListedModel[]): Response {
  const entries = models.flatMap((m) => {
    try {
      return [listed(withTag(m.name), m.llm === null ? fileFacts(m.file) : modelFacts(m.llm))];
    } catch {
      return []; // a file that cannot be read (GET /v1/models says why once a request tries it)
    }
  });
  return Response.json({ models: entries });
}

/** /api/ps of a server of several models: the loaded ones, with the bytes the budget counts and when each unloads. */
export function ollamaPsOf(models: readonly ListedModel[], nowMs: number): Response {
  const loaded = models.filter((m): m is ListedModel & { llm: LLM } => m.llm !== null);
  return Response.json({
    models: loaded.map((m) => {
      // In use: it unloads its keep_alive after the request ends, as ollama shows it.
      const expiresAt = m.inUse ? (m.keepAliveMs < 0 ? null : nowMs + m.keepAliveMs) : m.expiresAt;
      return running(withTag(m.name), m.llm, m.bytes ?? memoryOf(m.llm, modelFacts(m.llm).size), expiresAt);
    }),
  });
}

/** The context the model runs at (an encoder: the one its file gives). */
export function contextLength(llm: LLM): number {
  return llm.capabilities.generate ? llm.info.contextLength : 0;
}

/** Memory the model holds: its file's weights and, for a generating model, its KV cache. */
function memoryOf(llm: LLM, fileBytes: number): number {
  if (!llm.capabilities.generate) return fileBytes;
  const info = llm.info;
  return fileBytes + info.numBlocks * info.kvLayout.blockBytes;
}
