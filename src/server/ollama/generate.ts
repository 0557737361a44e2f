/**
 * `POST /api/generate`: a prompt answered as ollama answers it. The prompt (after `system`, when
 * given) is the user's message rendered with the model's chat template; `raw` sends it as it is,
 * as /v1/completions does. The reply is `response` and, for a model that reasons, `thinking`,
 * streamed as NDJSON lines unless `stream` is false. An empty prompt loads the model (done_reason
 * "load"). Not implemented, each a 400 naming it: `template` (ollama's Go templates: the model's
 * own chat template is used), `suffix` (fill-in-the-middle), `context` (the older way to continue
 * a conversation: send /api/chat its messages), `images`.
 */
import type { ChatMessage } from "../../chat/jinja-template.ts";
import type { PreparedRequest } from "../../llm/input-processor.ts";
import type { ReplyDelta } from "../../tools/reply-reader.ts";
import { ApiError } from "../api-error.ts";
import type { BodyFields } from "../body-fields.ts";
import { requestError } from "../generation-fields.ts";
import type { Choice } from "../generation-run.ts";
import type { OllamaContext } from "./context.ts";
import { loaded, setUpGeneration } from "./generation-setup.ts";
import { runReply, type ReplyShape } from "./reply-run.ts";

export async function ollamaGenerate(ctx: OllamaContext, f: BodyFields): Promise<Response> {
  const setup = setUpGeneration(ctx, f, "generate");
  const prompt = f.string("prompt") ?? "";
  const system = f.string("system") ?? "";
  const raw = f.boolean("raw") ?? false;
  const template = f.string("template") ?? "";
  const context = f.raw("context");
  const hasContext = Array.isArray(context) ? context.length > 0 : context !== undefined;
  if (raw && (template !== "" || system !== "" || hasContext)) throw ApiError.badField("raw", "raw mode does not support template, system, or context");
  if (template !== "") throw ApiError.unsupported("template", "'template' (ollama's Go templates; the model's chat template is used)");
  f.onlyNeutral("suffix", "'suffix' (fill-in-the-middle)", (v) => v === "");
  if (hasContext) throw ApiError.unsupported("context", "'context' (send the conversation to /api/chat as messages)");
  f.onlyNeutral("images", "images", (v) => Array.isArray(v) && v.length === 0);
  f.rejectUnknown();
  if (prompt === "") return loaded(setup, { response: "" });
  const { spec } = setup;
  const messages: ChatMessage[] = [...(system === "" ? [] : [{ role: "system", content: system }]), { role: "user", content: prompt }];
  let prepared: PreparedRequest;
  try {
    const input = raw ? { ...spec.fields, prompt } : { ...spec.fields, messages, chatTemplateKwargs: setup.think?.kwargs };
    prepared = setup.gen.client.prepare(input, { maxSamples: 1 });
  } catch (e) {
    throw requestError(e, spec, "prompt");
  }
  return runReply(setup.gen, prepared, spec, GENERATE_SHAPE, setup.clock);
}

const GENERATE_SHAPE: ReplyShape = {
  part: (d: ReplyDelta) => withThinking(d.content, d.reasoning),
  whole: (c: Choice) => withThinking(c.message.content, c.message.reasoning),
  calls: () => null,
  last: { response: "" },
};

function withThinking(response: string, reasoning: string): Record<string, unknown> {
  return reasoning === "" ? { response } : { response, thinking: reasoning };
}
