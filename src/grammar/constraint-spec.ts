/**
 * What a request holds its output to, and what compiles it (src/grammar/constraints.ts
 * implements the compiler; the front door, src/llm/, calls it and hands the engine the
 * TokenConstraints it makes).
 */
import type { CallSyntax } from "../tools/call-syntax.ts";
import type { TokenConstraint } from "../constraint/token-constraint.ts";

/** What to hold output to; the request's `constraint` field (the server maps OpenAI's, llama-server's and vLLM's fields here). */
export type ConstraintSpec =
  /** A JSON Schema (a JSON value, or its text: key order kept exactly). */
  | { readonly kind: "json_schema"; readonly schema: unknown }
  /** Any JSON object (OpenAI's `{"type": "json_object"}`). */
  | { readonly kind: "json_object" }
  /** The whole output matches this regular expression (vLLM's `regex`). */
  | { readonly kind: "regex"; readonly pattern: string }
  /** The output is exactly one of these strings (vLLM's `choice`). */
  | { readonly kind: "choice"; readonly choices: readonly string[] }
  /** A llama.cpp GBNF grammar (llama-server's `grammar`), start rule `root`. */
  | { readonly kind: "gbnf"; readonly grammar: string }
  /**
   * A request's tool calls in its chat format's syntax (not a request field: the front door
   * derives it from the request's tools and tool_choice, docs/tools.md).
   */
  | { readonly kind: "tool_calls"; readonly syntax: CallSyntax };

/** Compiles constraints for one model's vocabulary (cached by content). */
export interface ConstraintCompiler {
  /**
   * A factory of fresh constraints at the start of `spec`; throws RequestFieldError naming the
   * field (`constraint`, and the keyword, rule or limit) when it cannot be compiled.
   */
  compile(spec: ConstraintSpec): () => TokenConstraint;
}
