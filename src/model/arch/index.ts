/** The architectures pagellm runs, by `general.architecture`. */
import type { Architecture } from "./architecture.ts";
import { llama } from "./llama.ts";
import { qwen2 } from "./qwen2.ts";
import { qwen3 } from "./qwen3.ts";
import { qwen3moe } from "./qwen3moe.ts";

export type { Architecture, TensorDerived } from "./architecture.ts";

export const ARCHITECTURES: ReadonlyMap<string, Architecture> = new Map([llama, qwen2, qwen3, qwen3moe].map((a) => [a.name, a]));
