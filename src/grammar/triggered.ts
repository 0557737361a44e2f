/**
 * A lazy grammar (tool_choice "auto"; llama.cpp's lazy grammars, xgrammar's triggered structural
 * tags): free text until the output writes a trigger (`<tool_call>`), then the block grammar from
 * that trigger on, so a call's arguments always follow their schema; after the block, free text
 * again (parallel calls allowed) or only the end (parallel_tool_calls false: one call).
 *
 * Free text is unconstrained but for one thing: a token that completes a trigger must continue in
 * a way the block grammar accepts (the trigger's text and the rest of that token are the block's
 * first bytes), so a token like `>{"x` after `<tool_call` is refused while `>` is allowed. Those
 * tokens are few per trigger state, so the free mask of each state is computed once and copied.
 * A trigger may be or hold a special token (Mistral's `[TOOL_CALLS]`, triggers.ts): the token opens
 * the block; its text written in pieces is a trigger the block refuses, so free text never has it.
 *
 * Invariants (as GrammarMatcher's): a mask allows a token iff acceptToken takes it; the state
 * before each accepted token is kept, so rollback(n) restores exactly; every decision depends
 * only on this sequence's tokens.
 */
import type { TokenConstraint } from "../constraint/token-constraint.ts";
import type { CompiledGrammar } from "./compiled-grammar.ts";
import { GrammarMatcher } from "./matcher.ts";
import type { TriggerScan } from "./triggers.ts";

/** The block grammar, its triggers and what may follow a block: shared by every sample of every request with the same tools. */
export class LazyGrammar {
  private readonly freeMasks = new Map<number, Uint32Array>();
  private readonly eogMask: Uint32Array;
  private readonly triggerBytes: readonly Uint8Array[];

  /** The automaton's state where a reply starts (after the lead the prompt ends with). */
  readonly startState: number;

  constructor(
    readonly block: CompiledGrammar,
    readonly scan: TriggerScan,
    /** After a block: "free" text (and more blocks), or only the "end". */
    readonly afterBlock: "free" | "end",
    /** What the prompt ends with, that a trigger may begin with (gpt-oss's `<|start|>assistant`): the automaton starts after it. */
    lead: Uint8Array = new Uint8Array(0),
  ) {
    const run = scan.automaton.run(0, lead);
    this.startState = "state" in run ? run.state : 0;
    const vocab = block.vocab;
    this.eogMask = new Uint32Array(vocab.words);
    for (const t of vocab.eog) this.eogMask[t >>> 5]! |= 1 << (t & 31);
    this.triggerBytes = scan.automaton.triggers;
  }

  /** The block's first bytes when `trigger` completes with `rest` after it. */
  opening(trigger: number, rest: Uint8Array): Uint8Array {
    const t = this.triggerBytes[trigger]!;
    const out = new Uint8Array(t.length + rest.length);
    out.set(t);
    out.set(rest, t.length);
    return out;
  }

  /** The tokens allowed in free text at trigger state `state`: every token of the tokenizer but those that open a block the grammar refuses. */
  freeMask(state: number): Uint32Array {
    let mask = this.freeMasks.get(state);
    if (mask === undefined) {
      const vocab = this.block.vocab;
      mask = new Uint32Array(vocab.words);
      const tokens = vocab.bytes.length;
      mask.fill(0xffffffff, 0, tokens >>> 5);
      for (let t = tokens & ~31; t < tokens; t++) mask[t >>> 5]! |= 1 << (t & 31);
      const probe = new GrammarMatcher(this.block);
      for (const c of this.scan.completing(state)) {
        if (!probe.allowsBytes(this.opening(c.trigger, c.rest))) mask[c.token >>> 5]! &= ~(1 << (c.token & 31));
      }
      this.freeMasks.set(state, mask);
    }
    return mask;
  }

  /** Only the end-of-generation tokens. */
  get endMask(): Uint32Array {
    return this.eogMask;
  }
}

type Mode = "free" | "block" | "end" | "done";

interface Snapshot {
  readonly mode: Mode;
  readonly state: number;
  readonly block: GrammarMatcher | null;
  readonly blockTokens: number;
}

export class TriggeredMatcher implements TokenConstraint {
  private mode: Mode = "free";
  /** The trigger automaton's state in free text. */
  private state: number;
  private block: GrammarMatcher | null = null;
  private readonly history: Snapshot[] = [];

  constructor(private readonly grammar: LazyGrammar) {
    this.state = grammar.startState;
  }

  fillNextTokenBitmask(mask: Uint32Array): void {
    switch (this.mode) {
      case "free":
        mask.set(this.grammar.freeMask(this.state));
        return;
      case "block":
        this.block!.fillNextTokenBitmask(mask);
        return;
      case "end":
      case "done":
        mask.set(this.grammar.endMask);
    }
  }

  acceptToken(token: number): boolean {
    const before: Snapshot = { mode: this.mode, state: this.state, block: this.block, blockTokens: this.block?.tokenCount ?? 0 };
    if (!this.advance(token)) return false;
    this.history.push(before);
    return true;
  }

  private advance(token: number): boolean {
    const g = this.grammar;
    const vocab = g.block.vocab;
    const isEog = vocab.eog.includes(token);
    switch (this.mode) {
      case "done":
        return false;
      case "end":
        if (!isEog) return false;
        this.mode = "done";
        return true;
      case "block": {
        const block = this.block!;
        if (!block.acceptToken(token)) return false;
        this.afterBlockToken(block);
        return true;
      }
      case "free": {
        if (isEog) {
          this.mode = "done";
          return true;
        }
        if (token < 0 || token >= vocab.bytes.length) return false;
        const bytes = g.scan.freeBytes(token);
        // A token with no text (a control token no trigger names) breaks any trigger under way.
        if (bytes.length === 0) {
          this.state = 0;
          return true;
        }
        const run = g.scan.automaton.run(this.state, bytes);
        if ("state" in run) {
          this.state = run.state;
          return true;
        }
        const block = new GrammarMatcher(g.block);
        if (!block.acceptBytes(g.opening(run.trigger, run.rest), token)) return false;
        this.block = block;
        this.mode = "block";
        this.afterBlockToken(block);
        return true;
      }
    }
  }

  /** A block that is complete (nothing may follow it) hands over to free text or the end. */
  private afterBlockToken(block: GrammarMatcher): void {
    if (!block.mustEnd()) return;
    this.block = null;
    this.state = 0;
    this.mode = this.grammar.afterBlock === "free" ? "free" : "end";
  }

  rollback(n: number): void {
    if (!Number.isInteger(n) || n < 0 || n > this.history.length) throw new RangeError(`rollback(${n}): ${this.history.length} tokens accepted`);
    if (n === 0) return;
    const at = this.history[this.history.length - n]!;
    this.history.length -= n;
    this.mode = at.mode;
    this.state = at.state;
    this.block = at.block;
    if (at.block !== null) at.block.rollback(at.block.tokenCount - at.blockTokens);
  }

  forcedTokens(): number[] {
    return this.mode === "block" ? this.block!.forcedTokens() : [];
  }

  isTerminated(): boolean {
    return this.mode === "done";
  }
}
