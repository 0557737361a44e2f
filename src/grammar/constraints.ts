/**
 * The grammar engine as the engine's ConstraintCompiler (src/engine/constraint.ts): a request's
 * constraint compiled into a GrammarMatcher per sample, over the model's vocabulary. The
 * vocabulary's token tries are built on the first constrained request, not at load (a 150k-token
 * vocabulary takes a moment). A schema or grammar that cannot be compiled is a RequestFieldError
 * naming `constraint` and saying where in it (a JSON pointer, a GBNF line) and why, or which bound
 * it went over: never unconstrained output.
 */
import { GrammarError, RequestFieldError } from "../errors.ts";
import type { ConstraintCompiler, ConstraintSpec, TokenConstraint } from "../engine/constraint.ts";
import type { Tokenizer } from "../tokenizer/tokenizer.ts";
import { GrammarCompiler, type GrammarSource } from "./compiler.ts";
import { GrammarMatcher } from "./matcher.ts";
import { TokenVocabulary } from "./vocabulary.ts";

export class GrammarConstraints implements ConstraintCompiler {
  private compiler: GrammarCompiler | null = null;

  constructor(
    private readonly tokenizer: Tokenizer,
    /** Rows of the model's logits (at least the tokenizer's tokens; padding rows are never allowed). */
    private readonly modelVocabSize: number,
  ) {}

  compile(spec: ConstraintSpec): () => TokenConstraint {
    try {
      const grammar = this.grammars().compile(sourceOf(spec));
      return () => new GrammarMatcher(grammar);
    } catch (e) {
      if (e instanceof GrammarError) throw new RequestFieldError("constraint", `cannot be applied: ${e.message}`);
      throw e;
    }
  }

  private grammars(): GrammarCompiler {
    this.compiler ??= new GrammarCompiler(TokenVocabulary.fromTokenizer(this.tokenizer, this.modelVocabSize));
    return this.compiler;
  }
}

/** The grammar engine's source for a request's constraint. */
function sourceOf(spec: ConstraintSpec): GrammarSource {
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
