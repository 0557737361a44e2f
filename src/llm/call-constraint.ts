/**
 * The constraint a request's tool calls get (docs/tools.md): the chat format's call
 * syntax (call-syntax.ts) with every callable function's arguments schema, compiled by the
 * grammar engine (src/grammar/tool-calls.ts, triggered.ts):
 *   - tool_choice "required" or a named function: the reply (after any reasoning) is a block of
 *     calls (several when parallel_tool_calls is on and no function is named);
 *   - "auto": free text until the model writes the format's trigger (`<tool_call>`, Mistral's
 *     `[TOOL_CALLS]` token, gpt-oss's `<|channel|>commentary to=functions.`), then the call to its
 *     end, then free text again (or only the end, with parallel_tool_calls off);
 *   - "none", or no tools: nothing.
 * Qwen3-Coder's XML calls are constrained parameter by parameter (src/grammar/xml-parameters.ts).
 * Control tokens in a format's syntax (Mistral's `[TOOL_CALLS]`, gpt-oss's harmony headers) are
 * asked for as the tokens themselves.
 */
import type { ConstraintSpec } from "../grammar/constraint-spec.ts";
import { replyCallSyntax, type ReplySetup } from "../tools/reply-reader.ts";

export function toolCallConstraint(reply: ReplySetup): ConstraintSpec | null {
  const syntax = replyCallSyntax(reply);
  if (syntax === null || syntax.calls.length === 0) return null;
  return { kind: "tool_calls", syntax };
}
