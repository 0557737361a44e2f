/**
 * `bench embed`'s inputs: seeded random texts of whole WordPiece words, so each input's token
 * count is known before tokenizing (every word is one vocabulary token; [CLS] and [SEP] make two
 * more) and the same texts can go to llama.cpp, which reads text. pagellm is given the token ids
 * (timing the encoder, not the tokenizer, as llama.cpp's timing excludes its own); the bench
 * checks once, untimed, that pagellm tokenizes the texts to exactly those ids.
 */
import { InputError } from "../errors.ts";
import { readGGUF } from "../model/gguf.ts";
import { Xoshiro128 } from "../util/random.ts";

export interface EmbedInputs {
  texts: string[];
  /** Each text's token ids, [CLS] ... [SEP]. */
  tokenIds: number[][];
}

/**
 * A word-initial WordPiece token of lower-case letters, as llama.cpp's converter stores BERT's
 * vocabulary: "▁word" (a continuation, "##ing", is stored as "ing"). The pre-tokenizer keeps such a
 * word whole, and WordPiece's longest match takes the whole word: one token.
 */
const WHOLE_WORD = /^\u2581([a-z]{2,})$/;

/** `count` inputs of `minTokens` to `maxTokens` tokens (uniform), words drawn from the model file's vocabulary. */
export function embedInputs(model: string, count: number, minTokens: number, maxTokens: number, seed: number): EmbedInputs {
  if (minTokens < 3 || maxTokens < minTokens) throw new InputError(`inputs of ${minTokens}-${maxTokens} tokens: the least is 3 ([CLS], a word, [SEP])`);
  const file = readGGUF(model);
  const tokens = file.getStringArray("tokenizer.ggml.tokens");
  const cls = file.getU32("tokenizer.ggml.cls_token_id");
  const sep = file.getU32("tokenizer.ggml.seperator_token_id");
  const words: number[] = [];
  const text = new Map<number, string>();
  for (let id = 0; id < tokens.length; id++) {
    const word = WHOLE_WORD.exec(tokens.get(id))?.[1];
    if (word === undefined) continue;
    words.push(id);
    text.set(id, word);
  }
  if (words.length === 0) throw new InputError(`${model}: its vocabulary has no whole lower-case words to make inputs of`);
  const rng = new Xoshiro128(seed);
  const draw = (n: number) => rng.nextUint32() % n;
  const texts: string[] = [];
  const tokenIds: number[][] = [];
  for (let i = 0; i < count; i++) {
    const length = minTokens + draw(maxTokens - minTokens + 1);
    const ids = Array.from({ length: length - 2 }, () => words[draw(words.length)]!);
    texts.push(ids.map((id) => text.get(id)!).join(" "));
    tokenIds.push([cls, ...ids, sep]);
  }
  return { texts, tokenIds };
}
