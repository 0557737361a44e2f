/**
 * A model's own chat template (`tokenizer.chat_template`, the Jinja text of its
 * tokenizer_config.json), rendered with @huggingface/jinja the way transformers'
 * apply_chat_template renders it: `messages`, `add_generation_prompt`, `bos_token`,
 * `eos_token`, `raise_exception`, `strftime_now`, and `tools` when a request offers them (in
 * OpenAI's shape, as transformers and vLLM pass them). Messages carry what OpenAI's do: an
 * assistant's `tool_calls` (their arguments given to the template as an object, as transformers
 * takes them and vLLM and llama.cpp convert them), a tool result's `tool_call_id` and `name`, an
 * assistant's `reasoning_content` (Qwen3's template renders it); a field a message lacks is absent
 * from its object (Llama 3's template asks `'tool_calls' in message`). No documents. A template is
 * untrusted input (it comes with a downloaded model): rendering is bounded in steps, time, size
 * and depth (jinja-limits.ts), and whatever goes wrong is one ChatTemplateError naming the template.
 */
import { Environment, Template } from "@huggingface/jinja";
import { PagellmError } from "../errors.ts";
import { quoteFileText, showFileText } from "../util/file-text.ts";
import { jsonObjectOf } from "../util/json-object.ts";
import { BoundedInterpreter, boundedRange, DEFAULT_RENDER_LIMITS, TemplateLimitError, type RenderLimits } from "./jinja-limits.ts";

/** One message of a conversation, in OpenAI's shape (a missing content is ""). */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | string;
  content: string;
  /** An assistant's calls: their arguments are JSON text, as the model wrote them. */
  tool_calls?: readonly ChatToolCall[];
  /** A tool result: the call it answers. */
  tool_call_id?: string;
  /** The participant's name (OpenAI's `name`; a tool result's function): a template may show it; built-in formats do not. */
  name?: string;
  /** An assistant's reasoning, kept apart from its content. */
  reasoning_content?: string;
}

/** A call in an assistant message (OpenAI's shape). */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/**
 * A template that does not parse or does not render: names the model (`source`) and carries the
 * template's own message (`problem`). `stopped`: a render limit stopped it (jinja-limits.ts).
 */
export class ChatTemplateError extends PagellmError {
  override readonly exitCode = 2;
  constructor(readonly source: string, readonly problem: string, readonly stopped = false) {
    super(`${source}: chat template: ${problem}`);
  }
}

/**
 * The variables a rendering gives the template itself (the conversation, its tools, the
 * model's specials, the functions and constants of transformers' environment): more template
 * variables (a request's chat_template_kwargs, --chat-template-kwargs) may not set them.
 */
export const RESERVED_TEMPLATE_VARIABLES: ReadonlySet<string> = new Set([
  "messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "range", "strftime_now", "namespace",
  "true", "false", "none", "True", "False", "None",
]);

/** The first of `variables` that RESERVED_TEMPLATE_VARIABLES holds, and why it may not be set; null when none. */
export function reservedVariable(variables: Readonly<Record<string, unknown>>): { name: string; problem: string } | null {
  const name = Object.keys(variables).find((k) => RESERVED_TEMPLATE_VARIABLES.has(k));
  if (name === undefined) return null;
  const from = name === "tools" ? "from the request's own tools" : name === "messages" ? "from the request's messages" : "by the rendering itself";
  return { name, problem: `cannot be set: the template is given '${name}' ${from}` };
}

export class ChatTemplate {
  private readonly template: Template;

  /** `source` names where the template came from (the model file, a .jinja file) in errors. */
  constructor(
    readonly text: string,
    readonly source: string,
    private readonly specials: { bosToken: string; eosToken: string },
    /** More variables for every rendering (--chat-template-kwargs: `enable_thinking` for Qwen3, ...). */
    private readonly variables: Readonly<Record<string, unknown>> = {},
    private readonly limits: RenderLimits = DEFAULT_RENDER_LIMITS,
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new ChatTemplateError(source, `does not parse: ${parseProblem(e)}`);
    }
  }

  /** The prompt text of `messages`; with `addGenerationPrompt`, ending where the assistant's reply starts. */
  render(messages: readonly ChatMessage[], addGenerationPrompt: boolean, extra: Record<string, unknown> = {}): string {
    try {
      const globals = new Environment();
      for (const [name, value] of Object.entries(this.globals())) globals.set(name, value);
      const scope = new Environment(globals);
      const variables: Record<string, unknown> = {
        messages: messages.map(templateMessage),
        add_generation_prompt: addGenerationPrompt,
        bos_token: this.specials.bosToken,
        eos_token: this.specials.eosToken,
        ...this.variables,
        ...extra,
      };
      for (const [name, value] of Object.entries(variables)) scope.set(name, value);
      const interpreter = new BoundedInterpreter(scope, this.limits);
      const text = interpreter.run(this.template.parsed).value as string;
      interpreter.checkOutput(text);
      return text;
    } catch (e) {
      throw new ChatTemplateError(this.source, renderProblem(e), e instanceof TemplateLimitError || e instanceof RangeError);
    }
  }

  /** What @huggingface/jinja's Template.render declares, with `range` bounded. */
  private globals(): Record<string, unknown> {
    return {
      true: true, false: false, none: null, True: true, False: false, None: null,
      raise_exception: (message: unknown) => {
        throw new RaisedByTemplate(String(message));
      },
      range: boundedRange(this.limits.maxItems),
      strftime_now: (format: string) => strftime(new Date(), String(format)),
    };
  }
}

/** A message as templates read it: only the fields it has; a call's arguments as an object where they are one. */
function templateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls !== undefined) {
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: argumentsValue(c.function.arguments) } }));
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  if (m.reasoning_content !== undefined) out.reasoning_content = m.reasoning_content;
  return out;
}

/** A call's arguments: the object their JSON text holds, or the text itself when it holds none. */
function argumentsValue(text: string): unknown {
  return jsonObjectOf(text) ?? text;
}

/** `raise_exception(...)` in a template: its message is the template's own. */
class RaisedByTemplate extends Error {}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
}

/**
 * A parse failure in words. The library's parser reads past the end of its token list on a template
 * that stops inside a block or tag, and fails there with a TypeError of its own internals.
 */
function parseProblem(e: unknown): string {
  if (e instanceof TypeError) return "it ends inside an unclosed block or tag ({% if %}, {% for %}, {% macro %} without its end, or an unclosed {{ or {%)";
  if (e instanceof RangeError) return "it nests too deeply";
  return showFileText(firstLine(e), PROBLEM_CHARS);
}

/** Why a rendering failed; the template's own words (raise_exception, names in the library's messages) escaped and cut. */
function renderProblem(e: unknown): string {
  if (e instanceof TemplateLimitError) return `stopped: ${e.message}`;
  if (e instanceof RaisedByTemplate) return quoteFileText(firstLine(e), PROBLEM_CHARS);
  if (e instanceof RangeError) return `stopped: ${showFileText(firstLine(e), PROBLEM_CHARS)}`;
  return showFileText(firstLine(e), PROBLEM_CHARS);
}

/** Characters shown of a message that holds template text. */
const PROBLEM_CHARS = 160;

/** Python's strftime for the codes chat templates use (Llama 3.x: "%d %b %Y"), as @huggingface/jinja's strftime_now. */
export function strftime(date: Date, format: string): string {
  const pad2 = (n: number) => String(n).padStart(2, "0");
  const month = (style: "long" | "short") => new Intl.DateTimeFormat("en-US", { month: style }).format(date);
  const codes: Record<string, () => string> = {
    "%Y": () => String(date.getFullYear()),
    "%m": () => pad2(date.getMonth() + 1),
    "%d": () => pad2(date.getDate()),
    "%b": () => month("short"),
    "%B": () => month("long"),
    "%H": () => pad2(date.getHours()),
    "%M": () => pad2(date.getMinutes()),
    "%S": () => pad2(date.getSeconds()),
    "%%": () => "%",
  };
  return format.replace(/%[YmdbBHMS%]/g, (code) => codes[code]!());
}
