/**
 * `pagellm chat`: an interactive REPL. Each message is sent with the whole conversation before it
 * as the prompt, built token by token so that earlier turns are an exact prefix (the prefix cache
 * serves them); the reply streams to stdout and a short stats line follows on stderr. Reads lines
 * from a pipe too (replies on stdout, exit at EOF).
 */
import { kvCacheSummary } from "../engine/engine-builder.ts";
import { defineCommand, type ArgsDef } from "citty";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { InputError, RequestFieldError } from "../errors.ts";
import { keptReplyIds } from "../chat/builtin-formats.ts";
import { conversationMessages, loadConversation, type Conversation } from "../chat/conversation.ts";
import { FORMAT_NAMES } from "../chat/formats.ts";
import { speculationResult, type CompletionResult, type SpeculationResult } from "../llm/completion.ts";
import { checkRequest, type GenerateRequest } from "../llm/generate-request.ts";
import type { LLM } from "../llm/llm.ts";
import type { ConstraintSpec } from "../grammar/constraint-spec.ts";
import { DEFAULT_SAMPLING } from "../engine/sampler.ts";
import { InterruptedError } from "./interrupt.ts";
import { chatMessages } from "./inputs.ts";
import { CANCEL, LineInput } from "./line-input.ts";
import { loadLLM, noteChatFormat, templateKwargs } from "./load.ts";
import { constraintArgs, constraintOption, constraintProblem, jsonSchemaSpec } from "./constraint-options.ts";
import { checkKnownOptions, engineArgs, modelArgs, speculativeArgs, requestDefaults, samplingArgs, type ParsedValues, type RequestDefaults } from "./options.ts";
import { dim, info, output } from "./output.ts";
import { THINK_OPEN, ThinkSplitter } from "../tools/think.ts";
import type { ReplySink } from "../tools/reply-sink.ts";
import { quoteFileText, terminalText } from "../util/file-text.ts";
import { diskTierLine } from "./cache-command.ts";

export const chatArgs = {
  ...modelArgs,
  template: {
    type: "string",
    description: `Prompt format: ${FORMAT_NAMES.join(" | ")} | a Jinja template file (default: the model's own chat template; raw, plain continuation, for a model without one)`,
    valueHint: "name|file",
  },
  "chat-template-kwargs": { type: "string", description: 'More chat template variables as a JSON object, e.g. \'{"enable_thinking": false}\' for Qwen3', valueHint: "json" },
  think: {
    type: "boolean",
    default: true,
    description: "Let a model that reasons think before it answers (its reasoning is shown dimmed on a terminal)",
    negativeDescription: "Replies without reasoning first: the template's enable_thinking set to false (Qwen3, SmolLM3 and the templates that read it)",
  },
  system: { type: "string", description: "System prompt; /system changes it in the chat", valueHint: "text" },
  ...samplingArgs,
  ...constraintArgs,
  ...engineArgs,
  ...speculativeArgs,
} as const satisfies ArgsDef;

export const chatCommand = defineCommand({
  meta: {
    name: "chat",
    description:
      "Chat with a model: type a message, the reply streams back; earlier turns are served from the prefix cache. " +
      'A line ending with \\ continues, """ opens and closes a multi-line message. /help in the chat lists its commands ' +
      "(/reset, /system, /stats, /set, /schema, /save, /load, /tokens, /info, /exit). Ctrl-C stops a reply, Ctrl-C at an empty prompt or Ctrl-D quits. " +
      "With stdin not a terminal, reads one message a line and exits at EOF.",
  },
  args: chatArgs,
  async run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, chatArgs);
    await runChat(args, rawArgs);
  },
});

/** With --no-think, --chat-template-kwargs with enable_thinking false (over what the option gave). */
function thinkingOff(values: ParsedValues): ParsedValues {
  if (values.think !== false) return values;
  const kwargs = { ...templateKwargs(values["chat-template-kwargs"]), enable_thinking: false };
  return { ...values, "chat-template-kwargs": JSON.stringify(kwargs) };
}

/** Per-request settings the chat sends (what /set changes). */
type ChatSettings = RequestDefaults;

async function runChat(values: ParsedValues, rawArgs: readonly string[]): Promise<void> {
  const system = typeof values.system === "string" && values.system !== "" ? values.system : null;
  const settings = requestDefaults(values, rawArgs);
  const constraint = constraintOption(values, rawArgs);
  // A model without a chat template (a base model) is continued as plain text, as llama-cli does without one.
  const llm = await loadLLM(thinkingOff(values), "--template", "raw");
  noteChatFormat(llm, "--template");
  let session: ChatSession;
  try {
    if (constraint !== null) {
      const problem = constraintProblem(llm, constraint.spec, constraint.option);
      if (problem !== null) throw new InputError(problem);
      settings.constraint = constraint.spec;
    }
    session = new ChatSession(llm, typeof values.model === "string" ? values.model : "", system, settings);
  } catch (e) {
    llm.close();
    throw e;
  }
  info(llm.device);
  let interrupted = false;
  try {
    interrupted = await session.run();
  } finally {
    await llm.flush();
    llm.close();
  }
  if (interrupted) throw new InterruptedError("interrupted");
}

/** The request fields /set changes, by setting name; each value is checked by the request's own checks (checkRequest). */
const SETTINGS: Record<string, keyof ChatSettings> = {
  temperature: "temperature",
  "top-k": "topK",
  "top-p": "topP",
  "min-p": "minP",
  "repeat-penalty": "repetitionPenalty",
  "repeat-last-n": "repeatLastN",
  "frequency-penalty": "frequencyPenalty",
  "presence-penalty": "presencePenalty",
  seed: "seed",
  "max-tokens": "maxTokens",
};

const HELP = `Commands:
  /help                this list
  /reset               start a new conversation (the prefix cache still holds the old one)
  /system [TEXT]       show or set the system prompt (a format with one); /system "" clears it
  /stats               the conversation's length, the engine's prefix cache and KV block totals, and --speculate's drafts
  /save FILE           write the conversation as JSON ({"messages": [...]} on one line)
  /load FILE           continue a conversation /save wrote (or any {"messages": [...]} file)
  /tokens              the last turn's token ids and pieces (its new prompt tokens and the reply)
  /info                the model, its tokenizer and the chat format
  /set                 show the sampling settings
  /set NAME VALUE      change one: temperature, top-k, top-p, min-p, repeat-penalty, repeat-last-n,
                       frequency-penalty, presence-penalty, seed, max-tokens (VALUE "default"
                       restores it), stop TEXT ("/set stop" clears)
  /schema FILE         hold the replies to the JSON Schema in FILE (or inline JSON); /schema off
                       ends it, /schema alone says which holds (--json-schema, --grammar, ...)
  /exit, /quit         leave (Ctrl-D too)
Input:
  a line ending with \\ continues on the next line; """ opens and closes a multi-line message
  raw template: an empty line lets the model continue the text
  Ctrl-C stops a reply (what it wrote stays in the conversation); Ctrl-C at an empty prompt quits`;

class ChatSession {
  private readonly history: Conversation;
  private readonly input = new LineInput();
  private generating: AbortController | null = null;
  private interrupted = false;
  private turnNo = 0;
  /** Ctrl-C came before the reply to the line just read started: that reply stops at once. */
  private ctrlCAhead = false;
  /** Reading the second or a later line of a message. */
  private continuing = false;
  private readonly totals = { replies: 0, promptTokens: 0, cachedTokens: 0, diskCachedTokens: 0, generated: 0, drafted: 0, accepted: 0 };
  /** What speculative decoding did for the last reply (null until one ran with --speculate). */
  private lastSpeculation: SpeculationResult | null = null;
  /** The last turn's prompt, how many of its ids the conversation already held, and the reply's ids. */
  private lastTurn: { promptIds: number[]; known: number; replyIds: number[] } | null = null;

  constructor(
    private readonly llm: LLM,
    private readonly modelPath: string,
    system: string | null,
    private readonly settings: ChatSettings,
  ) {
    this.history = llm.conversation({ system, onNote: (line) => this.note(line) });
    if (system !== null && !this.history.hasSystem) {
      throw new InputError(`--system needs a format with a system prompt: the ${this.history.name} format has none (--template llama2, chatml or the model's own)`);
    }
    this.input.onCtrlC = (typed) => {
      if (this.generating !== null) {
        this.onSignal();
        return "ignore";
      }
      if (!this.input.reading) {
        // Typed ahead, with the line before it: it stops the reply that line starts.
        this.ctrlCAhead = true;
        return "ignore";
      }
      // Ctrl-C discards a typed line or an unfinished multi-line message; at an empty prompt it quits.
      return typed || this.continuing ? "cancel" : "exit";
    };
  }

  private get limit(): number {
    return this.llm.info.maxPositions;
  }

  /** Run until /exit, EOF or Ctrl-C at the prompt; true when a signal ended it. */
  async run(): Promise<boolean> {
    const onSignal = () => this.onSignal();
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      this.banner();
      for (;;) {
        const message = await this.readMessage();
        if (message === null) break;
        if (message === CANCEL) continue;
        if (message.startsWith("/")) {
          if (this.command(message) === "exit") break;
          continue;
        }
        if (message.trim() === "" && !this.history.continuesText) continue;
        await this.reply(message);
        if (this.interrupted) break;
      }
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      this.input.close();
    }
    return this.interrupted;
  }

  /** SIGINT/SIGTERM: stop the reply being generated (twice: exit now); at the prompt: quit. */
  private onSignal(): void {
    if (this.generating !== null) {
      if (this.generating.signal.aborted) process.exit(130);
      this.generating.abort();
      return;
    }
    this.interrupted = true;
    this.input.close();
  }

  private banner(): void {
    const c = this.llm.config;
    const ctx = this.limit < c.seqLen ? `${this.limit} of ${c.seqLen}` : `${c.seqLen}`;
    this.status(`pagellm chat: ${basename(this.modelPath)} (${this.llm.checkpoint.format}, ${ctx}-token context, ${kvCacheSummary(this.llm.info.kvLayout, this.llm.info.numBlocks)}), template ${this.history.name}` +
      (this.history.system ? ", with a system prompt" : ""));
    if (this.input.tty) {
      this.status(`/help lists the commands; Ctrl-C stops a reply; Ctrl-D or /exit quits` +
        (this.history.continuesText ? "; an empty line continues the text" : ""));
    }
  }

  /** One message: a line, lines joined by a trailing \, or a """ block. */
  private async readMessage(): Promise<string | null | typeof CANCEL> {
    this.continuing = false;
    this.ctrlCAhead = false;
    const first = await this.input.read("> ");
    if (first === null || first === CANCEL) return first;
    this.continuing = true;
    const start = first.trimStart();
    if (start.startsWith('"""')) {
      let rest = start.slice(3);
      if (rest.trimEnd().endsWith('"""')) return rest.trimEnd().slice(0, -3);
      const lines = rest === "" ? [] : [rest];
      for (;;) {
        const line = await this.input.read("... ");
        if (line === CANCEL) return CANCEL;
        if (line === null) break;
        const end = line.trimEnd();
        if (end.endsWith('"""')) {
          rest = end.slice(0, -3);
          if (rest !== "") lines.push(rest);
          break;
        }
        lines.push(line);
      }
      return lines.join("\n");
    }
    const parts: string[] = [];
    let line = first;
    while (line.endsWith("\\")) {
      parts.push(line.slice(0, -1));
      const next = await this.input.read("... ");
      if (next === CANCEL) return CANCEL;
      if (next === null) {
        line = "";
        break;
      }
      line = next;
    }
    parts.push(line);
    return parts.join("\n");
  }

  /** Generate the reply to `user`, streaming it; the turn joins the conversation. */
  private async reply(user: string): Promise<void> {
    const fitted = this.fit(user);
    if (fitted === null) return;
    const { promptIds, maxTokens } = fitted;
    const controller = new AbortController();
    if (this.ctrlCAhead) controller.abort();
    this.generating = controller;
    this.input.suspend();
    let result: CompletionResult | null = null;
    const shown = new ReplyPrinter();
    // Reasoning (between <think> and </think>) is shown dimmed; the prompt may have opened it already.
    const splitter = new ThinkSplitter(this.promptOpensThinking(promptIds), null);
    try {
      const request: GenerateRequest = { ...this.settings, id: `turn-${++this.turnNo}`, promptTokenIds: promptIds, maxTokens };
      for await (const event of this.llm.stream([request], { signal: controller.signal })) {
        if (event.kind === "done") {
          result = event.result;
          continue;
        }
        splitter.push(event.delta, shown);
      }
      splitter.end(shown);
    } finally {
      this.generating = null;
      this.input.resume();
    }
    if (shown.started) process.stdout.write("\n");
    if (result === null) return;
    if (result.finish_reason === "error") {
      this.note(`error: ${result.error ?? "the request failed"}`);
      return;
    }
    const kept = keptReplyIds(this.llm.tokenizer, promptIds[promptIds.length - 1], result.token_ids, result.text);
    const before = this.history.ids;
    let known = 0;
    while (known < before.length && known < promptIds.length && before[known] === promptIds[known]) known++;
    this.lastTurn = { promptIds, known, replyIds: [...result.token_ids] };
    this.history.commit(user, kept, result.text);
    this.turnStats(result, maxTokens);
  }

  /** The prompt ends inside `<think>` (a template that opens the reasoning itself). */
  private promptOpensThinking(promptIds: readonly number[]): boolean {
    const tail = this.llm.tokenizer.decode(promptIds.slice(-16)).trimEnd();
    return tail.endsWith(THINK_OPEN);
  }

  /**
   * The prompt for `user` within the context, leaving room for the reply (--max-tokens, or a
   * quarter of the context without it): the oldest turns are dropped when it would not fit. Null
   * (with a message) when the message alone is too long.
   */
  private fit(user: string): { promptIds: number[]; maxTokens: number | null } | null {
    const limit = this.limit;
    const max = this.settings.maxTokens ?? null;
    const reserve = max ?? Math.max(1, Math.floor(limit / 4));
    const alone = this.history.aloneIds(user);
    if (alone.length >= limit) {
      this.note(`message too long: ${alone.length} tokens, the context holds ${limit}; not sent`);
      return null;
    }
    let promptIds = this.history.promptIds(user);
    let dropped = 0;
    while (promptIds.length + reserve - 1 > limit && this.history.turns.length > 0) {
      this.history.dropOldest();
      dropped++;
      promptIds = this.history.promptIds(user);
    }
    if (dropped > 0) {
      const what = dropped === 1 ? "the oldest turn" : `the ${dropped} oldest turns`;
      this.note(`context nearly full (${limit} tokens, ${reserve} kept for the reply): dropped ${what}; ${this.history.turns.length} kept`);
    }
    const maxTokens = max === null ? null : Math.min(max, limit - promptIds.length + 1);
    if (max !== null && maxTokens !== null && maxTokens < max) this.note(`the reply is limited to ${maxTokens} tokens by the context`);
    return { promptIds, maxTokens };
  }

  private turnStats(r: CompletionResult, maxTokens: number | null): void {
    const decodeSecs = (r.latency_ms - r.ttft_ms) / 1000;
    const rate = r.completion_tokens > 1 && decodeSecs > 0 ? `${((r.completion_tokens - 1) / decodeSecs).toFixed(1)} tokens/s` : "- tokens/s";
    const used = this.history.ids.length;
    let why = "";
    if (r.finish_reason === "abort") why = ", interrupted";
    else if (r.finish_reason === "length") why = maxTokens !== null && r.completion_tokens >= maxTokens ? ", max tokens reached" : ", context full";
    const cached = r.cached_tokens_disk > 0 ? `${r.cached_tokens} cached, ${r.cached_tokens_disk} from disk` : `${r.cached_tokens} cached`;
    const spec = r.speculative === undefined ? "" : `, ${speculationText(r.speculative)}`;
    this.status(`[prompt ${r.prompt_tokens} tokens (${cached}), reply ${plural(r.completion_tokens, "token")}${why}, first token ${r.ttft_ms.toFixed(1)} ms, ${rate}${spec}, context ${used}/${this.limit}]`, true);
    if (r.speculative !== undefined) {
      this.lastSpeculation = r.speculative;
      this.totals.drafted += r.speculative.drafted;
      this.totals.accepted += r.speculative.accepted;
    }
    this.totals.replies++;
    this.totals.promptTokens += r.prompt_tokens;
    this.totals.cachedTokens += r.cached_tokens;
    this.totals.diskCachedTokens += r.cached_tokens_disk;
    this.totals.generated += r.completion_tokens;
  }

  /** Run a /command; "exit" ends the chat. */
  private command(line: string): "exit" | void {
    const match = /^\/(\S*)\s*([\s\S]*)$/.exec(line.trim())!;
    const name = match[1]!.toLowerCase();
    const arg = match[2]!;
    switch (name) {
      case "exit":
      case "quit":
      case "bye":
        return "exit";
      case "help":
      case "?":
        this.print(HELP);
        return;
      case "reset":
      case "clear":
        this.history.reset();
        this.print("new conversation");
        return;
      case "system":
        this.systemCommand(arg);
        return;
      case "stats":
        this.print(this.statsText());
        return;
      case "set":
        this.setCommand(arg);
        return;
      case "schema":
        this.schemaCommand(arg.trim());
        return;
      case "save":
        this.saveCommand(arg.trim());
        return;
      case "load":
        this.loadCommand(arg.trim());
        return;
      case "tokens":
        this.print(this.tokensText());
        return;
      case "info":
        this.print(this.infoText());
        return;
      default:
        this.print(`unknown command /${name} (/help lists them)`);
    }
  }

  private systemCommand(arg: string): void {
    if (!this.history.hasSystem) {
      this.print(`the ${this.history.name} format has no system prompt (start with --template llama2, chatml or the model's own)`);
      return;
    }
    if (arg === "") {
      this.print(this.history.system === null ? "no system prompt" : `system prompt: ${this.history.system}`);
      return;
    }
    const text = arg === '""' || arg === "''" ? null : arg;
    this.history.system = text;
    const kept = this.history.turns.length > 0 ? " (the conversation's first turn now carries it)" : "";
    this.print(text === null ? `system prompt cleared${kept}` : `system prompt set${kept}`);
  }

  private setCommand(arg: string): void {
    const s = this.settings;
    if (arg === "") {
      const show = (v: number | null | undefined, fallback: string) => (v === undefined || v === null ? fallback : String(v));
      const d = DEFAULT_SAMPLING;
      this.print([
        `temperature ${show(s.temperature, String(d.temperature))}, top-k ${show(s.topK, String(d.topK))}, top-p ${show(s.topP, String(d.topP))}, ` +
          `min-p ${show(s.minP, String(d.minP))}, repeat-penalty ${show(s.repetitionPenalty, String(d.repetitionPenalty))}, ` +
          `repeat-last-n ${show(s.repeatLastN, String(d.repeatLastN))}`,
        `seed ${show(s.seed, "random")}, max-tokens ${show(s.maxTokens, "none (until EOS or the context)")}, ` +
          `stop ${s.stop && s.stop.length > 0 ? s.stop.map((x) => JSON.stringify(x)).join(" ") : "none"}`,
      ].join("\n"));
      return;
    }
    const m = /^(\S+)\s*([\s\S]*)$/.exec(arg)!;
    const name = m[1]!.toLowerCase().replaceAll("_", "-");
    const raw = m[2]!;
    if (name === "stop") {
      s.stop = raw === "" ? [] : [raw];
      this.print(raw === "" ? "stop strings cleared" : `stop ${JSON.stringify(raw)}`);
      return;
    }
    const key = SETTINGS[name];
    if (key === undefined) {
      this.print(`unknown setting ${name}: ${[...Object.keys(SETTINGS), "stop"].join(", ")}`);
      return;
    }
    if (raw === "default" || raw === "none" || (name === "seed" && raw === "random")) {
      delete s[key];
      this.print(`${name} back to its default`);
      return;
    }
    const v = raw.trim() === "" ? NaN : Number(raw);
    try {
      checkRequest({ ...s, [key]: v, prompt: "" }, { vocabSize: this.llm.config.vocabSize, maxSamples: 1 });
    } catch (e) {
      if (!(e instanceof RequestFieldError)) throw e;
      this.print(`${name} ${e.problem.replace(/got NaN$/, `got "${raw}"`)}`);
      return;
    }
    (s as Record<string, unknown>)[key] = v;
    this.print(`${name} ${v}`);
  }

  /** /schema FILE | off | (nothing): the constraint of the next replies. */
  private schemaCommand(arg: string): void {
    if (arg === "") {
      const c = this.settings.constraint;
      this.print(c === undefined ? "no constraint: replies are free text" : `replies held to ${c.kind === "json_schema" ? "a JSON Schema" : `a ${c.kind} constraint`} (/schema off ends it)`);
      return;
    }
    if (arg === "off") {
      delete this.settings.constraint;
      this.print("constraint off: replies are free text");
      return;
    }
    let spec: ConstraintSpec;
    try {
      spec = jsonSchemaSpec(arg);
    } catch (e) {
      if (e instanceof InputError) return this.print(e.message);
      throw e;
    }
    const problem = constraintProblem(this.llm, spec, arg.trimStart().startsWith("{") ? "the schema" : arg);
    if (problem !== null) return this.print(problem);
    this.settings.constraint = spec;
    this.print(`replies held to the JSON Schema ${arg.trimStart().startsWith("{") ? "given" : `in ${arg}`} (/schema off ends it)`);
  }

  private saveCommand(file: string): void {
    if (file === "") return this.print("/save needs a file name");
    const messages = conversationMessages(this.history);
    try {
      writeFileSync(file, JSON.stringify({ messages }) + "\n");
    } catch (e) {
      return this.print(`${file}: cannot write: ${(e as Error).message}`);
    }
    this.print(`saved ${plural(this.history.turns.length, "turn")} to ${file}`);
  }

  private loadCommand(file: string): void {
    if (file === "") return this.print("/load needs a file name");
    if (!existsSync(file)) return this.print(`${file}: no such file`);
    try {
      const first = readFileSync(file, "utf8").split("\n").find((l) => l.trim() !== "") ?? "";
      const parsed: unknown = JSON.parse(first);
      const value = Array.isArray(parsed) ? parsed : (parsed as { messages?: unknown } | null)?.messages;
      loadConversation(this.history, this.llm.tokenizer, chatMessages(value, file), file);
    } catch (e) {
      if (e instanceof SyntaxError) return this.print(`${file}: not JSON: ${e.message}`);
      if (e instanceof InputError) return this.print(e.message);
      throw e;
    }
    this.lastTurn = null;
    this.print(`loaded ${plural(this.history.turns.length, "turn")} from ${file} (${this.history.ids.length} tokens)`);
  }

  private tokensText(): string {
    const t = this.lastTurn;
    if (t === null) return "no turn yet";
    const tok = this.llm.tokenizer;
    const list = (ids: readonly number[]) => ids.map((id) => `  ${id} ${quoteFileText(tok.tokenPiece(id))}`).join("\n");
    return [
      `prompt: ${plural(t.promptIds.length, "token")}, ${t.known} from the conversation before, ${t.promptIds.length - t.known} new:`,
      list(t.promptIds.slice(t.known)),
      `reply: ${plural(t.replyIds.length, "token")}:`,
      list(t.replyIds),
    ].filter((l) => l !== "").join("\n");
  }

  private infoText(): string {
    const c = this.llm.config;
    const tok = this.llm.tokenizer;
    const special = (id: number | null) => (id === null ? "none" : `${id} ${quoteFileText(tok.tokenText(id))}`);
    return [
      `model: ${this.modelPath} (${this.llm.checkpoint.format})`,
      `shape: ${c.nLayers} layers, width ${c.dim}, ${c.nHeads} heads (${c.nKvHeads} key/value), feed-forward ${c.hiddenDim}, context ${c.seqLen} (${this.limit} usable)`,
      `vocabulary: ${c.vocabSize} tokens; BOS ${special(tok.bosId)}${this.llm.addBos ? " (added)" : ""}, EOS ${special(tok.eosId)}`,
      `ends a reply: ${[...tok.eogIds].sort((a, b) => a - b).map((id) => `${id} ${quoteFileText(tok.tokenText(id))}`).join(", ") || "none"}`,
      `chat format: ${this.history.name}`,
    ].join("\n");
  }

  private statsText(): string {
    const s = this.llm.stats();
    const rate = s.prefixQueries === 0 ? 0 : (100 * s.prefixHits) / s.prefixQueries;
    const t = this.totals;
    return [
      `conversation: ${plural(this.history.turns.length, "turn")}, ${this.history.ids.length} of ${this.limit} context tokens (template ${this.history.name})`,
      `this session: ${plural(t.replies, "reply", "replies")}, ${t.promptTokens} prompt tokens (${t.cachedTokens} cached: ${t.cachedTokens - t.diskCachedTokens} in memory, ${t.diskCachedTokens} from disk), ${t.generated} tokens generated`,
      `prefix cache: ${s.prefixQueries} tokens looked up, ${s.prefixHits} hit (${rate.toFixed(1)}%: ${s.prefixHits - s.prefixTierHits} in memory, ${s.prefixTierHits} from disk), ${s.evictions} blocks evicted`,
      ...(s.tier === null ? [] : [diskTierLine(s.tier)]),
      `KV blocks: ${s.blocksInUse} in use, ${s.blocksCached} cached, ${s.numBlocks} in the pool (${this.llm.info.blockSize} tokens each); ${s.preemptions} preemptions`,
      ...this.speculationLines(),
    ].join("\n");
  }

  /** /stats lines of speculative decoding: its settings, the last reply's and the session's drafts; none when off. */
  private speculationLines(): string[] {
    const o = this.llm.info.speculative;
    if (o === null) return [];
    const t = this.totals;
    const last = this.lastSpeculation === null ? "no reply yet" : speculationText(this.lastSpeculation);
    return [
      `speculative decoding: ${o.method}, up to ${o.tokens} draft tokens, n-grams ${o.ngram.min}:${o.ngram.max}; last reply ${last}; ` +
      `this session ${speculationText(speculationResult(t))}`,
    ];
  }

  private print(text: string): void {
    process.stdout.write(`${text}\n`);
  }

  /** A warning or error of the session on stderr: shown even with --quiet. */
  private note(text: string): void {
    process.stderr.write(`${text}\n`);
  }

  /** The banner and each reply's statistics on stderr (dim on a terminal with colour), unless --quiet. */
  private status(text: string, faint = false): void {
    info(faint ? dim(text) : text);
  }
}

/** "drafted 40, accepted 31 (77.5%)". */
function speculationText(r: SpeculationResult): string {
  const rate = r.acceptance_rate === null ? "" : ` (${(100 * r.acceptance_rate).toFixed(1)}%)`;
  return `drafted ${r.drafted}, accepted ${r.accepted}${rate}`;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * Writes a streamed reply to stdout: its reasoning dimmed when stdout is a colour terminal, its
 * content as it comes. The reply starts on its own line: its leading space (after "[/INST]", or
 * continuing the text) is not shown.
 */
class ReplyPrinter implements ReplySink {
  started = false;
  private readonly dimReasoning = output.color && process.stdout.isTTY === true;

  content(text: string): void {
    this.write(text, false);
  }

  reasoning(text: string): void {
    this.write(text, this.dimReasoning);
  }

  callStart(): void {}
  callArguments(): void {}
  callEnd(): void {}

  private write(delta: string, dimmed: boolean): void {
    const text = this.started ? delta : delta.trimStart();
    if (text === "") return;
    this.started = true;
    process.stdout.write(dimmed ? `\x1b[2m${terminalText(text)}\x1b[22m` : terminalText(text));
  }
}
