/**
 * The routes of a server of several models about the models themselves: `GET /v1/models` (every
 * model it can serve, with its state as llama-server's router names them, "loaded", "loading",
 * "unloaded", and "failed" for a model whose last load failed; what it can do; the memory it
 * holds or will hold), `GET /v1/models/{id}`, llama-server's `POST /models/load` and
 * `POST /models/unload` (body `{"model": NAME}`), and the registry's own /metrics series.
 */
import type { LLM } from "../../llm/llm.ts";
import { ApiError, excerpt } from "../api-error.ts";
import type { BodyFields } from "../body-fields.ts";
import type { MetricSet } from "../metrics.ts";
import { fileFacts, type ModelFacts } from "../ollama/model-facts.ts";
import type { ModelRegistry, ModelStatus } from "./registry.ts";

/** One model's object: OpenAI's fields, what it can do, and its state. */
function modelObject(s: ModelStatus<LLM>, created: number): Record<string, unknown> {
  const caps = s.model?.capabilities ?? null;
  let capabilities: string[];
  let facts: ModelFacts | null = null;
  if (caps !== null) {
    capabilities = [caps.generate ? "completion" : null, caps.embed ? "embedding" : null, caps.rerank ? "rerank" : null].filter((c) => c !== null);
  } else {
    try {
      facts = fileFacts(s.file);
      capabilities = facts.capabilities.filter((c) => c === "completion" || c === "embedding");
      if (facts.reranks) capabilities.push("rerank");
    } catch {
      capabilities = []; // a file that cannot be read: its state says why
    }
  }
  const status: Record<string, unknown> = { value: s.state };
  if (s.state === "failed" && s.error !== null) status.error = s.error.message.split("\n")[0];
  const loaded = s.model !== null && s.model.capabilities.generate ? { context_length: s.model.info.contextLength } : {};
  return {
    id: s.name, object: "model", created, owned_by: "pagellm", capabilities, aliases: s.aliases, pinned: s.pinned, status,
    memory_bytes: s.bytes, ...loaded, ...(facts === null ? {} : { quantization: facts.details.quantization_level }),
  };
}

export function modelListOf(registry: ModelRegistry<LLM>, created: number): Record<string, unknown> {
  return { object: "list", data: registry.list().map((s) => modelObject(s, created)) };
}

/** `GET /v1/models/{id}` (the id percent-encoded, as clients send a name with '/'). */
export function retrieveModelOf(registry: ModelRegistry<LLM>, encodedId: string, created: number): Record<string, unknown> {
  let id: string;
  try {
    id = decodeURIComponent(encodedId);
  } catch {
    id = encodedId;
  }
  if (registry.resolve(id) === null) throw new ApiError(404, `The model '${excerpt(id, 100)}' does not exist on this server`, "not_found_error", null, "model_not_found");
  return modelObject(registry.statusOf(id), created);
}

/** The `model` a request names (400 when it names none: a server of several cannot guess). */
export function requestedModel(f: BodyFields, field = "model"): string {
  const v = f.body[field];
  if (v === undefined || v === null || v === "") throw ApiError.badField(field, `'${field}' is required: this server serves several models (GET /v1/models lists them)`);
  if (typeof v !== "string") throw ApiError.badField(field, `'${field}' must be a string`);
  return v;
}

/** `POST /models/load`: loads the model (waiting for it), answers llama-server's `{"success": true}`. */
export async function loadRoute(registry: ModelRegistry<LLM>, f: BodyFields): Promise<Response> {
  const name = requestedModel(f);
  f.raw("model");
  f.rejectUnknown();
  await registry.load(name);
  return Response.json({ success: true, model: registry.resolve(name), status: registry.statusOf(name).state });
}

/** `POST /models/unload`: unloads it now, or when the requests holding it end. */
export async function unloadRoute(registry: ModelRegistry<LLM>, f: BodyFields): Promise<Response> {
  const name = requestedModel(f);
  f.raw("model");
  f.rejectUnknown();
  const wasLoaded = await registry.unload(name);
  return Response.json({ success: true, model: registry.resolve(name), was_loaded: wasLoaded, status: registry.statusOf(name).state });
}

/** The registry's series: the budget, the bytes held, and per model its state, memory, requests holding it and loads. */
export function registryMetrics(registry: ModelRegistry<LLM>, out: MetricSet): void {
  out.add("memory_budget_bytes", "gauge", "Bytes all loaded models may hold together (--memory-budget).", [`pagellm:memory_budget_bytes ${registry.budgetBytes}`]);
  out.add("memory_used_bytes", "gauge", "Bytes the loaded and loading models hold.", [`pagellm:memory_used_bytes ${registry.usedBytes}`]);
  for (const s of registry.list()) {
    const label = `model="${s.name.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;
    out.add("model_loaded", "gauge", "1 when the model is loaded, else 0.", [`pagellm:model_loaded{${label}} ${s.state === "loaded" ? 1 : 0}`]);
    out.add("model_memory_bytes", "gauge", "Bytes the model holds (0 when not loaded).", [`pagellm:model_memory_bytes{${label}} ${s.state === "loaded" ? s.bytes ?? 0 : 0}`]);
    out.add("model_requests_in_flight", "gauge", "Requests holding the model (running, queued, or waiting for its load).", [`pagellm:model_requests_in_flight{${label}} ${s.inFlight}`]);
    out.add("model_loads_total", "counter", "Times the model was loaded.", [`pagellm:model_loads_total{${label}} ${s.loads}`]);
  }
}
