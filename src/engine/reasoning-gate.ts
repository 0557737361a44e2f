/**
 * A constraint that starts where a model's reasoning ends (issue 28: grammars that broke when a
 * model thinks first, ollama #18441, are the failure avoided here). Three states:
 *   - open: the first token may open reasoning (the `start` token) or begin the constrained answer;
 *   - reasoning: every token but an end-of-generation one, until the `end` token closes it (so the
 *     output can never end before the answer starts);
 *   - constrained: the inner constraint, from the token after `end`.
 * A prompt that leaves reasoning open (DeepSeek-R1's template ends with `<think>\n`) starts in
 * "reasoning"; one that closed it (Qwen3 with enable_thinking false) or never opened it starts
 * "open". Every state is kept per accepted token, so rollback restores it exactly.
 */
import type { ReasoningMarkers, TokenConstraint } from "./constraint.ts";

type GateState = "open" | "reasoning" | "constrained";

export class ReasoningGate implements TokenConstraint {
  /** The state before each accepted token (for rollback), and whether the inner constraint took that token. */
  private readonly history: { state: GateState; inner: boolean }[] = [];

  constructor(
    private readonly inner: TokenConstraint,
    private readonly markers: ReasoningMarkers,
    /** End-of-generation tokens: never allowed while reasoning. */
    private readonly eog: ReadonlySet<number>,
    private state: GateState,
  ) {}

  /** The gate's first state for a prompt: reasoning when the prompt opened it and did not close it. */
  static initialState(prompt: readonly number[], markers: ReasoningMarkers): GateState {
    const start = prompt.lastIndexOf(markers.start);
    return start >= 0 && prompt.lastIndexOf(markers.end) < start ? "reasoning" : "open";
  }

  /** Whether the answer is being constrained (reasoning is over or never started). */
  get constraining(): boolean {
    return this.state === "constrained";
  }

  fillNextTokenBitmask(mask: Uint32Array): void {
    if (this.state === "reasoning") {
      mask.fill(0xffffffff);
      for (const t of this.eog) mask[t >>> 5]! &= ~(1 << (t & 31));
      return;
    }
    this.inner.fillNextTokenBitmask(mask);
    if (this.state === "open") mask[this.markers.start >>> 5]! |= 1 << (this.markers.start & 31);
  }

  acceptToken(token: number): boolean {
    const before = this.state;
    if (before === "reasoning") {
      if (this.eog.has(token)) return false;
      this.history.push({ state: before, inner: false });
      if (token === this.markers.end) this.state = "constrained";
      return true;
    }
    if (before === "open" && token === this.markers.start) {
      this.history.push({ state: before, inner: false });
      this.state = "reasoning";
      return true;
    }
    if (!this.inner.acceptToken(token)) return false;
    this.history.push({ state: before, inner: true });
    this.state = "constrained";
    return true;
  }

  rollback(n: number): void {
    if (!Number.isInteger(n) || n < 0 || n > this.history.length) throw new RangeError(`rollback(${n}): ${this.history.length} tokens accepted`);
    let inner = 0;
    for (let i = 0; i < n; i++) {
      const step = this.history.pop()!;
      if (step.inner) inner++;
      this.state = step.state;
    }
    if (inner > 0) this.inner.rollback(inner);
  }

  forcedTokens(): number[] {
    return this.state === "constrained" ? this.inner.forcedTokens() : [];
  }

  isTerminated(): boolean {
    return this.state === "constrained" && this.inner.isTerminated();
  }
}
