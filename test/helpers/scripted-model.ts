/**
 * A model whose replies are chosen in advance, for the tests of clients that need a reply to parse
 * (a tool call their SDK runs, then an answer to its result; a reasoning to split): a qwen2 model
 * with Qwen2's real vocabulary (../shared/vocab/ggml-vocab-qwen2.gguf) and a real chat template,
 * whose weights are written by hand so that decoding, greedy or sampled at temperature 1, writes
 * one reply before any tool result and another after one, each ended by <|im_end|>. The scripts:
 *
 *   WEATHER_SCRIPT (Qwen2.5's template):
 *     before a result:  <tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>
 *     after a result:   The weather in Paris is sunny.
 *   THINKING_SCRIPT (Qwen3's template):
 *     before a result:  <think>\nThe user asks about Paris.\n</think>\n\nParis is in France.
 *
 * The weights (one layer, width 48, one head; F16 matrices, whose values are all exact in F16):
 *
 *   - Each token a reply writes ("state" tokens, and "\n", the prompt's last token after
 *     `<|im_start|>assistant`) has an embedding row with a 1 in a dimension of its own; every other
 *     token's row is 0. The classifier maps a state's dimension to its successor's logit (A), so
 *     the next token depends on the current one only: each state appears once in a reply, and the
 *     reply tokens are found by a search over the vocabulary (scriptedTokens) that uses every
 *     token at most once (the call's JSON is written without spaces: with them, Qwen2's
 *     vocabulary has too few distinct tokens for its quotes and colons).
 *   - The choice between the two replies is made at "\n" by one attention head: its query is a
 *     constant (the q bias), its key is large only at `_response` (a token of `<tool_response>`,
 *     which Qwen2.5's template writes around a tool result, and nothing before a result writes), so
 *     once a result is in the prompt every later position attends to it; its value sets a flag
 *     dimension of the residual. The flag adds B to the answer's first token and takes B from the
 *     call's, which wins by δ < 2B without it. RoPE's base is 1e30, so the key's dimension (the
 *     slowest pair) does not turn with position. The feed-forward weights are 0.
 *
 * Margins: a successor's logit is about 6.9A (4.9A with the flag) against 0 for every other
 * token, so sampling at temperature 1 picks it with probability 1 - 150,000 e^-37.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { makeConfig } from "../../src/model/config.ts";
import { modelTensors, writeModelGGUF, type ModelToWrite } from "../../src/synth/gguf-model-writer.ts";
import { tokenizerMetadata } from "../../src/synth/gguf-tokenizer-metadata.ts";
import { gguf } from "../../src/synth/gguf-writer.ts";
import { TensorName } from "../../src/model/checkpoint.ts";
import { loadTokenizer } from "../../src/tokenizer/load.ts";
import type { Tokenizer } from "../../src/tokenizer/tokenizer.ts";
import { GGML_TYPE, quantize } from "../../src/synth/quant/index.ts";
import { sharedPath } from "./shared.ts";

/** What a scripted model writes: its template, its reply before any tool result and after one. */
export interface Script {
  name: string;
  template: string;
  first: string;
  afterResult: string;
}

export const WEATHER_SCRIPT: Script = {
  name: "weather",
  template: "templates/Qwen-Qwen2.5-7B-Instruct.jinja",
  first: '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>',
  afterResult: "The weather in Paris is sunny.",
};

export const THINKING_SCRIPT: Script = {
  name: "thinking",
  template: "templates/Qwen-Qwen3-0.6B.jinja",
  first: "<think>\nThe user asks about Paris.\n</think>\n\nParis is in France.",
  afterResult: "All done",
};

/** The tool the scripted call calls, as clients declare it. */
export const WEATHER_TOOL = {
  name: "get_weather",
  description: "Get the current weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string", description: "The city's name." } }, required: ["city"], additionalProperties: false },
};

const VOCAB = "vocab/ggml-vocab-qwen2.gguf";

const DIM = 48;
const HEAD_DIM = 48;
const HIDDEN = 16;
/** The residual dimension of the trigger token, and the flag dimension attention writes. */
const TRIGGER_DIM = 46;
const FLAG_DIM = 47;
/** The query/key dimension: the last of the head, in the slowest RoPE pair in either layout. */
const QK_DIM = 47;
const A = 10;
const DELTA = 1;
const B = 2;
/** The trigger's score, QUERY·KEY/sqrt(HEAD_DIM) = 37: its weight stays near 1 beside thousands of positions. */
const QUERY = 16;
const KEY = 16;

/** Steps the search may take before it gives up. */
const SEARCH_STEPS = 100_000;

/**
 * Token ids whose texts make `text` exactly, none in `used` and none twice (a depth-first search
 * preferring long tokens, bounded in steps); null when it finds none.
 */
export function scriptedTokens(text: string, used: Set<number>, byText: ReadonlyMap<string, number[]>, longest: number): number[] | null {
  const path: number[] = [];
  let steps = 0;
  const search = (at: number): boolean => {
    if (at === text.length) return true;
    if (++steps > SEARCH_STEPS) return false;
    for (let len = Math.min(longest, text.length - at); len >= 1; len--) {
      for (const id of byText.get(text.slice(at, at + len)) ?? []) {
        if (used.has(id)) continue;
        used.add(id);
        path.push(id);
        if (search(at + len)) return true;
        path.pop();
        used.delete(id);
      }
    }
    return false;
  };
  return search(0) ? path : null;
}

/** Every token's text (as a reply shows it) to its ids. */
function textsOf(tok: Tokenizer): { byText: Map<string, number[]>; longest: number } {
  const byText = new Map<string, number[]>();
  let longest = 0;
  for (let id = 0; id < tok.vocabSize; id++) {
    const text = tok.decode([id]);
    if (text === "" || text.includes("\uFFFD")) continue;
    const ids = byText.get(text);
    if (ids === undefined) byText.set(text, [id]);
    else ids.push(id);
    longest = Math.max(longest, text.length);
  }
  return { byText, longest };
}

export interface ScriptedModel {
  path: string;
  /** The ids of the first reply and of the one after a result (each ending with <|im_end|>). */
  firstIds: number[];
  afterResultIds: number[];
}

/** The model of `script`, written into `dir` once; null without ../shared's vocabulary and template. */
export function scriptedModel(dir: string, script: Script = WEATHER_SCRIPT): ScriptedModel | null {
  const vocabPath = sharedPath(VOCAB);
  const templatePath = sharedPath(script.template);
  if (vocabPath === null || templatePath === null) return null;
  const { tokenizer: tok } = loadTokenizer(vocabPath, {});
  const newline = tok.encode("\n")[0]!;
  const trigger = tok.encode("_response")[0]!;
  const end = tok.encode("<|im_end|>", { parseSpecial: true })[0]!;
  const { byText, longest } = textsOf(tok);
  const used = new Set([newline, trigger, end]);
  const call = scriptedTokens(script.first, used, byText, longest);
  const answer = scriptedTokens(script.afterResult, used, byText, longest);
  if (call === null || answer === null) throw new Error("the vocabulary cannot spell the scripted replies with distinct tokens");
  const path = join(dir, `scripted-${script.name}.gguf`);
  const model: ScriptedModel = { path, firstIds: [...call, end], afterResultIds: [...answer, end] };
  if (existsSync(path)) return model;

  const states = [newline, ...call, ...answer];
  if (states.length > TRIGGER_DIM) throw new Error(`${states.length} state tokens, more than ${TRIGGER_DIM} dimensions`);
  const vocabSize = tok.vocabSize;
  const dimOf = new Map(states.map((id, d) => [id, d]));
  const config = makeConfig({
    dim: DIM, hiddenDim: HIDDEN, nLayers: 1, nHeads: 1, nKvHeads: 1, headDim: HEAD_DIM, vocabSize, seqLen: 4096,
    normEps: 1e-6, ropeTheta: 1e30, ropeStyle: "neox", qkvBias: true, sharedClassifier: false,
  });
  const tokenizer = tokenizerMetadata(vocabPath);
  tokenizer.set("tokenizer.chat_template", gguf.str(readFileSync(templatePath, "utf8")));
  const toWrite: ModelToWrite = { arch: "qwen2", name: "scripted-qwen2", config, mix: "F16", tokenizer, seed: 1 };

  const values = new Map<string, Float32Array>();
  const embedding = new Float32Array(vocabSize * DIM);
  for (const [id, d] of dimOf) embedding[id * DIM + d] = 1;
  embedding[trigger * DIM + TRIGGER_DIM] = 1;
  values.set(TensorName.tokenEmbedding, embedding);
  const qBias = new Float32Array(HEAD_DIM);
  qBias[QK_DIM] = QUERY;
  values.set(TensorName.attnQBias(0), qBias);
  const wk = new Float32Array(HEAD_DIM * DIM);
  wk[QK_DIM * DIM + TRIGGER_DIM] = KEY / Math.sqrt(DIM); // the normalized trigger row holds sqrt(DIM) there
  values.set(TensorName.attnK(0), wk);
  const wv = new Float32Array(HEAD_DIM * DIM);
  wv[0 * DIM + TRIGGER_DIM] = 1 / Math.sqrt(DIM);
  values.set(TensorName.attnV(0), wv);
  const wo = new Float32Array(DIM * HEAD_DIM);
  wo[FLAG_DIM * HEAD_DIM + 0] = 1;
  values.set(TensorName.attnOutput(0), wo);
  const ones = new Float32Array(DIM).fill(1);
  for (const name of [TensorName.attnNorm(0), TensorName.ffnNorm(0), TensorName.outputNorm]) values.set(name, ones);
  const output = new Float32Array(vocabSize * DIM);
  const successors = (ids: readonly number[]) => ids.forEach((id, i) => {
    if (i + 1 < ids.length) output[ids[i + 1]! * DIM + dimOf.get(id)!] = A;
  });
  successors([...call, end]);
  successors([...answer, end]);
  output[call[0]! * DIM + dimOf.get(newline)!] = A + DELTA;
  output[answer[0]! * DIM + dimOf.get(newline)!] = A;
  output[answer[0]! * DIM + FLAG_DIM] = B;
  output[call[0]! * DIM + FLAG_DIM] = -B;
  values.set(TensorName.output, output);

  // Every other tensor (q and the biases of k and v, the feed-forward) stays 0.
  const tensors = modelTensors(toWrite).map((t) => {
    const v = values.get(t.name) ?? new Float32Array(t.dims.reduce((a, b) => a * b, 1));
    return { ...t, data: quantize(t.type === GGML_TYPE.F16 ? "F16" : "F32", v) };
  });
  writeModelGGUF(path, toWrite, tensors);
  return model;
}
