/**
 * The models the ollama routes serve, and the one function that picks a request's model by its
 * name. Today the server runs one model under one name, listed as ollama lists a model: with a
 * tag (`NAME:latest` when the served name has none); a request may name it with or without the tag.
 * A model registry (several models, loaded on demand) replaces the list and keeps `pick`.
 */
import type { LLM } from "../../llm/llm.ts";
import { ApiError } from "../api-error.ts";
import { modelNotFound } from "./ollama-error.ts";

export interface OllamaModel {
  /** The name with its tag, as ollama lists it. */
  name: string;
  llm: LLM;
  /** When the model was loaded (ms since the epoch). */
  loadedAt: number;
}

export class ServedModels {
  constructor(private readonly models: readonly OllamaModel[]) {}

  /** One model served under `name` (tagged `:latest` when it has no tag). */
  static single(name: string, llm: LLM, loadedAt: number): ServedModels {
    return new ServedModels([{ name: withTag(name), llm, loadedAt }]);
  }

  get all(): readonly OllamaModel[] {
    return this.models;
  }

  /** The model a request names in `field`: 400 when it names none, ollama's 404 when none has that name. */
  pick(requested: unknown, field = "model"): OllamaModel {
    if (requested === undefined || requested === null || requested === "") throw ApiError.badField(field, `${field} is required`);
    if (typeof requested !== "string") throw ApiError.badField(field, `'${field}' must be a string`);
    const wanted = withTag(requested);
    const found = this.models.find((m) => m.name === wanted);
    if (found === undefined) throw modelNotFound(requested);
    return found;
  }
}

/** `name` with ollama's default tag when it has none (a tag follows the last ':' after the last '/'). */
export function withTag(name: string): string {
  const base = name.slice(name.lastIndexOf("/") + 1);
  return base.includes(":") ? name : `${name}:latest`;
}
