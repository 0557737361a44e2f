/**
 * The grammar engine as the engine's ConstraintCompiler (src/grammar/constraint-spec.ts): a request's
 * constraint compiled into a GrammarMatcher per sample, over the model's vocabulary. The
 * vocabulary's token tries are built on the first constrained request, not at load (a 150k-token
 * vocabulary takes a moment). A schema or grammar that cannot be compiled is a RequestFieldError
 * naming `constraint` and saying where in it (a JSON pointer, a GBNF line) and why, or which bound
 * it went over: never unconstrained output.
 */
import { GrammarError, RequestFieldError } from "../errors.ts";
import type { TokenConstraint } from "../constraint/token-constraint.ts";
import type { ConstraintCompiler, ConstraintSpec } from "./constraint-spec.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { GrammarCompiler, type CompilerOptions, type GrammarSource } from "./compiler.ts";
import type { CallSyntax } from "../tools/call-syntax.ts";
import type { CompiledGrammar } from "./compiled-grammar.ts";
import { GRAMMAR_LIMITS } from "./limits.ts";
import { GrammarMatcher } from "./matcher.ts";
import { LazyGrammar, TriggeredMatcher } from "./triggered.ts";
import { spelledText } from "./tool-calls.ts";
import { triggerScan, triggersKey } from "./triggers.ts";
import { TokenVocabulary } from "./vocabulary.ts";

const utf8 = new TextEncoder();

export class GrammarConstraints implements ConstraintCompiler {
  private compiler: GrammarCompiler | null = null;
  /** Lazy grammars by their block grammar (compiled once per content) and triggers. */
  private readonly lazy = new WeakMap<CompiledGrammar, Map<string, LazyGrammar>>();

  constructor(
    private readonly tokenizer: Tokenizer,
    /** Rows of the model's logits (at least the tokenizer's tokens; padding rows are never allowed). */
    private readonly modelVocabSize: number,
    /** The compiler's bounds (smaller mask limits in tests). */
    private readonly compilerOptions: CompilerOptions = {},
  ) {}

  compile(spec: ConstraintSpec): () => TokenConstraint {
    try {
      if (spec.kind === "tool_calls") return this.toolCalls(spec.syntax);
      const grammar = this.grammars().compile(sourceOf(spec));
      return () => new GrammarMatcher(grammar);
    } catch (e) {
      if (e instanceof GrammarError) throw new RequestFieldError(spec.kind === "tool_calls" ? "tools" : "constraint", `cannot be applied: ${e.message}`);
      throw e;
    }
  }

  /**
   * Tool calls: "forced" (tool_choice required or a named function), the reply is a block of
   * calls (after a preamble, where the format has one); "lazy" (auto), free text until a trigger
   * opens a block (triggered.ts). A lazy block holds one call where the format has no closing text
   * after its calls (Hermes: each call its own tagged block, free text may come between), all of
   * them where it has one (Mistral's `]`). A trigger that holds a control token the vocabulary has
   * (`[TOOL_CALLS]`) is that token; its text written in pieces stays a trigger the block refuses,
   * so no call opens without the token.
   */
  private toolCalls(syntax: CallSyntax): () => TokenConstraint {
    const source = {
      kind: "tool_calls", calls: syntax.calls, prefix: syntax.prefix, separator: syntax.separator, suffix: syntax.suffix, controlTokens: syntax.controlTokens,
    } as const;
    if (syntax.mode === "forced") {
      const grammar = this.grammars().compile({ ...source, preamble: syntax.preamble, repeat: syntax.parallel });
      return () => new GrammarMatcher(grammar);
    }
    const block = this.grammars().compile({ ...source, repeat: syntax.parallel && syntax.suffix.trim() !== "" });
    const afterBlock = syntax.parallel ? "free" : "end";
    const vocab = block.vocab;
    const spell = (text: string): Uint8Array => spelledText(text, syntax.controlTokens, vocab);
    // Only triggers that start a block's text can open one (Llama 3's <|python_tag|> does not).
    const probe = new GrammarMatcher(block);
    const triggers: Uint8Array[] = [];
    for (const t of syntax.triggers) {
      const spelled = spell(t);
      if (!probe.allowsBytes(spelled)) continue;
      triggers.push(spelled);
      const text = utf8.encode(t);
      if (triggersKey([text]) !== triggersKey([spelled])) triggers.push(text);
    }
    if (triggers.length === 0) throw new GrammarError("tool calls: no trigger of this format starts a call");
    const lead = spell(syntax.lead ?? "");
    const key = `${afterBlock}\u0000${triggersKey(triggers)}\u0000${lead.join(",")}`;
    let byKey = this.lazy.get(block);
    if (byKey === undefined) this.lazy.set(block, (byKey = new Map()));
    let lazy = byKey.get(key);
    if (lazy === undefined) byKey.set(key, (lazy = new LazyGrammar(block, triggerScan(vocab, triggers), afterBlock, lead)));
    const grammar = lazy;
    return () => new TriggeredMatcher(grammar);
  }

  private grammars(): GrammarCompiler {
    this.compiler ??= new GrammarCompiler(TokenVocabulary.fromTokenizer(this.tokenizer, this.modelVocabSize), GRAMMAR_LIMITS.compileMs, this.compilerOptions);
    return this.compiler;
  }
}

/** The grammar engine's source for a request's constraint. */
function sourceOf(spec: Exclude<ConstraintSpec, { kind: "tool_calls" }>): GrammarSource {
  switch (spec.kind) {
    case "json_schema":
      return { kind: "json_schema", schema: spec.schema as string | object | boolean };
    case "json_object":
      return { kind: "json_object" };
    case "regex":
      return { kind: "regex", pattern: spec.pattern };
    case "choice":
      return { kind: "choice", choices: spec.choices };
    case "gbnf":
      return { kind: "gbnf", grammar: spec.grammar };
  }
}
