/**
 * The bounds on compiling a constraint (docs/structured-output.md lists them). A schema or grammar
 * over any of them is refused with a GrammarLimitError naming the limit, so a hostile or runaway
 * request costs at most this much and never hangs the engine.
 */
import { GrammarLimitError } from "../errors.ts";

export const GRAMMAR_LIMITS = {
  /** Bytes of schema, regex or grammar text. */
  sourceBytes: 1 << 20,
  /** Wall-clock time to compile one constraint, in milliseconds. */
  compileMs: 2000,
  /** Grammar rules after expansion. */
  rules: 50_000,
  /** Regular-expression nodes built while compiling (each is a lexer state or part of one). */
  exprs: 500_000,
  /** `$ref` expansions inlined (allOf merges) before a schema is refused. */
  refInlines: 10_000,
  /** Alternatives a merge of allOf with anyOf/oneOf may produce. */
  allOfBranches: 256,
  /** Whitespace bytes allowed in a row between JSON tokens (see maxWhitespace). */
  jsonWhitespace: 64,
  /**
   * Depth of nesting: parentheses of a regex or GBNF grammar, schemas inside schemas (a `$ref`
   * hop counts as one). Checked as the parsers descend, so deep input never overflows the stack.
   */
  nesting: 1_000,
} as const;

/** The refusal of `what` (a subject: "the schema", "gbnf line 3: parentheses") nesting past GRAMMAR_LIMITS.nesting. */
export function nestingError(what: string): GrammarLimitError {
  return new GrammarLimitError("nesting", `${what} nest deeper than ${GRAMMAR_LIMITS.nesting} levels (limit: nesting)`);
}

/** What one compile may spend: a deadline and counts. */
export interface CompileBudget {
  readonly deadline: number;
  readonly ms: number;
  readonly maxRules: number;
  readonly maxExprs: number;
  /** The pool's size when the compile started (the pool is shared; only new nodes count). */
  readonly exprBase: number;
}

export function compileBudget(exprBase: number, ms: number = GRAMMAR_LIMITS.compileMs): CompileBudget {
  return { deadline: performance.now() + ms, ms, maxRules: GRAMMAR_LIMITS.rules, maxExprs: GRAMMAR_LIMITS.exprs, exprBase };
}

/** Throws when the budget is spent. Cheap: called at every rule made. */
export function checkBudget(budget: CompileBudget, rules: number, poolSize: number): void {
  if (rules > budget.maxRules) throw new GrammarLimitError("rules", `the grammar needs more than ${budget.maxRules} rules (limit: rules)`);
  if (poolSize - budget.exprBase > budget.maxExprs) {
    throw new GrammarLimitError("exprs", `the grammar needs more than ${budget.maxExprs} expression nodes (limit: exprs)`);
  }
  if (performance.now() > budget.deadline) throw new GrammarLimitError("compileMs", `compiling took longer than ${budget.ms} ms (limit: compileMs)`);
}
