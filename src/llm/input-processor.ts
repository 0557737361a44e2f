/**
 * The front door's input processing (vLLM's Processor): a request checked in the one place
 * requests are checked (generate-request.ts), its prompt rendered (a chat request through its
 * format and tools) and tokenized, its constraint compiled, and the whole found to fit the engine:
 * a PreparedRequest the client loop (engine-client.ts) queues, or a typed error naming the field
 * (RequestFieldError, RequestTooLongError). It also answers the tokenizer's questions a server
 * asks (/tokenize, /detokenize) the way prepare() would tokenize.
 */
import type { EmbeddedSpan } from "../model/batch.ts";
import { InputError, ModelFormatError, RequestFieldError } from "../errors.ts";
import type { ChatMessage } from "../chat/jinja-template.ts";
import type { ChatPrompt } from "../tools/chat-prompt.ts";
import type { ReplySetup } from "../tools/reply-reader.ts";
import type { CheckedTools } from "../tools/tool-types.ts";
import type { ReasoningMarkers, TokenConstraint } from "../constraint/token-constraint.ts";
import type { ConstraintCompiler, ConstraintSpec } from "../grammar/constraint-spec.ts";
import type { EngineRequest, LLMEngine } from "../engine/engine.ts";
import type { GenerationParams } from "../engine/sequence.ts";
import { toolCallConstraint } from "./call-constraint.ts";
import { checkRequest, checkTokenIds, sampleSeed, type CheckedRequest, type RequestInput } from "./generate-request.ts";

/** How prompts become token ids: the model's tokenizer and chat format (LLM provides them). */
export interface PromptEncoder {
  /**
   * Prompt ids of a text, BOS first when the model expects it; `maxTokens`: a text that must give
   * more is refused (RequestTooLongError) before it is tokenized.
   */
  encode(text: string, maxTokens?: number): number[];
  /**
   * Ids of a text as written (llama-server's /tokenize): BOS only with `addSpecial` and where the
   * model adds one; control tokens written in the text matched only with `parseSpecial`.
   */
  encodeWritten(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[];
  /** The text of ids (each in the vocabulary), control tokens written out (token-text.ts). */
  decodeWritten(ids: readonly number[]): string;
  /** One token's text: a string, or its bytes where they are not whole UTF-8 characters. */
  piece(id: number): string | number[];
  /**
   * A conversation in the chat format, with more template variables and the request's tools:
   * its prompt ids, and how its replies are read; RequestFieldError naming the message at fault.
   * `maxTokens` as encode's.
   */
  messages(messages: readonly ChatMessage[], kwargs: Readonly<Record<string, unknown>> | null, tools: CheckedTools | null, maxTokens?: number): ChatPrompt;
}

/** What the front door needs besides the engine: how prompts become ids, and how constraints compile. */
export interface ClientParts {
  prompts: PromptEncoder;
  /** Compiles a request's constraint; null: the model's vocabulary cannot be constrained (a request asking is refused). */
  constraints: ConstraintCompiler | null;
  /** The model's reasoning markers (`<think>`, `</think>` as tokens), when it reasons before it answers; a constraint starts after them. */
  reasoning: ReasoningMarkers | null;
  /** The tags' text as tokens: the markers of a template that thinks where `reasoning` is null. */
  reasoningText?: ReasoningMarkers | null;
  /** Why `constraints` is null, for the refusal. */
  constraintsUnavailable?: string;
}

/** Limits a front end puts on what it takes (a server's); the engine's own limits apply regardless. */
export interface PrepareOptions {
  /** Most samples (`n`) one request may ask for; default: the sequences one step holds. */
  maxSamples?: number;
}

/** A request checked, rendered and found to fit: only prepare() makes one. */
export class PreparedRequest {
  /** @internal */
  constructor(
    readonly request: EngineRequest,
    /** The request's fields as checked, defaults filled. */
    readonly checked: CheckedRequest,
    /** How its replies are read into content, reasoning and tool calls; null: as plain text. */
    readonly reply: ReplySetup | null = null,
  ) {}

  get id(): string {
    return this.request.id;
  }

  get promptTokenIds(): readonly number[] {
    return this.request.promptTokenIds;
  }

  /** Samples of the prompt. */
  get n(): number {
    return this.request.samples.length;
  }
}

/** Turns requests into what the engine runs, for one engine and its model's prompts and constraints. */
export class InputProcessor {
  private nextId = 0;
  private readonly prompts: PromptEncoder;

  constructor(
    private readonly engine: LLMEngine,
    private readonly parts: ClientParts,
  ) {
    this.prompts = parts.prompts;
  }

  /**
   * Checks `request` (a GenerateRequest, or one mapped from JSON whose values are not yet known to
   * be of their types: RequestFieldError naming the field), renders and tokenizes its prompt, and
   * checks that it can ever run (RequestTooLongError naming the field); queues nothing.
   */
  prepare(request: RequestInput, opts: PrepareOptions = {}): PreparedRequest {
    // More samples than a step holds can never run: checkFits says so (RequestTooLongError).
    const checked = checkRequest(request, { vocabSize: this.engine.config.vocabSize, maxSamples: opts.maxSamples ?? Infinity });
    // A prompt over the context is refused before its text is tokenized where its bytes show it.
    const { ids: promptTokenIds, reply, shownTokenIds } = this.prompt(checked, this.engine.config.seqLen);
    // An empty text on a model that adds no BOS is no tokens at all: nothing to run from.
    if (promptTokenIds.length === 0) {
      if (checked.prompt.kind === "messages") throw new RequestFieldError("messages", "render to an empty prompt");
      throw new RequestFieldError("prompt", "is empty, and this model adds no BOS token: there is no token to start from");
    }
    this.engine.checkFits(promptTokenIds.length, checked.maxTokens, checked.n);
    const id = checked.id ?? `req-${this.nextId++}`;
    const shown = shownTokenIds.length === 0 ? undefined : new Set(shownTokenIds);
    const samples = Array.from({ length: checked.n }, (_, i) => generationParams(checked, i, shown));
    const spec = this.constraintOf(checked, reply);
    const reasoning = this.reasoningMarkers(reply);
    // A reasoning budget needs markers; without them there is no reasoning to bound.
    const budget = reasoning === null ? null : checked.reasoningBudget;
    const constraint = spec === null && budget === null ? null
      : { create: spec === null ? null : this.compile(spec), reasoning, reasoningBudget: budget };
    const embeds = checkedEmbeds(request.embeds, checked);
    return new PreparedRequest({ id, promptTokenIds, samples, cacheSalt: checked.cacheSalt, constraint, ...(embeds === null ? {} : { embeds }) }, checked, reply);
  }

  /**
   * The reasoning markers of a request's replies: the vocabulary's tag tokens, else (a template
   * that thinks, its tags written as text) the tags' text tokens; null: the replies do not reason.
   */
  private reasoningMarkers(reply: ReplySetup | null): ReasoningMarkers | null {
    if (this.parts.reasoning !== null) return this.parts.reasoning;
    const thinks = reply !== null && (reply.reasoning === "tags" || reply.reasoning === "open");
    return thinks ? this.parts.reasoningText ?? null : null;
  }

  /**
   * The prompt token ids of `request` as prepare() renders them, after the same checks but without
   * the check that it fits: what a /tokenize endpoint counts, a prompt longer than the context
   * included.
   */
  promptTokenIds(request: RequestInput): number[] {
    const checked = checkRequest(request, { vocabSize: this.engine.config.vocabSize, maxSamples: Infinity });
    return [...this.prompt(checked).ids];
  }

  /** Ids of a text as written, with or without BOS and control tokens (PromptEncoder.encodeWritten). */
  tokenizeText(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[] {
    return this.prompts.encodeWritten(text, opts);
  }

  /**
   * The text of token ids, control tokens written out, as llama-server's and vLLM's /detokenize
   * give it; RequestFieldError naming `field[i]` for a value that is no id of the vocabulary.
   */
  detokenize(ids: readonly unknown[], field = "tokens"): string {
    return ids.length === 0 ? "" : this.prompts.decodeWritten(checkTokenIds(ids, field, this.engine.config.vocabSize));
  }

  /** Each token's own text (PromptEncoder.piece), for ids a tokenize call gave. */
  tokenPieces(ids: readonly number[]): (string | number[])[] {
    return ids.map((id) => this.prompts.piece(id));
  }

  /**
   * What holds a request's output: its own constraint, or, for a request that offers tools, its
   * calls (toolCallConstraint). Both at once: with tool_choice "auto" the request's constraint
   * holds the reply and calls are read from it unconstrained (vLLM's behaviour); with "required"
   * or a named function the reply must be calls, which no other constraint can allow, so the
   * request is refused (as llama-server refuses a grammar with tools).
   */
  private constraintOf(checked: CheckedRequest, reply: ReplySetup | null): ConstraintSpec | null {
    const calls = reply === null ? null : toolCallConstraint(reply);
    if (checked.constraint === null) return this.parts.constraints === null ? null : calls;
    const choice = reply?.tools?.choice;
    if (choice !== undefined && choice !== "auto" && choice !== "none") {
      throw new RequestFieldError("constraint", `cannot be combined with toolChoice ${typeof choice === "string" ? `"${choice}"` : "naming a function"}: the reply is then tool calls; send toolChoice "auto" or no constraint`);
    }
    return checked.constraint;
  }

  /** A factory of matchers for `spec` (compiled once per content by the compiler); RequestFieldError naming the field. */
  private compile(spec: ConstraintSpec): () => TokenConstraint {
    const compiler = this.parts.constraints;
    if (compiler === null) throw new RequestFieldError("constraint", this.parts.constraintsUnavailable ?? "cannot be applied to this model");
    return compiler.compile(spec);
  }

  private prompt(checked: CheckedRequest, maxTokens?: number): ChatPrompt {
    const p = checked.prompt;
    if (p.kind === "tokens") return { ids: [...p.ids], reply: null, shownTokenIds: [] };
    if (p.kind === "messages") return this.prompts.messages(p.messages, p.kwargs, checked.tools, maxTokens);
    try {
      return { ids: this.prompts.encode(p.text, maxTokens), reply: null, shownTokenIds: [] };
    } catch (e) {
      // A vocabulary that spells none of the text is the file's fault, not the request's.
      if (e instanceof ModelFormatError) throw e;
      throw e instanceof InputError ? new RequestFieldError("prompt", e.message) : e;
    }
  }
}

/** Sample `index`'s engine params: the checked fields, its own seed, the control tokens its text shows. */
function generationParams(r: CheckedRequest, index: number, shownTokenIds: ReadonlySet<number> | undefined): GenerationParams {
  const params: GenerationParams = { maxTokens: r.maxTokens, stop: r.stop, sampling: { ...r.sampling, seed: sampleSeed(r.seed, index) } };
  if (shownTokenIds !== undefined) params.shownTokenIds = shownTokenIds;
  if (r.logprobs !== null) params.logprobs = r.logprobs;
  if (r.ignoreEos) params.ignoreEos = true;
  return params;
}

/** A request's embedded spans: only with token ids (the engine checks each span against the prompt and the model). */
function checkedEmbeds(embeds: unknown, checked: CheckedRequest): readonly EmbeddedSpan[] | null {
  if (embeds === undefined) return null;
  if (!Array.isArray(embeds)) throw new RequestFieldError("embeds", "must be an array of spans");
  if (checked.prompt.kind !== "tokens") throw new RequestFieldError("embeds", "apply only to promptTokenIds");
  return embeds as readonly EmbeddedSpan[];
}
