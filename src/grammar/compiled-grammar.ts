/**
 * A grammar ready to match one vocabulary: the parser tables, the lexer space and mask cache it
 * shares with the other grammars of its compiler, and the map from lexemes back to its terminals.
 * Immutable apart from caches, so one CompiledGrammar serves any number of matchers at once.
 */
import type { Cfg } from "./cfg.ts";
import { EarleySet, ParserTables } from "./earley.ts";
import { DEAD, type LexerSpace } from "./lexer.ts";
import { GRAMMAR_LIMITS, maskMeter, type MaskLimits, type WorkMeter } from "./limits.ts";
import type { MaskWalker } from "./mask-walk.ts";
import type { TokenVocabulary } from "./vocabulary.ts";

/**
 * Items of parse states one start's memo may hold (about 64 bytes each) before new matchers start
 * from a fresh one: the sets a grammar's outputs and masks pass through stay reachable from its
 * start, so a grammar cached for the life of a server would otherwise grow with all it ever decoded.
 */
const TREE_ITEMS = 1 << 20;
/** Rough bytes held per dotted position (the tables and the rule starts), per rule, and per parse item. */
const POSITION_BYTES = 48;
const RULE_BYTES = 96;
const ITEM_BYTES = 64;

export class CompiledGrammar {
  readonly tables: ParserTables;
  private root: EarleySet;
  private readonly terminalOf = new Map<number, number>();
  private readonly starts = new WeakMap<EarleySet, number>();
  /**
   * What this grammar's masks have added to the shared lexer and pool (limits.ts, mask*): a
   * hostile grammar is stopped at a bound instead of growing them without end; once stopped it
   * stays refused (its compiler answers the error on a resend).
   */
  readonly maskMeter: WorkMeter;
  private charged: WorkMeter;

  constructor(
    cfg: Cfg,
    readonly space: LexerSpace,
    readonly walker: MaskWalker,
    readonly vocab: TokenVocabulary,
    /** What it was compiled from, for messages: "json_schema", "regex", "gbnf", "choice", "json_object". */
    readonly kind: string,
    /**
     * Special tokens the grammar names (tool calls' control tokens, vocabulary.ts): they match
     * only as themselves (their spelling), never as their text, anywhere in this grammar, so a
     * free-text part (gpt-oss's analysis message) cannot swallow the token that ends it.
     */
    readonly namedTokens: readonly number[] = [],
    private readonly limits: MaskLimits = GRAMMAR_LIMITS,
  ) {
    this.maskMeter = maskMeter(limits);
    this.charged = this.maskMeter;
    this.tables = new ParserTables(cfg);
    cfg.terminals.forEach((expr, t) => this.terminalOf.set(expr, t));
    this.root = EarleySet.initial(this.tables);
  }

  /** The parse state before any lexeme: a fresh one (and memo) where the current one holds TREE_ITEMS. */
  get initial(): EarleySet {
    if (this.root.treeItems > TREE_ITEMS) this.root = EarleySet.initial(this.tables);
    return this.root;
  }

  /** About the bytes this grammar holds of its own (its tables and memoized parse states), for the compiler's cache budget. */
  get footprintBytes(): number {
    return this.tables.positions * POSITION_BYTES + this.tables.starts.length * RULE_BYTES + this.root.treeItems * ITEM_BYTES;
  }

  /**
   * Charge the lexer and pool work from here on to this grammar's masks; throws the limit error
   * where they went over before. Every matcher operation that may compute calls it first.
   */
  enter(): void {
    if (this.maskMeter.failure !== null) throw this.maskMeter.failure;
    this.space.pool.meter = this.charged;
  }

  /** A matcher took a token: the masks' bounds grow by a token's worth (limits.ts, mask*PerToken). */
  tokenAccepted(): void {
    this.maskMeter.grant(this.limits.maskExprsPerToken, this.limits.maskLexerStatesPerToken, this.limits.maskWorkPerToken);
  }

  /** Run `work` with its lexer work charged to `meter` (the compile's budget, for the first mask). */
  chargedTo<T>(meter: WorkMeter, work: () => T): T {
    this.charged = meter;
    try {
      return work();
    } finally {
      this.charged = this.maskMeter;
    }
  }

  /** The terminal index of a lexeme (an expression id) of this grammar. */
  terminal(lexeme: number): number {
    return this.terminalOf.get(lexeme)!;
  }

  /** The lexer state where the lexemes `set` expects start (DEAD when it expects none). */
  lexerStart(set: EarleySet): number {
    let s = this.starts.get(set);
    if (s === undefined) {
      s = set.expected.length === 0 ? DEAD : this.space.start(set.expected.map((t) => this.tables.terminalExpr[t]!));
      this.starts.set(set, s);
    }
    return s;
  }

  /** The parse state after `lexeme` ends in `set`, or null. */
  scanLexeme(set: EarleySet, lexeme: number): EarleySet | null {
    return set.scan(this.terminal(lexeme));
  }
}
