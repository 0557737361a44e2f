/** The architectures pagellm runs, by `general.architecture`. */
import type { Architecture } from "./architecture.ts";
import { gemma3 } from "./gemma3.ts";
import { gptOss } from "./gpt-oss.ts";
import { llama } from "./llama.ts";
import { phi3 } from "./phi3.ts";
import { qwen2 } from "./qwen2.ts";
import { qwen3 } from "./qwen3.ts";
import { qwen3moe } from "./qwen3moe.ts";
import { smollm3 } from "./smollm3.ts";

export type { Architecture, TensorDerived } from "./architecture.ts";

export const ARCHITECTURES: ReadonlyMap<string, Architecture> = new Map([llama, qwen2, qwen3, qwen3moe, gemma3, phi3, smollm3, gptOss].map((a) => [a.name, a]));
