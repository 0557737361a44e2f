/**
 * Qwen3-Coder's XML calls (also Qwen3.5's template): a function and its parameters in tags,
 *
 *   <tool_call>
 *   <function=get_weather>
 *   <parameter=city>
 *   Paris
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * A parameter's value is text (one newline after its opening tag and one before its closing tag
 * are the format's); it becomes a JSON value by the tool's schema, as vLLM's qwen3_coder parser
 * converts it: a parameter whose schema says `"type": "string"` (or one the schema does not
 * declare) stays a string, any other is read as JSON when it parses (its text otherwise). The
 * grammar constraint (call-syntax.ts's `parameters`, src/grammar/xml-parameters.ts) makes the
 * same choice (parameterIsText), so a constrained call always reads back valid. The arguments go
 * out a parameter at a time.
 */
import type { CallParameter } from "./call-syntax.ts";
import type { ToolDefinition, JsonValue } from "./tool-types.ts";
import { isJsonWhitespace } from "./json-stream.ts";
import { HERMES_CLOSE, HERMES_OPEN } from "./hermes.ts";
import { contentUntil, SteppedParser, type ReplySink } from "./reply-sink.ts";

const FUNCTION_OPEN = "<function=";
const FUNCTION_CLOSE = "</function>";
const PARAMETER_OPEN = "<parameter=";
const PARAMETER_CLOSE = "</parameter>";

type JsonObject = { readonly [key: string]: JsonValue };
const isJsonObject = (v: JsonValue | undefined): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/** Whether a parameter's value is its text as written: its schema says `"type": "string"`, or there is none (not declared). */
export function parameterIsText(schema: JsonValue | undefined): boolean {
  return schema === undefined || (isJsonObject(schema) && schema.type === "string");
}

/** A tool's declared parameters (its schema's `properties`, in order), then required ones it does not declare. */
export function xmlCallParameters(tool: ToolDefinition): CallParameter[] {
  const schema = tool.function.parameters ?? {};
  const properties = isJsonObject(schema.properties) ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === "string") : []);
  const parameter = (name: string, declared: boolean): CallParameter => ({
    name, begin: `${PARAMETER_OPEN}${name}>\n`, end: `\n${PARAMETER_CLOSE}`, required: required.has(name),
    value: parameterIsText(declared ? properties[name] : undefined) ? "text" : "json",
    schemaAt: declared ? `#/properties/${encodeURIComponent(name.replaceAll("~", "~0").replaceAll("/", "~1"))}` : null,
  });
  const declared = Object.keys(properties).map((name) => parameter(name, true));
  return [...declared, ...[...required].filter((name) => !(name in properties)).map((name) => parameter(name, false))];
}

type State = "text" | "open" | "name" | "params" | "param-name" | "value" | "close";

export class Qwen3CoderParser extends SteppedParser {
  private state: State = "text";
  private name = "";
  private param = "";
  private params = 0;
  /** The block's raw text while no call has started (content if none does). */
  private block = "";

  constructor(
    private readonly accept: (name: string) => boolean,
    private readonly tools: readonly ToolDefinition[],
  ) {
    super();
  }

  protected finish(rest: string, sink: ReplySink): void {
    if (this.state === "text") {
      if (rest !== "") sink.content(rest);
    } else if (this.state === "open" || this.state === "name") {
      // A call cut before its name is whole (max_tokens): dropped, its syntax is no content.
    } else if (this.state !== "close") {
      sink.callArguments(this.params === 0 ? "{}" : "}");
      sink.callEnd();
    } else {
      sink.callEnd();
    }
    this.state = "text";
  }

  protected step(text: string, at: number, sink: ReplySink): number {
    const rest = text.slice(at);
    switch (this.state) {
      case "text": {
        const { taken, tag } = contentUntil(text, at, [HERMES_OPEN], sink);
        if (tag !== null) {
          this.state = "open";
          this.block = HERMES_OPEN;
        }
        return taken;
      }
      case "open": {
        if (isJsonWhitespace(rest[0]!)) {
          this.block += rest[0];
          return 1;
        }
        if (rest.startsWith(FUNCTION_OPEN)) {
          this.block += FUNCTION_OPEN;
          this.name = "";
          this.state = "name";
          return FUNCTION_OPEN.length;
        }
        if (FUNCTION_OPEN.startsWith(rest)) return 0;
        sink.content(this.block);
        this.state = "text";
        return this.step(text, at, sink);
      }
      case "name": {
        const close = rest.indexOf(">");
        if (close < 0) {
          this.name += rest;
          this.block += rest;
          return rest.length;
        }
        this.name += rest.slice(0, close);
        if (!this.accept(this.name)) {
          sink.content(this.block + rest.slice(0, close + 1));
          this.state = "text";
          return close + 1;
        }
        sink.callStart(this.name);
        this.params = 0;
        this.state = "params";
        return close + 1;
      }
      case "params": {
        if (isJsonWhitespace(rest[0]!)) return 1;
        for (const [tag, next] of [[PARAMETER_OPEN, "param-name"], [FUNCTION_CLOSE, "close"]] as const) {
          if (rest.startsWith(tag)) {
            if (next === "close") sink.callArguments(this.params === 0 ? "{}" : "}");
            this.param = "";
            this.state = next;
            return tag.length;
          }
        }
        if (PARAMETER_OPEN.startsWith(rest) || FUNCTION_CLOSE.startsWith(rest)) return 0;
        // Anything else inside a function: skipped up to the next tag.
        return 1;
      }
      case "param-name": {
        const close = rest.indexOf(">");
        if (close < 0) {
          this.param += rest;
          return rest.length;
        }
        this.param += rest.slice(0, close);
        this.state = "value";
        return close + 1;
      }
      case "value": {
        const close = rest.indexOf(PARAMETER_CLOSE);
        if (close < 0) return 0;
        const value = parameterValue(rest.slice(0, close), this.isText(this.param));
        sink.callArguments(`${this.params === 0 ? "{" : ", "}${JSON.stringify(this.param)}: ${jsonText(value)}`);
        this.params++;
        this.state = "params";
        return close + PARAMETER_CLOSE.length;
      }
      case "close": {
        if (isJsonWhitespace(rest[0]!)) return 1;
        if (rest.startsWith(HERMES_CLOSE)) {
          sink.callEnd();
          this.state = "text";
          return HERMES_CLOSE.length;
        }
        if (HERMES_CLOSE.startsWith(rest)) return 0;
        sink.callEnd();
        this.state = "text";
        return this.step(text, at, sink);
      }
    }
  }

  /** Whether the tool's schema makes a parameter's value its text (parameterIsText). */
  private isText(param: string): boolean {
    const tool = this.tools.find((t) => t.function.name === this.name);
    const properties = tool?.function.parameters?.properties;
    return parameterIsText(isJsonObject(properties) && Object.hasOwn(properties, param) ? properties[param] : undefined);
  }
}

/** A parameter's text as a JSON value: the format's newlines off, the text itself when `asText`, else its JSON if it parses. */
export function parameterValue(raw: string, asText: boolean): JsonValue {
  const text = raw.replace(/^\n/, "").replace(/\n$/, "");
  if (asText) return text;
  try {
    return JSON.parse(text.trim()) as JsonValue;
  } catch {
    return text;
  }
}

/** JSON text as Python's json.dumps writes it (", " and ": "), which the templates' tojson writes too. */
export function jsonText(value: JsonValue): string {
  if (Array.isArray(value)) return `[${value.map(jsonText).join(", ")}]`;
  if (typeof value === "object" && value !== null) {
    return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${jsonText(v as JsonValue)}`).join(", ")}}`;
  }
  return JSON.stringify(value);
}
