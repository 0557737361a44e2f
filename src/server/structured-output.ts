/**
 * A body's structured output fields (OpenAI's response_format, llama-server's json_schema and
 * grammar, vLLM's structured_outputs and guided_*: src/grammar/request-fields.ts reads them) as
 * the request's constraint, and the Responses API's `text.format`; a bad shape a 400 naming the
 * field as the body spells it.
 */
import { RequestFieldError } from "../errors.ts";
import { readAnthropicOutputFormat, readStructuredOutput as readFields, readTextFormat, UnsupportedFieldError, type RequestedConstraint } from "../grammar/request-fields.ts";
import { ApiError } from "./api-error.ts";
import type { BodyFields, Json } from "./body-fields.ts";

export function readStructuredOutput(f: BodyFields): RequestedConstraint | null {
  return asApiErrors(() => readFields((name) => f.raw(name)));
}

/** The Responses API's `text.format` as the request's constraint (null: plain text). */
export function readResponsesTextFormat(v: Json): RequestedConstraint | null {
  return asApiErrors(() => readTextFormat(v, "text.format"));
}

/** Anthropic's `output_config.format` / `output_format` as the request's constraint (null: plain text). */
export function readAnthropicStructuredOutput(f: BodyFields): RequestedConstraint | null {
  return asApiErrors(() => readAnthropicOutputFormat(f.raw("output_format"), f.raw("output_config")));
}

function asApiErrors<T>(read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof UnsupportedFieldError) throw ApiError.unsupported(e.field, `'${e.field}'`);
    if (e instanceof RequestFieldError) throw ApiError.badField(e.field, `'${e.field}' ${e.problem}`);
    throw e;
  }
}
