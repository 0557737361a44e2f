/**
 * The start chat and generate share: the model picked by name, the common fields read, what the
 * model cannot do refused as ollama refuses it, and the answer to an empty prompt (ollama's way
 * of loading a model: `done_reason` "load"; with one model per process it is loaded already,
 * and `keep_alive: 0` unloads nothing).
 */
import type { BodyFields } from "../body-fields.ts";
import type { GenerationContext } from "../generation-run.ts";
import type { OllamaContext } from "./context.ts";
import { modelFacts } from "./model-facts.ts";
import { doesNotSupport } from "./ollama-error.ts";
import { readOllamaSpec, type OllamaSpec } from "./options.ts";
import { envelope, type RequestClock } from "./reply-run.ts";

export interface GenerationSetup extends OllamaSpec {
  /** The model's name as the request gave it. */
  name: string;
  gen: GenerationContext;
  clock: RequestClock;
}

/** `route`: "chat" or "generate", as ollama names what a model that cannot generate does not support. */
export function setUpGeneration(ctx: OllamaContext, f: BodyFields, route: "chat" | "generate"): GenerationSetup {
  const requested = f.raw("model");
  const model = ctx.models.pick(requested);
  const name = requested as string;
  const clock = { arrivedMs: ctx.arrivedMs, modelReadyMs: performance.now() };
  const read = readOllamaSpec(f, ctx.defaults);
  if (!model.llm.capabilities.generate) throw doesNotSupport(name, route, "it is an embedding model (it embeds on /api/embed)");
  if (read.think?.enabled === true && !modelFacts(model.llm).capabilities.includes("thinking")) throw doesNotSupport(name, "thinking");
  return { ...read, name, gen: ctx.generation(model, name), clock };
}

/** The answer to an empty prompt or no messages: the model is loaded. */
export function loaded(setup: GenerationSetup, empty: Record<string, unknown>): Response {
  return Response.json({ ...envelope(setup.name), ...empty, done: true, done_reason: "load" });
}
