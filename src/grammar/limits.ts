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
  /**
   * What computing the masks of ONE grammar may add to the shared lexer and expression pool over
   * its whole life (the states, nodes and derivative work that no grammar made before it): past
   * any of them the grammar is refused (GrammarLimitError), now and on every resend.
   */
  maskExprs: 500_000,
  maskLexerStates: 30_000,
  maskWork: 20_000_000,
  /**
   * What each token a grammar's matchers accept adds to those three: a long output legitimately
   * makes new states as it goes (a string of maxLength 100000 makes about 5 states, 175 nodes and
   * 350 units a token), so the bounds grow with the output, never faster than this.
   */
  maskExprsPerToken: 512,
  maskLexerStatesPerToken: 16,
  maskWorkPerToken: 4096,
} as const;

/** The refusal of `what` (a subject: "the schema", "gbnf line 3: parentheses") nesting past GRAMMAR_LIMITS.nesting. */
export function nestingError(what: string): GrammarLimitError {
  return new GrammarLimitError("nesting", `${what} nest deeper than ${GRAMMAR_LIMITS.nesting} levels (limit: nesting)`);
}

/** Work units between two looks at the clock. */
const CLOCK_EVERY = 4096;

/**
 * The meter the expression pool and the lexer charge as they work (ExprPool.meter): expression
 * nodes made (an Or or And of k parts weighs 1 + k/8: its list and key), lexer states made, and
 * units of work (a derivative, a step of an emptiness search, a trie node walked / 16). Checked
 * as it goes, every CLOCK_EVERY units for the clock, so a limit stops the work it bounds instead
 * of being found over after it. Once over, it stays over: every later charge throws the same error.
 */
export class WorkMeter {
  private exprs = 0;
  private states = 0;
  private work = 0;
  private untilClock = CLOCK_EVERY;
  /** What was charged so far (the tests' and the benchmark's measure of a grammar's cost). */
  get usage(): { readonly exprs: number; readonly states: number; readonly work: number } {
    return { exprs: this.exprs, states: this.states, work: this.work + CLOCK_EVERY - this.untilClock };
  }

  /** The error it stopped with, or null. */
  failure: GrammarLimitError | null = null;

  constructor(
    private exprLimit: number,
    private stateLimit: number,
    private workLimit: number,
    /** performance.now() past which it stops (Infinity: no clock; mask limits are counts, so the same on any machine). */
    readonly deadline: number,
    readonly ms: number,
    /** What is metered, for messages: "the grammar" (compiling), "the grammar's masks". */
    private readonly what: string,
    private readonly limitNames: { readonly exprs: string; readonly states: string; readonly work: string },
  ) {}

  /** An expression node of `weight` is about to be made. */
  expr(weight: number): void {
    if ((this.exprs += weight) > this.exprLimit) this.fail(this.limitNames.exprs, `${this.what} needs more than ${this.exprLimit} expression nodes`);
    this.spend(weight);
  }

  /** Raise the bounds (a token accepted: limits.ts, mask*PerToken). */
  grant(exprs: number, states: number, work: number): void {
    this.exprLimit += exprs;
    this.stateLimit += states;
    this.workLimit += work;
  }

  /** A lexer state is about to be made. */
  state(): void {
    if (++this.states > this.stateLimit) this.fail(this.limitNames.states, `${this.what} needs more than ${this.stateLimit} lexer states`);
    this.spend(16);
  }

  /** `units` of work are about to be done. */
  spend(units: number): void {
    if ((this.untilClock -= units) > 0) return;
    this.check();
  }

  /** Throws where the meter is over (or was): a look at the clock and the work so far. */
  check(): void {
    if (this.failure !== null) throw this.failure;
    this.work += CLOCK_EVERY - this.untilClock;
    this.untilClock = CLOCK_EVERY;
    if (this.work > this.workLimit) this.fail(this.limitNames.work, `${this.what} needs more than ${this.workLimit} units of lexer work`);
    if (performance.now() > this.deadline) this.fail("compileMs", `compiling took longer than ${this.ms} ms`);
  }

  private fail(limit: string, message: string): never {
    this.failure ??= new GrammarLimitError(limit, `${message} (limit: ${limit})`);
    throw this.failure;
  }
}

/**
 * What one compile may spend: a deadline and counts. It is the pool's meter while the compile
 * runs (the compiler sets ExprPool.meter), so the expressions, derivatives and emptiness searches
 * the compile asks for are stopped inside their loops.
 */
export class CompileBudget extends WorkMeter {
  readonly maxRules = GRAMMAR_LIMITS.rules;
  readonly maxExprs = GRAMMAR_LIMITS.exprs;

  constructor(
    /** The pool's size when the compile started (the pool is shared; only new nodes count). */
    readonly exprBase: number,
    ms: number,
  ) {
    super(GRAMMAR_LIMITS.exprs, GRAMMAR_LIMITS.maskLexerStates, Infinity, performance.now() + ms, ms, "the grammar", { exprs: "exprs", states: "maskLexerStates", work: "compileMs" });
  }
}

export function compileBudget(exprBase: number, ms: number = GRAMMAR_LIMITS.compileMs): CompileBudget {
  return new CompileBudget(exprBase, ms);
}

/** The bounds of one grammar's masks (GRAMMAR_LIMITS' mask* entries; tests may give smaller ones). */
export type MaskLimits = { readonly [K in "maskExprs" | "maskLexerStates" | "maskWork" | "maskExprsPerToken" | "maskLexerStatesPerToken" | "maskWorkPerToken"]: number };

/** The meter of one grammar's masks (CompiledGrammar.maskMeter): counts only, no clock. */
export function maskMeter(l: MaskLimits = GRAMMAR_LIMITS): WorkMeter {
  return new WorkMeter(l.maskExprs, l.maskLexerStates, l.maskWork, Infinity, 0, "computing the grammar's masks", { exprs: "maskExprs", states: "maskLexerStates", work: "maskWork" });
}

/** Throws when the budget is spent. Cheap: called at every rule made. */
export function checkBudget(budget: CompileBudget, rules: number, poolSize: number): void {
  if (rules > budget.maxRules) throw new GrammarLimitError("rules", `the grammar needs more than ${budget.maxRules} rules (limit: rules)`);
  if (poolSize - budget.exprBase > budget.maxExprs) {
    throw new GrammarLimitError("exprs", `the grammar needs more than ${budget.maxExprs} expression nodes (limit: exprs)`);
  }
  budget.check();
}
