/**
 * ollama's listing routes: `GET /` ("Ollama is running", what apps probe), `GET /api/version`,
 * `GET /api/tags` (the models it can serve) and `GET /api/ps` (those loaded: with one model per
 * process, the served one, loaded for as long as the server runs).
 */
import type { LLM } from "../../llm/llm.ts";
import { modelFacts } from "./model-facts.ts";
import type { OllamaModel, ServedModels } from "./served-models.ts";

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
function listed(m: OllamaModel): Record<string, unknown> {
  const facts = modelFacts(m.llm);
  return { name: m.name, model: m.name, modified_at: facts.modifiedAt, size: facts.size, digest: facts.digest, details: facts.details };
}

export function ollamaTags(models: ServedModels): Response {
  return Response.json({ models: models.all.map(listed) });
}

/** Far enough ahead to mean never: ollama's expires_at for a model kept loaded (keep_alive < 0) is now plus Go's largest duration. */
const NEVER_MS = 292 * 365.25 * 24 * 3600 * 1000;

export function ollamaPs(models: ServedModels): Response {
  return Response.json({
    models: models.all.map((m) => {
      const memory = memoryOf(m.llm, modelFacts(m.llm).size);
      return {
        ...listed(m), expires_at: new Date(Date.now() + NEVER_MS).toISOString(), size: memory,
        size_vram: m.llm.capabilities.generate && m.llm.info.device === "webgpu" ? memory : 0, context_length: contextLength(m.llm),
      };
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
