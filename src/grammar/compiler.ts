/**
 * GrammarCompiler: every grammar source to a CompiledGrammar for one vocabulary, cached by content
 * (a schema seen before is ready at once; so is a refusal). One compiler per tokenizer: its lexer
 * space and mask cache are shared by all the grammars it compiles, so the masks of common states
 * (inside a JSON string, after a comma) are computed once for all of them.
 *
 * Bounds (limits.ts): source size, compile time, rules and expression nodes; a grammar over one is
 * refused with a GrammarLimitError. The limits act inside the work: the compile's budget is the
 * pool's meter while it runs (derivatives, emptiness searches and lexer states included), and a
 * compile ends with the grammar's first mask, so a grammar whose lexer blows up at its start is
 * refused here, not at its first step. Later masks are charged to each grammar's own meter
 * (CompiledGrammar.maskMeter); a grammar that goes over is refused from then on, here too.
 *
 * When the shared expression pool (nodes and memoized derivatives) or lexer grows past
 * POOL_ROTATE_SIZE / STATE_ROTATE_COUNT, new compiles start a fresh pool and lexer, and the cache
 * forgets the grammars of the old one (their running matchers keep it until they end), so a
 * long-running server or benchmark holds at most about one pool's worth of memory more than the
 * one in use.
 */
import { GrammarError, GrammarLimitError } from "../errors.ts";
import { CfgBuilder, type Cfg } from "./cfg.ts";
import { CompiledGrammar } from "./compiled-grammar.ts";
import { ExprPool } from "./expr.ts";
import { gbnfToCfg } from "./gbnf.ts";
import { cachedRegex, jsonSchemaToCfg, type JsonSchemaOptions } from "./json-schema.ts";
import { fromJavaScript, JsonObject, parseJsonText, pythonJsonDumps, type JsonValue } from "./json-value.ts";
import { LexerSpace } from "./lexer.ts";
import { literalSet, scalarText } from "./literal-set.ts";
import { compileBudget, GRAMMAR_LIMITS, type CompileBudget, type MaskLimits } from "./limits.ts";
import { GrammarMatcher } from "./matcher.ts";
import { MaskWalker } from "./mask-walk.ts";
import { toolCallsToCfg, type ToolCallsSource } from "./tool-calls.ts";
import type { TokenVocabulary } from "./vocabulary.ts";

/** What to constrain output to (the request fields of OpenAI, llama-server and vLLM map here). */
export type GrammarSource =
  /** A JSON Schema, as text (key order kept exactly) or as a value. */
  | { readonly kind: "json_schema"; readonly schema: string | JsonValue | object | boolean; readonly options?: JsonSchemaOptions }
  /** Any JSON object (OpenAI's `{"type": "json_object"}`). */
  | { readonly kind: "json_object"; readonly options?: JsonSchemaOptions }
  /** The whole output matches this regular expression (vLLM's `regex`). */
  | { readonly kind: "regex"; readonly pattern: string }
  /** The output is exactly one of these strings (vLLM's `choice`). */
  | { readonly kind: "choice"; readonly choices: readonly string[] }
  /** A llama.cpp GBNF grammar (llama-server's `grammar`); the start rule is `root`. */
  | { readonly kind: "gbnf"; readonly grammar: string }
  /** A block of tool calls in a chat format's syntax, arguments by their schemas (tool-calls.ts). */
  | ({ readonly kind: "tool_calls" } & ToolCallsSource);

export interface CompilerOptions {
  /** The bounds of each grammar's masks (smaller ones in tests). */
  readonly maskLimits?: MaskLimits;
  /** Grammars (and refusals) kept by content; a benchmark that compiles each schema once needs few. */
  readonly cacheEntries?: number;
  /** Bytes the kept grammars may hold together (their keys, tables and memoized parse states). */
  readonly cacheBytes?: number;
}

/** About 250 MB of nodes and derivatives (ExprPool.footprint). */
const POOL_ROTATE_SIZE = 1_000_000;
const STATE_ROTATE_COUNT = 100_000;
const CACHE_ENTRIES = 256;
/**
 * Entries alone do not bound memory: a grammar of 1,000 properties holds megabytes (tables, and the
 * parse states its outputs went through), so 256 of them could hold a gigabyte.
 */
const CACHE_BYTES = 64 << 20;

export class GrammarCompiler {
  private pool = new ExprPool();
  private space = new LexerSpace(this.pool);
  private walker: MaskWalker;
  /** Content key -> the compiled grammar or the error it gave (least recently used first). */
  private readonly cache = new Map<string, CompiledGrammar | GrammarError>();
  private readonly scratch: Uint32Array;
  private readonly maskLimits: MaskLimits;
  private readonly cacheEntries: number;
  private readonly cacheBytes: number;

  constructor(
    readonly vocab: TokenVocabulary,
    private readonly compileMs: number = GRAMMAR_LIMITS.compileMs,
    options: CompilerOptions = {},
  ) {
    this.maskLimits = options.maskLimits ?? GRAMMAR_LIMITS;
    this.cacheEntries = options.cacheEntries ?? CACHE_ENTRIES;
    this.cacheBytes = options.cacheBytes ?? CACHE_BYTES;
    this.walker = new MaskWalker(this.space, vocab.size);
    this.scratch = new Uint32Array(vocab.words);
  }

  /** The grammar for `source`, compiled once per content. Throws GrammarError where it cannot be. */
  compile(source: GrammarSource): CompiledGrammar {
    const key = contentKey(source);
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      // A grammar whose masks went over their bounds is refused as a compile error would be.
      const known = hit instanceof CompiledGrammar && hit.maskMeter.failure !== null ? hit.maskMeter.failure : hit;
      this.cache.delete(key);
      this.cache.set(key, known);
      if (known instanceof GrammarError) throw known;
      return known;
    }
    let result: CompiledGrammar | GrammarError;
    try {
      result = this.compileFresh(source, key.length);
    } catch (e) {
      if (isStackOverflow(e)) {
        // The front ends bound nesting before they descend (limit: nesting); this is the backstop
        // for any deep shape they do not count, so that it is a refusal (cached), never a crash.
        result = new GrammarLimitError("nesting", `the ${source.kind} nests too deeply to compile (limit: nesting)`);
      } else if (e instanceof GrammarError) result = e;
      else throw e;
    }
    this.cache.set(key, result);
    this.evict();
    if (result instanceof GrammarError) throw result;
    return result;
  }

  /**
   * The least recently used entries dropped while there are more than cacheEntries or they hold
   * more than cacheBytes; the newest stays. Measured at each miss: a kept grammar grows as it is used.
   */
  private evict(): void {
    const bytes = (key: string, entry: CompiledGrammar | GrammarError): number => 2 * key.length + (entry instanceof CompiledGrammar ? entry.footprintBytes : 0);
    let held = 0;
    for (const [key, entry] of this.cache) held += bytes(key, entry);
    for (const [key, entry] of this.cache) {
      if (this.cache.size <= 1 || (this.cache.size <= this.cacheEntries && held <= this.cacheBytes)) return;
      held -= bytes(key, entry);
      this.cache.delete(key);
    }
  }

  /** A matcher at the start of `source`'s grammar. */
  matcher(source: GrammarSource): GrammarMatcher {
    return new GrammarMatcher(this.compile(source));
  }

  private compileFresh(source: GrammarSource, size: number): CompiledGrammar {
    if (size > GRAMMAR_LIMITS.sourceBytes) {
      throw new GrammarLimitError("sourceBytes", `the ${source.kind} is ${size} bytes, over ${GRAMMAR_LIMITS.sourceBytes} (limit: sourceBytes)`);
    }
    if (this.pool.footprint > POOL_ROTATE_SIZE || this.space.stateCount > STATE_ROTATE_COUNT) this.rotate();
    const budget = compileBudget(this.pool.size, this.compileMs);
    this.pool.meter = budget;
    try {
      const cfg = this.toCfg(source, budget);
      const named = source.kind === "tool_calls" ? source.controlTokens.map((t) => this.vocab.specialToken(t)).filter((id) => id !== undefined) : [];
      const grammar = new CompiledGrammar(cfg, this.space, this.walker, this.vocab, source.kind, [...new Set(named)], this.maskLimits);
      this.firstMask(grammar, budget);
      return grammar;
    } finally {
      this.pool.meter = null;
    }
  }

  /** The grammar's first mask, charged to the compile (its walks are cached for the first step). */
  private firstMask(grammar: CompiledGrammar, budget: CompileBudget): void {
    grammar.chargedTo(budget, () => new GrammarMatcher(grammar).fillNextTokenBitmask(this.scratch));
  }

  /** A fresh pool, lexer and mask cache; the cache drops the grammars of the old ones. */
  private rotate(): void {
    for (const [key, entry] of this.cache) if (entry instanceof CompiledGrammar && entry.space === this.space) this.cache.delete(key);
    this.pool = new ExprPool();
    this.space = new LexerSpace(this.pool);
    this.walker = new MaskWalker(this.space, this.vocab.size);
  }

  private toCfg(source: GrammarSource, budget: CompileBudget): Cfg {
    const pool = this.pool;
    switch (source.kind) {
      case "json_schema": {
        const schema = typeof source.schema === "string" ? parseJsonText(source.schema, "the JSON schema") : fromJavaScript(source.schema, "the JSON schema");
        return jsonSchemaToCfg(pool, schema, source.options ?? {}, budget);
      }
      case "json_object": {
        const schema = new JsonObject();
        schema.set("type", "object");
        return jsonSchemaToCfg(pool, schema, source.options ?? {}, budget);
      }
      case "regex": {
        const b = new CfgBuilder(pool, budget);
        const expr = cachedRegex(pool, source.pattern, "full", false, "regex");
        // Look-aheads make an And whose emptiness is not the EMPTY id: searched (bounded).
        if (pool.isEmpty(expr)) throw new GrammarError("regex: the pattern matches nothing: no output could ever satisfy it");
        return b.build(b.rule("root", [b.regular(expr, "regex")]));
      }
      case "choice": {
        if (source.choices.length === 0) throw new GrammarError("choice: the list of choices is empty");
        const b = new CfgBuilder(pool, budget);
        const expr = literalSet(pool, source.choices.map((c, i) => scalarText(c, `choice ${i}`)));
        return b.build(b.rule("root", [b.regular(expr, "choice")]));
      }
      case "gbnf":
        return gbnfToCfg(pool, source.grammar, budget);
      case "tool_calls":
        return toolCallsToCfg(pool, source, this.vocab, budget);
    }
  }
}

/** Whether `e` is the engine's own stack running out (JavaScriptCore's RangeError, V8's too). */
function isStackOverflow(e: unknown): boolean {
  return e instanceof RangeError && /call stack|stack size|recursion/i.test(e.message);
}

/** The cache key of a source: its kind, options and content, exactly as given. */
function contentKey(source: GrammarSource): string {
  switch (source.kind) {
    case "json_schema": {
      const text = typeof source.schema === "string" ? source.schema : pythonJsonDumps(fromJavaScript(source.schema, "the JSON schema"));
      return `json_schema\u0000${JSON.stringify(source.options ?? {})}\u0000${text}`;
    }
    case "json_object":
      return `json_object\u0000${JSON.stringify(source.options ?? {})}`;
    case "regex":
      return `regex\u0000${source.pattern}`;
    case "choice":
      return `choice\u0000${JSON.stringify(source.choices)}`;
    case "gbnf":
      return `gbnf\u0000${source.grammar}`;
    case "tool_calls":
      // Schemas as given (key order kept), with everything else that shapes the grammar.
      return `tool_calls\u0000${JSON.stringify({
        calls: source.calls, prefix: source.prefix, separator: source.separator, suffix: source.suffix, repeat: source.repeat,
        controlTokens: source.controlTokens, preamble: source.preamble ?? null,
      })}`;
  }
}
