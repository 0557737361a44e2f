/**
 * The benchmarks' prompts: seeded random token ids (no tokenization cost, no dependence on a text
 * corpus, the same prompts on every run), and vLLM's prefix-repetition workload drawn from them.
 * The engine benches pass them as promptTokenIds; `bench serve` sends them as token-id prompts.
 */
import { Xoshiro128 } from "../util/random.ts";

/** llama2.c's BOS; ids 0-2 are <unk>, <s>, </s>, never drawn as content. */
export const BOS = 1;
const FIRST_CONTENT_ID = 3;

/** Draws token ids in [first, vocabSize): by default llama2.c's content ids. */
export class TokenSource {
  private readonly rng: Xoshiro128;

  constructor(
    seed: number,
    private readonly vocabSize: number,
    private readonly first: number = FIRST_CONTENT_ID,
  ) {
    if (first < 1 || first >= vocabSize) throw new RangeError(`a vocabulary of ${vocabSize} tokens is too small to draw prompts from`);
    this.rng = new Xoshiro128(seed);
  }

  /** `n` random token ids. */
  tokens(n: number): number[] {
    const span = this.vocabSize - this.first;
    return Array.from({ length: n }, () => this.first + (this.rng.nextUint32() % span));
  }

  /** A prompt of `n` tokens in all, BOS first. */
  prompt(n: number): number[] {
    return [BOS, ...this.tokens(n - 1)];
  }

  /** Fisher-Yates, in place. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.rng.nextUint32() % (i + 1);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

export interface PrefixRepetitionShape {
  prefixes: number;
  /** Tokens of each shared prefix (BOS included when it has one). */
  prefixTokens: number;
  suffixTokens: number;
  requests: number;
}

/** One prompt of a prefix-repetition workload: `index` is its place before the shuffle. */
export interface RepeatedPrefixPrompt {
  index: number;
  tokenIds: number[];
}

/**
 * vLLM's prefix_repetition: the shared prefixes drawn first, then request i is prefix i mod P plus
 * its own unique suffix (the same number of requests per prefix), and the list shuffled, as vLLM's
 * generator does. `bos`: each prefix starts with BOS (the engine benches' llama2.c-style prompts).
 */
export function prefixRepetition(source: TokenSource, s: PrefixRepetitionShape, bos: boolean): RepeatedPrefixPrompt[] {
  const prefixes = Array.from({ length: s.prefixes }, () => (bos ? source.prompt(s.prefixTokens) : source.tokens(s.prefixTokens)));
  const prompts = Array.from({ length: s.requests }, (_, index): RepeatedPrefixPrompt => ({
    index,
    tokenIds: [...prefixes[index % s.prefixes]!, ...source.tokens(s.suffixTokens)],
  }));
  return source.shuffle(prompts);
}
