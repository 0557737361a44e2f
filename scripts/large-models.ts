/**
 * Writes the random-weight models larger than 4 GiB that docs/large-models.md measures, with the
 * project's GGUF writer (src/synth/gguf-model-writer.ts), into a scratch folder (never into git):
 *
 *   bun scripts/large-models.ts DIR llama2-7b-5l-f32     Llama-2-7B's width, 5 of its 32 layers, F32 (5.1 GB)
 *   bun scripts/large-models.ts DIR llama3.1-8b-q4km     Llama-3.1-8B's full shape in Q4_K_M (4.6 GiB)
 *   bun scripts/large-models.ts DIR qwen2.5-0.5b-q4km    Qwen2.5-0.5B's shape in Q4_K_M (378 MB; the memory test's model)
 *   bun scripts/large-models.ts DIR qwen3-30b-a3b-q4km [LAYERS]
 *                                                        Qwen3-30B-A3B's shape in Q4_K_M (128 experts, 8 per token;
 *                                                        17.3 GiB with all 48 layers, ~0.36 GiB a layer fewer)
 *   bun scripts/large-models.ts DIR gemma3-1b-q4km       Gemma-3-1B's shape in Q4_K_M (sliding windows of 512 on 22 of 26 layers)
 *
 * The F32 model's values are the writer's own (normal-ish, seeded). The Q4_K_M models' quantized
 * tensors are random blocks written directly (random values of the type's width, one scale per
 * tensor that gives each matrix the writer's standard deviation, 1/sqrt(input width)):
 * quantizing billions of values with the reference quantizer takes hours, and a benchmark only
 * needs the shape and the types. The Llama shapes use Llama 2's SentencePiece vocabulary (Llama
 * 3's is not in the shared folder), padded to the shape's vocabulary size with unused tokens.
 * The Gemma shape is a chat model: its file carries Gemma 3's chat template with `<start_of_turn>`
 * and `<end_of_turn>` as control tokens (one id each, as in Gemma's vocabulary), and its padding
 * tokens' embedding rows are zero, so with the tied output their logit is 0 and greedy decoding
 * picks text tokens, as a trained model never picks an unused token. Without both, a chat's turns
 * measured nothing real: its greedy replies were padding that decodes to no text, and the ChatML
 * fallback spelled each marker in about 7 text tokens (docs/models.md).
 */
import { existsSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { GGUF_SHAPES } from "../src/bench/gguf-models.ts";
import { makeConfig, type ModelConfig } from "../src/model/config.ts";
import { modelTensors, writeModelGGUF, type ModelToWrite } from "../src/synth/gguf-model-writer.ts";
import { chunksOf, gguf, tensorBytes, type TensorToWrite } from "../src/synth/gguf-writer.ts";
import { withRandomBlocks } from "../src/synth/gguf-random-blocks.ts";
import { appendControlTokens, padVocabulary, tokenizerMetadata, vocabularySize } from "../src/synth/gguf-tokenizer-metadata.ts";

const VOCAB_DIR = resolve(import.meta.dir, "..", "..", "shared", "vocab");

/** Llama 3.1's RoPE frequency factors (llama.cpp's convert_hf_to_gguf: factor 8, low 1, high 4, original context 8192). */
function llama31RopeFactors(headDim: number, theta: number): number[] {
  const factors: number[] = [];
  const [factor, low, high, original] = [8, 1, 4, 8192];
  for (let i = 0; i < headDim; i += 2) {
    const wavelen = (2 * Math.PI) / (1 / theta ** (i / headDim));
    if (wavelen < original / high) factors.push(1);
    else if (wavelen > original / low) factors.push(factor);
    else {
      const smooth = (original / wavelen - low) / (high - low);
      factors.push(1 / ((1 - smooth) / factor + smooth));
    }
  }
  return factors;
}

// Gemma 3's chat template (google/gemma-3-1b-it, tokenizer_config.json): a system message prefixes the first user turn.
const GEMMA3_CHAT_TEMPLATE = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
`;

/** A chat model's file: its template and the control tokens it names, appended to the vocabulary before the padding. */
interface ChatSpec {
  template: string;
  controlTokens: readonly string[];
}

const MODELS: Record<string, { file: string; model: Omit<ModelToWrite, "tokenizer">; randomBlocks: boolean; vocab?: string; chat?: ChatSpec }> = {
  // meta-llama/Llama-2-7b: hidden 4096, intermediate 11008, 32 heads, vocab 32000, context 4096 (5 of its 32 layers).
  "llama2-7b-5l-f32": {
    file: "llama2-7b-5l-F32.gguf",
    model: {
      arch: "llama", name: "random llama2-7b width, 5 layers", mix: "F32", seed: 7,
      config: makeConfig({ dim: 4096, hiddenDim: 11008, nLayers: 5, nHeads: 32, nKvHeads: 32, vocabSize: 32000, seqLen: 4096, sharedClassifier: false }),
    },
    randomBlocks: false,
  },
  // meta-llama/Llama-3.1-8B: hidden 4096, intermediate 14336, 32 layers, 32 heads / 8 KV heads, vocab 128256,
  // rope_theta 500000 with Llama 3.1's frequency factors, rms_norm_eps 1e-5, context 131072, untied output.
  "llama3.1-8b-q4km": {
    file: "llama3.1-8b-Q4_K_M.gguf",
    model: {
      arch: "llama", name: "random llama3.1-8b shape", mix: "Q4_K_M", seed: 8,
      config: makeConfig({
        dim: 4096, hiddenDim: 14336, nLayers: 32, nHeads: 32, nKvHeads: 8, vocabSize: 128256, seqLen: 131072, sharedClassifier: false,
        ropeTheta: 500000, ropeFreqFactors: llama31RopeFactors(128, 500000),
      }),
    },
    randomBlocks: true,
  },
  // The bench's qwen2.5-0.5b shape (src/bench/gguf-models.ts) in Q4_K_M: 378 MB, mostly Q5_0 (rows of 896 are
  // not whole 256-value super-blocks, so the mix falls back), with SmolLM2's vocabulary padded to 151936.
  "qwen2.5-0.5b-q4km": {
    file: "qwen2.5-0.5b-Q4_K_M.gguf",
    model: { arch: "qwen2", name: "random qwen2.5-0.5b shape", mix: "Q4_K_M", seed: 5, config: GGUF_SHAPES["qwen2.5-0.5b"]!.config },
    randomBlocks: true,
    vocab: "ggml-vocab-smollm.gguf",
  },
  // Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads of 128 / 4 KV heads, 128 experts of 768 with 8
  // per token (norm_topk_prob), vocab 151936, untied output, rope_theta 1e6, rms_norm_eps 1e-6, context 40960.
  // SmolLM2's vocabulary padded to 151936 (Qwen's is not in the shared folder).
  "qwen3-30b-a3b-q4km": {
    file: "qwen3-30b-a3b-Q4_K_M.gguf",
    model: {
      arch: "qwen3moe", name: "random qwen3-30b-a3b shape", mix: "Q4_K_M", seed: 30,
      config: makeConfig({
        dim: 2048, hiddenDim: 6144, nLayers: 48, nHeads: 32, nKvHeads: 4, headDim: 128, vocabSize: 151936, seqLen: 40960, sharedClassifier: false,
        ropeTheta: 1e6, ropeStyle: "neox", normEps: 1e-6, qkNorm: true,
        experts: { count: 128, used: 8, hiddenDim: 768, gating: "softmax", normalizeWeights: true, biases: false, activation: "swiglu" },
      }),
    },
    randomBlocks: true,
    vocab: "ggml-vocab-smollm.gguf",
  },
  // google/gemma-3-1b-it config.json: hidden 1152, intermediate 6912, 26 layers, 4 heads of 256 / 1 KV head, vocab 262144,
  // tied output, rope_theta 1e6 (global layers) and 10000 (local), sliding window 512 on five layers of every six,
  // rms_norm_eps 1e-6, context 32768. Llama 2's vocabulary padded to 262144 (Gemma's is not in the shared folder).
  "gemma3-1b-q4km": {
    file: "gemma3-1b-Q4_K_M.gguf",
    model: {
      arch: "gemma3", name: "random gemma3-1b shape", mix: "Q4_K_M", seed: 31,
      config: makeConfig({
        dim: 1152, hiddenDim: 6912, nLayers: 26, nHeads: 4, nKvHeads: 1, headDim: 256, vocabSize: 262144, seqLen: 32768, sharedClassifier: true,
        ropeTheta: 1e6, ropeStyle: "neox", normEps: 1e-6, qkNorm: true, postNorms: true,
        slidingWindow: { size: 512, local: Array.from({ length: 26 }, (_, l) => l % 6 < 5), rope: { theta: 10000, freqScale: 1 } },
      }),
    },
    randomBlocks: true,
    chat: { template: GEMMA3_CHAT_TEMPLATE, controlTokens: ["<start_of_turn>", "<end_of_turn>"] },
  },
};

// ----------------------------------------------------------------------------

/** `t` with every row from `fromRow` on made of zero bytes: a zero block is 0 in every type written here. */
function zeroRowsFrom(t: TensorToWrite, fromRow: number): TensorToWrite {
  const keep = tensorBytes(t.type, [t.dims[0]!, fromRow], t.name);
  return {
    ...t,
    data: function* () {
      let at = 0;
      for (const chunk of chunksOf(t.data)) {
        if (at + chunk.length > keep) chunk.fill(0, Math.max(0, keep - at));
        at += chunk.length;
        yield chunk;
      }
    },
  };
}

function main(): void {
  const [dir, which, layersArg] = process.argv.slice(2);
  const named = which === undefined ? undefined : MODELS[which];
  const layers = layersArg === undefined ? undefined : Number(layersArg);
  if (dir === undefined || named === undefined || (layers !== undefined && !(Number.isInteger(layers) && layers >= 1))) {
    console.error(`usage: bun scripts/large-models.ts DIR ${Object.keys(MODELS).join("|")} [LAYERS]`);
    process.exit(2);
  }
  // Fewer layers: the same width, heads and experts (a shape that fits the machine), named for its layers.
  const spec = layers === undefined ? named : {
    ...named,
    file: named.file.replace(/(-[A-Z0-9_]+\.gguf)$/, `-${layers}l$1`),
    model: { ...named.model, name: `${named.model.name}, ${layers} layers`, config: { ...named.model.config, nLayers: layers } },
  };
  mkdirSync(dir, { recursive: true });
  const path = join(dir, spec.file);
  if (existsSync(path)) {
    console.log(path);
    return;
  }
  const config: ModelConfig = spec.model.config;
  let vocab = tokenizerMetadata(join(VOCAB_DIR, spec.vocab ?? "ggml-vocab-llama-spm.gguf"));
  if (spec.chat !== undefined) {
    vocab = appendControlTokens(vocab, spec.chat.controlTokens);
    vocab.set("tokenizer.chat_template", gguf.str(spec.chat.template));
  }
  const model: ModelToWrite = { ...spec.model, tokenizer: padVocabulary(vocab, config.vocabSize) };
  const tensors = spec.randomBlocks ? withRandomBlocks(model) : modelTensors(model);
  // A chat model's padding never wins a greedy choice: zero embedding rows (the tied output) give it logit 0.
  const used = vocabularySize(vocab);
  const written = spec.chat === undefined ? tensors : tensors.map((t) => (t.name === "token_embd.weight" ? zeroRowsFrom(t, used) : t));
  const t0 = performance.now();
  writeModelGGUF(path, model, written);
  console.error(`wrote ${path} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  console.log(path);
}

main();
