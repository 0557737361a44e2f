/**
 * Structured output on the command line (generate, chat): --json-schema, --grammar, --regex,
 * --choice, as the request's constraint. A schema or grammar is read from a file, or given inline
 * as llama.cpp's options take it (a value that starts with "{" is a schema's JSON; one with "::="
 * is a grammar's text). At most one of them: two are an error naming both. What the compiler
 * refuses is found when the model is loaded (the vocabulary is needed) and named by the option.
 */
import type { ArgsDef } from "citty";
import { InputError, RequestFieldError } from "../errors.ts";
import type { ConstraintSpec } from "../grammar/constraint-spec.ts";
import type { LLM } from "../llm/llm.ts";
import { readPromptFile } from "./inputs.ts";
import { repeated, type ParsedValues } from "./options.ts";

export const constraintArgs = {
  "json-schema": {
    type: "string",
    description: "Hold the output to this JSON Schema: a file, or the schema's JSON inline (see docs/structured-output.md)",
    valueHint: "file",
  },
  grammar: { type: "string", description: "Hold the output to this GBNF grammar (llama.cpp's format, start rule root): a .gbnf file, or its text inline", valueHint: "file" },
  regex: { type: "string", description: "Hold the output to this regular expression (the whole output matches it)", valueHint: "re" },
  choice: { type: "string", description: "The output is exactly one of these comma-separated strings (repeatable: each adds one or more)", valueHint: "a,b,c" },
} as const satisfies ArgsDef;

/** The constraint the options ask for and the option that gave it (errors name it); null when none. */
export interface ConstraintOption {
  spec: ConstraintSpec;
  option: string;
}

export function constraintOption(values: ParsedValues, rawArgs: readonly string[]): ConstraintOption | null {
  const given = (["json-schema", "grammar", "regex", "choice"] as const).filter((name) => typeof values[name] === "string");
  if (given.length > 1) throw new InputError(`give one of --json-schema, --grammar, --regex, --choice, not ${given.map((n) => `--${n}`).join(" and ")}`);
  const name = given[0];
  if (name === undefined) return null;
  const value = values[name] as string;
  const option = `--${name}`;
  switch (name) {
    case "json-schema":
      return { spec: jsonSchemaSpec(value), option };
    case "grammar":
      return { spec: { kind: "gbnf", grammar: value.includes("::=") ? value : readPromptFile(value, "grammar file") }, option };
    case "regex":
      if (value === "") throw new InputError("--regex needs a regular expression");
      return { spec: { kind: "regex", pattern: value }, option };
    case "choice": {
      const choices = repeated(rawArgs, "choice").flatMap((v) => v.split(","));
      if (choices.some((c) => c === "")) throw new InputError("--choice takes non-empty comma-separated strings, got an empty one");
      return { spec: { kind: "choice", choices }, option };
    }
  }
}

/**
 * Compile `spec` for `llm` now (cached by content: the requests that use it start at once); the
 * compiler's refusal as one line naming `label`, or null when it compiles.
 */
export function constraintProblem(llm: LLM, spec: ConstraintSpec, label: string): string | null {
  try {
    llm.client.prepare({ promptTokenIds: [0], maxTokens: 1, constraint: spec });
    return null;
  } catch (e) {
    if (e instanceof RequestFieldError) return `${label} ${e.problem}`;
    throw e;
  }
}

/** A JSON Schema given as a file or inline (--json-schema, chat's /schema), as its text. */
export function jsonSchemaSpec(value: string): ConstraintSpec {
  return { kind: "json_schema", schema: schemaText(value) };
}

/** A schema's text: inline JSON, or a file's (kept as text: the compiler keeps its key order). */
function schemaText(value: string): string {
  const start = value.trimStart();
  const inline = start.startsWith("{") || start === "true" || start === "false";
  const text = inline ? value : readPromptFile(value, "schema file");
  try {
    JSON.parse(text);
  } catch (e) {
    throw new InputError(`${inline ? "--json-schema" : value}: the schema is not JSON: ${(e as Error).message}`);
  }
  return text;
}
