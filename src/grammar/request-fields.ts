/**
 * Structured output fields as clients spell them, in an HTTP body or a JSONL request line, mapped
 * onto the engine's one `constraint` (ConstraintSpec) with the path of the field that holds the
 * schema, grammar or pattern, so that a compile error of the engine names it
 * (`response_format.json_schema.schema`). The spellings:
 *   - OpenAI: `response_format` `{"type": "text" | "json_object" | "json_schema", "json_schema":
 *     {"name", "description", "schema", "strict"}}` (llama-server's `{"type": "json_object",
 *     "schema": {...}}` too);
 *   - llama-server: `json_schema` (a schema) and `grammar` (GBNF; an empty one is none, as there);
 *   - vLLM: `structured_outputs` `{json | json_object | regex | choice | grammar}` and the older
 *     `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`;
 *   - Anthropic (its own route): `output_config.format` and the beta's `output_format`.
 * At most one of them constrains a request: two are a RequestFieldError naming both. Shapes are
 * checked here (the engine checks the content when it compiles it); a request never runs
 * unconstrained after asking for a constraint. Errors name the field by its path in the body.
 */
import { RequestFieldError } from "../errors.ts";
import type { ConstraintSpec } from "./constraint-spec.ts";

/** A key this reader does not implement (vLLM's `whitespace_pattern`, ...): refused, never ignored. */
export class UnsupportedFieldError extends RequestFieldError {
  constructor(field: string) {
    super(field, "is not supported by this server");
  }
}

/** A constraint and the body path its content came from. */
export interface RequestedConstraint {
  spec: ConstraintSpec;
  /** Where the schema, grammar or pattern is in the body: the engine's errors are renamed to it. */
  path: string;
}

/** Body fields that ask for structured output. */
export const STRUCTURED_OUTPUT_FIELDS = ["response_format", "json_schema", "grammar", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"] as const;

/** vLLM's StructuredOutputsParams keys that choose what to hold output to. */
const STRUCTURED_KINDS = ["json", "json_object", "regex", "choice", "grammar"] as const;

/**
 * The body's one constraint, or null when it asks for none; RequestFieldError naming the fields
 * when it asks for two. `field(name)`: the body's value of `name` (undefined when absent or null).
 */
export function readStructuredOutput(field: (name: string) => unknown): RequestedConstraint | null {
  const found: RequestedConstraint[] = [];
  const names: string[] = [];
  for (const name of STRUCTURED_OUTPUT_FIELDS) {
    const c = readField(name, field(name));
    if (c === null) continue;
    found.push(c);
    names.push(name);
  }
  if (found.length > 1) {
    throw new RequestFieldError(names[1]!, `is a second structured output field: give one, not ${names.map((n) => `'${n}'`).join(" and ")}`);
  }
  return found[0] ?? null;
}

function readField(name: (typeof STRUCTURED_OUTPUT_FIELDS)[number], v: unknown): RequestedConstraint | null {
  if (v === undefined) return null;
  switch (name) {
    case "response_format":
      return readResponseFormat(v);
    case "json_schema":
    case "guided_json":
      return { spec: { kind: "json_schema", schema: schemaAt(v, name) }, path: name };
    case "grammar":
      // llama-server takes an empty grammar as none.
      if (v === "") return null;
      return { spec: { kind: "gbnf", grammar: nonEmptyString(v, name, "a GBNF grammar") }, path: name };
    case "guided_grammar":
      return { spec: { kind: "gbnf", grammar: nonEmptyString(v, name, "a GBNF grammar") }, path: name };
    case "guided_regex":
      return { spec: { kind: "regex", pattern: nonEmptyString(v, name, "a regular expression") }, path: name };
    case "guided_choice":
      return { spec: { kind: "choice", choices: choicesAt(v, name) }, path: name };
    case "structured_outputs":
      return readStructuredOutputs(v);
  }
}

/** OpenAI's response_format (and llama-server's `schema` beside `json_object`). */
function readResponseFormat(v: unknown): RequestedConstraint | null {
  const at = "response_format";
  if (!isObject(v)) throw new RequestFieldError(at, "must be an object with a 'type'");
  const allowed: Record<string, readonly string[]> = { text: [], json_object: ["schema"], json_schema: ["json_schema"] };
  const type = v.type;
  if (typeof type !== "string" || allowed[type] === undefined) {
    throw new RequestFieldError(`${at}.type`, `must be "text", "json_object" or "json_schema"`);
  }
  rejectOtherKeys(v, at, ["type", ...allowed[type]!]);
  if (type === "text") return null;
  if (type === "json_object") {
    if (v.schema === undefined || v.schema === null) return { spec: { kind: "json_object" }, path: at };
    return { spec: { kind: "json_schema", schema: schemaAt(v.schema, `${at}.schema`) }, path: `${at}.schema` };
  }
  const js = v.json_schema;
  const where = `${at}.json_schema`;
  if (!isObject(js)) throw new RequestFieldError(where, 'must be an object: {"name", "schema", "strict"}');
  return namedSchema(js, where, ["name", "description", "schema", "strict"]);
}

/**
 * The Responses API's `text.format` (at `at`): `{"type": "text"}`, `{"type": "json_object"}`, or
 * `{"type": "json_schema", "name", "description", "schema", "strict"}` (the fields beside the type,
 * where response_format nests them).
 */
export function readTextFormat(v: unknown, at: string): RequestedConstraint | null {
  if (!isObject(v)) throw new RequestFieldError(at, "must be an object with a 'type'");
  switch (v.type) {
    case "text":
      rejectOtherKeys(v, at, ["type"]);
      return null;
    case "json_object":
      rejectOtherKeys(v, at, ["type"]);
      return { spec: { kind: "json_object" }, path: at };
    case "json_schema":
      return namedSchema(v, at, ["type", "name", "description", "schema", "strict"]);
    default:
      throw new RequestFieldError(`${at}.type`, `must be "text", "json_object" or "json_schema"`);
  }
}

/**
 * Anthropic's structured output: `output_config.format` (or the older beta's `output_format`), each
 * `{"type": "json_schema", "schema": {...}}` (null or absent: none). `output_config` may also hold
 * `effort`, a hint for Anthropic's models that changes nothing here (checked for its values);
 * other keys are refused. Both spellings at once are a RequestFieldError naming `output_format`.
 */
export function readAnthropicOutputFormat(outputFormat: unknown, outputConfig: unknown): RequestedConstraint | null {
  let fromConfig: RequestedConstraint | null = null;
  if (outputConfig !== undefined && outputConfig !== null) {
    if (!isObject(outputConfig)) throw new RequestFieldError("output_config", "must be an object: {\"format\", \"effort\"}");
    rejectOtherKeys(outputConfig, "output_config", ["format", "effort"]);
    const effort = outputConfig.effort;
    if (effort !== undefined && effort !== null && !(typeof effort === "string" && ANTHROPIC_EFFORTS.includes(effort))) {
      throw new RequestFieldError("output_config.effort", `must be one of ${ANTHROPIC_EFFORTS.join(", ")}`);
    }
    fromConfig = anthropicFormat(outputConfig.format, "output_config.format");
  }
  const fromBeta = anthropicFormat(outputFormat, "output_format");
  if (fromBeta !== null && fromConfig !== null) {
    throw new RequestFieldError("output_format", "is the older spelling of 'output_config.format': give one, not both");
  }
  return fromConfig ?? fromBeta;
}

/** Anthropic's effort levels (output_config.effort). */
const ANTHROPIC_EFFORTS: readonly string[] = ["low", "medium", "high", "xhigh", "max"];

/** One Anthropic format object at `at`: `{"type": "json_schema", "schema": {...}}`. */
function anthropicFormat(v: unknown, at: string): RequestedConstraint | null {
  if (v === undefined || v === null) return null;
  if (!isObject(v)) throw new RequestFieldError(at, 'must be an object: {"type": "json_schema", "schema": {...}}');
  if (v.type !== "json_schema") throw new RequestFieldError(`${at}.type`, 'must be "json_schema"');
  rejectOtherKeys(v, at, ["type", "schema"]);
  if (!isObject(v.schema)) throw new RequestFieldError(`${at}.schema`, "must be a JSON Schema object: the schema the output must follow");
  return { spec: { kind: "json_schema", schema: v.schema }, path: `${at}.schema` };
}

/** A named JSON Schema (`name`, `description`, `schema`, `strict`; `keys` are all it may hold) at `where`. */
function namedSchema(js: Record<string, unknown>, where: string, keys: readonly string[]): RequestedConstraint {
  rejectOtherKeys(js, where, keys);
  if (js.name !== undefined && typeof js.name !== "string") throw new RequestFieldError(`${where}.name`, "must be a string");
  if (js.description !== undefined && typeof js.description !== "string") throw new RequestFieldError(`${where}.description`, "must be a string");
  if (js.strict !== undefined && js.strict !== null && typeof js.strict !== "boolean") throw new RequestFieldError(`${where}.strict`, "must be a boolean");
  if (js.schema === undefined || js.schema === null) throw new RequestFieldError(`${where}.schema`, "is required: the JSON Schema the output must follow");
  return { spec: { kind: "json_schema", schema: schemaAt(js.schema, `${where}.schema`) }, path: `${where}.schema` };
}

/** vLLM's structured_outputs: exactly one of its kinds. */
function readStructuredOutputs(v: unknown): RequestedConstraint | null {
  const at = "structured_outputs";
  if (!isObject(v)) throw new RequestFieldError(at, `must be an object: one of ${STRUCTURED_KINDS.join(", ")}`);
  const given = Object.keys(v).filter((k) => v[k] !== null && v[k] !== undefined);
  for (const key of given) {
    if (!(STRUCTURED_KINDS as readonly string[]).includes(key)) throw new UnsupportedFieldError(`${at}.${key}`);
  }
  if (given.length === 0) return null;
  if (given.length > 1) {
    throw new RequestFieldError(`${at}.${given[1]}`, `is a second kind: '${at}' takes one of ${STRUCTURED_KINDS.join(", ")}, not ${given.map((k) => `'${k}'`).join(" and ")}`);
  }
  const key = given[0]!;
  const path = `${at}.${key}`;
  const value = v[key];
  switch (key) {
    case "json":
      return { spec: { kind: "json_schema", schema: schemaAt(value, path) }, path };
    case "json_object":
      if (value !== true) throw new RequestFieldError(path, "must be true");
      return { spec: { kind: "json_object" }, path };
    case "regex":
      return { spec: { kind: "regex", pattern: nonEmptyString(value, path, "a regular expression") }, path };
    case "choice":
      return { spec: { kind: "choice", choices: choicesAt(value, path) }, path };
    default:
      return { spec: { kind: "gbnf", grammar: nonEmptyString(value, path, "a GBNF grammar") }, path };
  }
}

/** A JSON Schema as an object, a boolean, or its text (vLLM takes both). */
function schemaAt(v: unknown, at: string): unknown {
  if (typeof v === "boolean" || typeof v === "string" || isObject(v)) return v;
  throw new RequestFieldError(at, "must be a JSON Schema: an object, a boolean or its text");
}

function nonEmptyString(v: unknown, at: string, what: string): string {
  if (typeof v !== "string" || v === "") throw new RequestFieldError(at, `must be ${what} (a non-empty string)`);
  return v;
}

function choicesAt(v: unknown, at: string): string[] {
  if (!Array.isArray(v) || v.length === 0 || !v.every((c) => typeof c === "string")) {
    throw new RequestFieldError(at, "must be a non-empty array of strings");
  }
  return v as string[];
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function rejectOtherKeys(v: Record<string, unknown>, at: string, keys: readonly string[]): void {
  for (const key of Object.keys(v)) if (!keys.includes(key)) throw new UnsupportedFieldError(`${at}.${key}`);
}
