/**
 * A constraint that starts where a model's reasoning ends (grammars that broke when a model
 * thinks first, ollama #18441, are the failure avoided here), and the reasoning budget (as
 * llama.cpp's --reasoning-budget, vLLM's thinking budget, Anthropic's
 * `thinking.budget_tokens`). The tags are found in the tokens' bytes, so that a tag written as
 * one token (Qwen3's vocabulary) or as text (in any pieces) is seen alike. Three states:
 *   - open: the reply may open its reasoning (`<think>` at its start) or begin its answer; while
 *     its bytes are a start of the tag, both stay possible (the tokens are given to the inner
 *     constraint only once they turn out to be the answer's);
 *   - reasoning: every token but an end-of-generation one (when an inner constraint waits: the
 *     output can never end before the answer starts), until the bytes close it with `</think>`;
 *     once `budget` tokens of reasoning are written, only the tag's rest (forced tokens);
 *   - constrained: the inner constraint (none: every token), from the token after the tag.
 * A prompt that ends with `<think>` (and whitespace: DeepSeek-R1's template ends with
 * `<think>\n`) starts in "reasoning"; any other starts "open". Every state is kept per accepted
 * token, so rollback restores it exactly.
 */
import type { ReasoningMarkers, TokenConstraint } from "../constraint/token-constraint.ts";

type GateState = "open" | "reasoning" | "constrained";

interface Snapshot {
  readonly state: GateState;
  readonly opening: readonly number[];
  readonly closing: number;
  readonly reasoned: number;
  /** Tokens the inner constraint accepted with this one. */
  readonly inner: number;
}

export class ReasoningGate implements TokenConstraint {
  private readonly history: Snapshot[] = [];
  /** In "open": the reply's tokens so far, whose bytes are a start of `<think>` (not yet given to the inner constraint). */
  private readonly opening: number[] = [];
  private openedBytes = 0;
  /** In "reasoning": how many bytes of `</think>` the reasoning ends with. */
  private closing = 0;
  /** Tokens of reasoning written so far. */
  private reasoned = 0;
  /** `</think>`'s failure function (Knuth-Morris-Pratt): the longest proper border of each of its starts. */
  private readonly border: number[];

  constructor(
    /** The answer's constraint; null: the answer is free (the gate only enforces `budget`). */
    private readonly inner: TokenConstraint | null,
    private readonly markers: ReasoningMarkers,
    /** End-of-generation tokens: never allowed while reasoning. */
    private readonly eog: ReadonlySet<number>,
    private state: GateState,
    /** Most tokens of reasoning before `</think>` is forced; null: no bound. */
    private readonly budget: number | null = null,
  ) {
    const end = markers.end;
    this.border = [0];
    for (let i = 1, k = 0; i < end.length; i++) {
      while (k > 0 && end[i] !== end[k]) k = this.border[k - 1]!;
      if (end[i] === end[k]) k++;
      this.border.push(k);
    }
  }

  /** The gate's first state for a prompt: reasoning when its text ends with `<think>` (then whitespace). */
  static initialState(prompt: readonly number[], markers: ReasoningMarkers): GateState {
    const tail: number[] = [];
    for (let i = prompt.length - 1; i >= 0 && tail.length < markers.start.length + 8 && prompt.length - i <= 16; i--) {
      tail.unshift(...markers.tokenBytes(prompt[i]!));
    }
    let n = tail.length;
    while (n > 0 && (tail[n - 1] === 0x20 || tail[n - 1] === 0x0a || tail[n - 1] === 0x0d || tail[n - 1] === 0x09)) n--;
    const start = markers.start;
    if (n < start.length) return "open";
    for (let k = 0; k < start.length; k++) if (tail[n - start.length + k] !== start[k]) return "open";
    return "reasoning";
  }

  /** Whether the answer is being constrained (reasoning is over or never started). */
  get constraining(): boolean {
    return this.state === "constrained";
  }

  /** Whether the reasoning has used its budget: only the rest of `</think>` may follow. */
  private get spent(): boolean {
    return this.state === "reasoning" && this.budget !== null && this.reasoned >= this.budget;
  }

  fillNextTokenBitmask(mask: Uint32Array): void {
    if (this.state === "reasoning") {
      if (this.spent) {
        mask.fill(0);
        allow(mask, this.markers.endTokens(this.closing)[0]!);
        return;
      }
      mask.fill(0xffffffff);
      for (const t of this.eog) mask[t >>> 5]! &= ~(1 << (t & 31));
      return;
    }
    this.fillAnswerMask(mask);
    if (this.state === "open") allow(mask, this.markers.startTokens(this.openedBytes)[0]!);
  }

  /** The answer's next tokens: the inner constraint's after the opening tokens written so far (all without one). */
  private fillAnswerMask(mask: Uint32Array): void {
    const inner = this.inner;
    if (inner === null) {
      mask.fill(0xffffffff);
      return;
    }
    let fed = 0;
    while (fed < this.opening.length && inner.acceptToken(this.opening[fed]!)) fed++;
    if (fed === this.opening.length) inner.fillNextTokenBitmask(mask);
    else mask.fill(0);
    if (fed > 0) inner.rollback(fed);
  }

  acceptToken(token: number): boolean {
    const before: Snapshot = { state: this.state, opening: [...this.opening], closing: this.closing, reasoned: this.reasoned, inner: 0 };
    if (this.state === "reasoning") {
      if (this.eog.has(token) || (this.spent && token !== this.markers.endTokens(this.closing)[0])) return false;
      this.history.push(before);
      this.reasoned++;
      this.closeWith(this.markers.tokenBytes(token));
      return true;
    }
    if (this.state === "open" && this.opensWith(token)) {
      this.history.push(before);
      return true;
    }
    // The answer: the opening tokens written so far were its first tokens.
    const tokens = this.state === "open" ? [...this.opening, token] : [token];
    let fed = 0;
    if (this.inner !== null) {
      while (fed < tokens.length && this.inner.acceptToken(tokens[fed]!)) fed++;
      if (fed < tokens.length) {
        if (fed > 0) this.inner.rollback(fed);
        return false;
      }
    }
    this.history.push({ ...before, inner: fed });
    this.state = "constrained";
    this.opening.length = 0;
    this.openedBytes = 0;
    return true;
  }

  /** Whether `token` goes on writing `<think>` at the reply's start (or completes it: then the reasoning starts). */
  private opensWith(token: number): boolean {
    const bytes = this.markers.tokenBytes(token);
    const start = this.markers.start;
    const at = this.openedBytes;
    if (bytes.length === 0) return false;
    for (let k = 0; k < bytes.length && at + k < start.length; k++) if (bytes[k] !== start[at + k]) return false;
    if (at + bytes.length < start.length) {
      this.opening.push(token);
      this.openedBytes += bytes.length;
      return true;
    }
    this.state = "reasoning";
    this.opening.length = 0;
    this.openedBytes = 0;
    // What the tag's last token writes after it is reasoning already.
    this.closeWith(bytes.subarray(start.length - at));
    return true;
  }

  /** Follows `bytes` of reasoning through `</think>`; at its end the answer starts (bytes after it in the same token are not constrained). */
  private closeWith(bytes: Uint8Array): void {
    const end = this.markers.end;
    let k = this.closing;
    for (const b of bytes) {
      while (k > 0 && end[k] !== b) k = this.border[k - 1]!;
      if (end[k] === b) k++;
      if (k === end.length) {
        this.state = "constrained";
        this.closing = 0;
        return;
      }
    }
    this.closing = k;
  }

  rollback(n: number): void {
    if (!Number.isInteger(n) || n < 0 || n > this.history.length) throw new RangeError(`rollback(${n}): ${this.history.length} tokens accepted`);
    let inner = 0;
    let at: Snapshot | undefined;
    for (let i = 0; i < n; i++) {
      at = this.history.pop()!;
      inner += at.inner;
    }
    if (at === undefined) return;
    this.state = at.state;
    this.opening.length = 0;
    this.opening.push(...at.opening);
    this.openedBytes = this.opening.reduce((sum, t) => sum + this.markers.tokenBytes(t).length, 0);
    this.closing = at.closing;
    this.reasoned = at.reasoned;
    if (inner > 0) this.inner!.rollback(inner);
  }

  forcedTokens(): number[] {
    if (this.spent) return [...this.markers.endTokens(this.closing)];
    return this.state === "constrained" && this.inner !== null ? this.inner.forcedTokens() : [];
  }

  isTerminated(): boolean {
    return this.state === "constrained" && this.inner !== null && this.inner.isTerminated();
  }
}

function allow(mask: Uint32Array, token: number): void {
  mask[token >>> 5]! |= 1 << (token & 31);
}
