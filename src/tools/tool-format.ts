/**
 * The tool-call formats, one per family of chat templates, and the choice of one from a model's
 * template text (as llama.cpp's chat.cpp chooses: by what the template writes):
 *
 * | format      | chosen when the template writes     | families                                    |
 * |-------------|-------------------------------------|---------------------------------------------|
 * | harmony     | `<|channel|>`                       | gpt-oss                                     |
 * | qwen3-coder | `<function=` and `<parameter=`      | Qwen3-Coder, Qwen3.5                        |
 * | mistral     | `[TOOL_CALLS]`                      | Mistral 7B v0.3, Nemo, Small                |
 * | hermes      | `<tool_call>`                       | Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3       |
 * | llama3      | `<|start_header_id|>` and `ipython` | Llama 3.1, 3.2, 3.3                         |
 * | generic     | anything else                       | templates without tool calls (SmolLM3's, Phi-3.5, Gemma 2), built-in formats |
 *
 * The generic fallback: a template that renders the `tools` variable gets it; one that does not
 * gets the tools described in the system message (genericToolPrompt), and either way a call is
 * read as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Hermes's syntax, which many
 * small models know).
 */
import { randomBytes } from "node:crypto";
import { argumentsSchema, type CallSyntax, type CallSyntaxItem } from "./call-syntax.ts";
import { HarmonyParser } from "./harmony.ts";
import { HERMES_CLOSE, HERMES_OPEN, HermesParser } from "./hermes.ts";
import { Llama3Parser, PYTHON_TAG } from "./llama3.ts";
import { MISTRAL_CALLS, MistralParser } from "./mistral.ts";
import { Qwen3CoderParser, xmlCallParameters } from "./qwen3-coder.ts";
import type { ReplyParser } from "./reply-sink.ts";
import type { ToolDefinition } from "./tool-types.ts";

export type ToolFormatName = "harmony" | "qwen3-coder" | "mistral" | "hermes" | "llama3" | "generic";

export interface ToolCallFormat {
  readonly name: ToolFormatName;
  /** Control tokens (by text) whose text a reply must show for calls to be read (llama.cpp's preserved tokens). */
  readonly preservedTokens: readonly string[];
  /** Whether the template renders the `tools` variable; if not, the tools go into the system message. */
  readonly templateRendersTools: boolean;
  /** A reader of one reply's calls; `accept` says which names are callable. */
  parser(tools: readonly ToolDefinition[], accept: (name: string) => boolean): ReplyParser;
  /** What a call looks like, for the grammar constraint (call-syntax.ts). */
  syntax(tools: readonly ToolDefinition[], mode: CallSyntax["mode"], parallel: boolean): CallSyntax;
  /** A new call id (Mistral's templates want 9 letters and digits; others OpenAI's call_ and 24). */
  newCallId(): string;
}

const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** `n` random letters and digits. */
function randomAlnum(n: number): string {
  const bytes = randomBytes(n);
  let s = "";
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return s;
}

const openAiCallId = () => `call_${randomAlnum(24)}`;

/** Calls as JSON objects `{"name": N, KEY: ARGS}` between `begin` and `end` texts. */
function jsonItems(tools: readonly ToolDefinition[], begin: string, key: string, end: string): CallSyntaxItem[] {
  return tools.map((t) => ({
    name: t.function.name, begin: `${begin}{"name": ${JSON.stringify(t.function.name)}, "${key}": `, schema: argumentsSchema(t), end: `}${end}`,
    object: { open: begin, argumentsKey: key, close: end },
  }));
}

function syntax(fields: Omit<CallSyntax, "mode" | "parallel">, mode: CallSyntax["mode"], parallel: boolean): CallSyntax {
  return { ...fields, mode, parallel };
}

const hermesLike = (name: "hermes" | "generic", rendersTools: boolean): ToolCallFormat => ({
  name,
  preservedTokens: [HERMES_OPEN, HERMES_CLOSE],
  templateRendersTools: rendersTools,
  parser: (_tools, accept) => new HermesParser(accept),
  syntax: (tools, mode, parallel) => syntax({
    triggers: [HERMES_OPEN], prefix: "", calls: jsonItems(tools, `${HERMES_OPEN}\n`, "arguments", `\n${HERMES_CLOSE}`), separator: "\n", suffix: "", argumentsAs: "json", controlTokens: [],
  }, mode, parallel),
  newCallId: openAiCallId,
});

const llama3: ToolCallFormat = {
  name: "llama3",
  preservedTokens: [PYTHON_TAG],
  templateRendersTools: true,
  parser: (tools, accept) => new Llama3Parser(accept, tools.map((t) => t.function.name)),
  syntax: (tools, mode, parallel) => syntax({
    triggers: ['{"name": ', PYTHON_TAG], prefix: "", calls: jsonItems(tools, "", "parameters", ""), separator: "; ", suffix: "", argumentsAs: "json", controlTokens: [],
  }, mode, parallel),
  newCallId: openAiCallId,
};

const mistral: ToolCallFormat = {
  name: "mistral",
  preservedTokens: [MISTRAL_CALLS],
  templateRendersTools: true,
  parser: (_tools, accept) => new MistralParser(accept),
  syntax: (tools, mode, parallel) => syntax({
    triggers: [MISTRAL_CALLS], prefix: `${MISTRAL_CALLS}[`, calls: jsonItems(tools, "", "arguments", ""), separator: ", ", suffix: "]", argumentsAs: "json", controlTokens: [MISTRAL_CALLS],
  }, mode, parallel),
  newCallId: () => randomAlnum(9),
};

const qwen3Coder: ToolCallFormat = {
  name: "qwen3-coder",
  preservedTokens: [HERMES_OPEN, HERMES_CLOSE],
  templateRendersTools: true,
  parser: (tools, accept) => new Qwen3CoderParser(accept, tools),
  syntax: (tools, mode, parallel) => syntax({
    triggers: [HERMES_OPEN], prefix: "",
    calls: tools.map((t) => ({
      name: t.function.name, begin: `${HERMES_OPEN}\n<function=${t.function.name}>\n`, schema: argumentsSchema(t), end: `</function>\n${HERMES_CLOSE}`, parameters: xmlCallParameters(t),
    })),
    separator: "\n", suffix: "", argumentsAs: "xml-parameters", controlTokens: [],
  }, mode, parallel),
  newCallId: openAiCallId,
};

/** The harmony tokens a call's header is written with (control tokens of gpt-oss's vocabulary). */
const HARMONY = { channel: "<|channel|>", constrain: "<|constrain|>", message: "<|message|>", start: "<|start|>", end: "<|end|>" } as const;

const harmony: ToolCallFormat = {
  name: "harmony",
  preservedTokens: [],
  templateRendersTools: true,
  parser: (_tools, accept) => new HarmonyParser(accept),
  syntax: (tools, mode) => syntax({
    triggers: [`${HARMONY.channel}commentary to=functions.`, `${HARMONY.start}assistant to=functions.`],
    prefix: "", calls: tools.map(harmonyCall),
    // A harmony reply makes one call: <|call|> ends it.
    separator: "", suffix: "", argumentsAs: "json",
    controlTokens: Object.values(HARMONY),
    preamble: { open: `${HARMONY.channel}analysis${HARMONY.message}`, close: `${HARMONY.end}${HARMONY.start}assistant` },
    lead: `${HARMONY.start}assistant`,
  }, mode, false),
  newCallId: openAiCallId,
};

/**
 * A harmony call: the recipient in the channel (`<|channel|>commentary to=functions.NAME
 * <|constrain|>json<|message|>`, as the harmony guide writes it), or in the role (` to=functions.NAME
 * <|channel|>commentary json<|message|>`, as gpt-oss's template renders past calls: right after the
 * prompt's `<|start|>assistant`, or after a new one), `<|constrain|>` optional where the next token
 * is not the name's end.
 */
function harmonyCall(tool: ToolDefinition): CallSyntaxItem {
  const { channel, constrain, message, start } = HARMONY;
  const name = tool.function.name;
  const inRole = (c: string) => ` to=functions.${name}${channel}commentary ${c}json${message}`;
  return {
    name, begin: `${channel}commentary to=functions.${name} ${constrain}json${message}`, schema: argumentsSchema(tool), end: "",
    alternativeBegins: [inRole(constrain), inRole(""), `${start}assistant${inRole(constrain)}`, `${start}assistant${inRole("")}`],
  };
}

/** The format a template's calls are written in; null (no template: a built-in format) gets the generic one. */
export function toolCallFormat(templateText: string | null): ToolCallFormat {
  const t = templateText ?? "";
  if (t.includes("<|channel|>")) return harmony;
  if (t.includes("<function=") && t.includes("<parameter=")) return qwen3Coder;
  if (t.includes(MISTRAL_CALLS)) return mistral;
  if (t.includes(HERMES_OPEN)) return hermesLike("hermes", true);
  if (t.includes("<|start_header_id|>") && t.includes("ipython")) return llama3;
  return hermesLike("generic", /\btools\b/.test(t));
}

/**
 * The system-message text that describes the tools to a model whose template cannot (the generic
 * fallback): each function's JSON, and how to call one.
 */
export function genericToolPrompt(tools: readonly ToolDefinition[]): string {
  const list = tools.map((t) => JSON.stringify(t.function)).join("\n");
  return (
    "You can call these tools (each one's name, description and JSON Schema of its arguments):\n" +
    `<tools>\n${list}\n</tools>\n` +
    `To call a tool, write ${HERMES_OPEN}{"name": NAME, "arguments": ARGUMENTS}${HERMES_CLOSE} (ARGUMENTS a JSON object following the tool's schema); ` +
    "you may make several calls, one after another, then stop and wait for their results."
  );
}
