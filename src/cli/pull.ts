/**
 * `pagellm pull MODEL`: download a model into the Hugging Face hub cache (or find it there) without
 * running it; prints the local path on stdout.
 */
import { defineCommand, type ArgsDef } from "citty";
import { resolveModelSpec } from "./load.ts";
import { checkKnownOptions } from "./options.ts";

const pullArgs = {
  model: { type: "positional", description: "hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT, an http(s) URL, or a path", valueHint: "model", required: true },
} as const satisfies ArgsDef;

export const pullCommand = defineCommand({
  meta: { name: "pull", description: "Download a model into the Hugging Face cache (HF_HOME, HF_ENDPOINT, HF_TOKEN)" },
  args: pullArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, pullArgs);
    const path = await resolveModelSpec(args.model);
    process.stdout.write(`${path}\n`);
  },
});
