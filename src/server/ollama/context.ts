/** What an ollama route is given by the server: the models, and the contexts the shared generation and embedding code take. */
import type { EmbeddingContext } from "../embeddings.ts";
import type { ServerRequestDefaults } from "../generation-fields.ts";
import type { GenerationContext } from "../generation-run.ts";
import type { OllamaModel, ServedModels } from "./served-models.ts";

export interface OllamaContext {
  models: ServedModels;
  /** The generation context of `model`, its responses naming it `requested` (ollama echoes the name as the request gave it). */
  generation(model: OllamaModel, requested: string): GenerationContext;
  embedding(model: OllamaModel): EmbeddingContext;
  /** The server's defaults for the sampling fields a request leaves out. */
  defaults: ServerRequestDefaults;
  /** When the request arrived (performance.now() ms). */
  arrivedMs: number;
}
