/**
 * What a tool call looks like in each format, written so that a grammar can be built from it: the
 * hook by which the structured-output engine (src/grammar/) will constrain a call's
 * arguments to its function's JSON Schema. It follows xgrammar's structural tags and llama.cpp's
 * lazy grammars:
 *
 *   block := prefix call (separator call)* suffix        (one call only when parallel is off)
 *   call  := begin(name) ARGUMENTS(schema of name) end(name)
 *
 * - tool_choice "required" or a named function: the reply (after its reasoning) is one block,
 *   `mode: "forced"`: the grammar applies from the reply's first token.
 * - tool_choice "auto": `mode: "lazy"`: the reply is free text until one of `triggers` appears
 *   (xgrammar's structural-tag triggers, llama.cpp's grammar trigger words); from the trigger on,
 *   the grammar of a block applies, its text starting with that trigger.
 *
 * Formats written with control tokens (Mistral's `[TOOL_CALLS]`, gpt-oss's harmony headers) name
 * them in `controlTokens`: the grammar then asks for the tokens themselves, as the model writes them.
 *
 * ARGUMENTS is the JSON object the schema describes (`argumentsAs: "json"`), except in
 * Qwen3-Coder's XML format (`"xml-parameters"`: one `<parameter=NAME>\nVALUE\n</parameter>` per
 * property, each value by its property's schema). Nothing here compiles a grammar: the format
 * modules say what their parser reads back (tests/tool-formats.test.ts checks that every syntax
 * renders text its own parser reads as the same call).
 */
import type { JsonValue, ToolDefinition } from "./tool-types.ts";

export interface CallSyntaxItem {
  /** The function. */
  name: string;
  /** Text before the arguments. */
  begin: string;
  /** Other texts the same call may begin with (gpt-oss's recipient in the role, or without `<|constrain|>`). */
  alternativeBegins?: readonly string[];
  /** The arguments' JSON Schema ({"type": "object"} where the tool gives none). */
  schema: { readonly [key: string]: JsonValue };
  /** Text after the arguments. */
  end: string;
  /**
   * For a call written as a JSON object `{"name": NAME, KEY: ARGUMENTS}` (every format but
   * Qwen3-Coder's and harmony's): the text before the object, KEY, and the text after it. The
   * grammar then lets JSON whitespace vary inside and around the object, as models write it
   * (`begin` and `end` spell one way, with the spaces of Python's json.dumps).
   */
  object?: { open: string; argumentsKey: string; close: string };
  /**
   * For Qwen3-Coder's XML calls: the parameters the function may be given, in its schema's order
   * (llama.cpp's grammar for the format writes them in that order, each optional one optional).
   */
  parameters?: readonly CallParameter[];
}

/** One `<parameter=NAME>\nVALUE\n</parameter>` of an XML call. */
export interface CallParameter {
  name: string;
  /** `<parameter=NAME>\n`. */
  begin: string;
  /** `\n</parameter>`. */
  end: string;
  required: boolean;
  /**
   * "text": the value is the parameter's text as written (a `string` schema, or a parameter the
   * schema does not declare), which cannot contain `end`; "json": a JSON value (any other schema).
   */
  value: "text" | "json";
  /** Where the parameter's schema is in the arguments schema: a JSON pointer (`#/properties/city`), null where undeclared. */
  schemaAt: string | null;
}

export interface CallSyntax {
  /** "forced": the reply is a block of calls; "lazy": free text until a trigger opens a block. */
  mode: "forced" | "lazy";
  /** Texts that open a block in lazy mode (a block's text starts with the trigger it matched). */
  triggers: readonly string[];
  /** Text that opens a block before its first call (Mistral's `[TOOL_CALLS][`). */
  prefix: string;
  calls: readonly CallSyntaxItem[];
  /** Text between two calls of a block. */
  separator: string;
  /** Text that closes a block (Mistral's `]`). */
  suffix: string;
  /** Whether a block may hold more than one call (parallel_tool_calls). */
  parallel: boolean;
  /** How the arguments are written. */
  argumentsAs: "json" | "xml-parameters";
  /**
   * Texts the model writes as one control token (llama.cpp's preserved tokens that its grammars
   * match as tokens: Mistral's `[TOOL_CALLS]`, gpt-oss's `<|channel|>`): wherever the texts above
   * hold one and the model's vocabulary has it as a special token, the grammar asks for that token,
   * and a trigger is that token (the text written in pieces opens nothing).
   */
  controlTokens: readonly string[];
  /** A message of free text that may come before a forced block: `open`, any text, `close` (gpt-oss's analysis channel). */
  preamble?: { open: string; close: string };
  /** What the prompt ends with, that a trigger may begin with (gpt-oss's `<|start|>assistant`). */
  lead?: string;
}

/** A function's arguments schema: its own, or any object. */
export function argumentsSchema(tool: ToolDefinition): { readonly [key: string]: JsonValue } {
  return tool.function.parameters ?? { type: "object" };
}
