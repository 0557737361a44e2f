/**
 * Seeded mutations of a good GGUF file, and the property every mutated file must keep: loading and
 * running it ends normally, or with one PagellmError that names the file and the problem in one
 * short line with no raw control character, with bounded work and memory, never a trap, a
 * stack trace or an internal error (a RangeError, TypeError or WebAssembly RuntimeError).
 */
import { expect } from "bun:test";
import { ChatTemplate } from "../../src/chat/jinja-template.ts";
import { formatInfo } from "../../src/cli/info.ts";
import { LLM } from "../../src/llm/llm.ts";
import { ModelFormatError, PagellmError } from "../../src/errors.ts";
import { estimateMemory, summarizeModel } from "../../src/hub/summary.ts";
import { readGGUF } from "../../src/model/gguf.ts";
import { openCheckpoint } from "../../src/model/load.ts";
import { loadTokenizer } from "../../src/tokenizer/load.ts";
import { Xoshiro128 } from "../../src/util/random.ts";
import { mapHeader, type HeaderMap } from "./gguf-patch.ts";

/** Characters no message or display may carry raw. */
export const UNSAFE_CHARS = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

export class FuzzRandom {
  private readonly rng: Xoshiro128;
  constructor(seed: number) {
    this.rng = new Xoshiro128(seed);
  }
  int(n: number): number {
    return this.rng.nextUint32() % n;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  /** A u64 a fuzzer likes: 0, 1, small, off by one, powers of two, all ones, random. */
  u64(around: bigint): bigint {
    const choices = [0n, 1n, around + 1n, around - 1n, around * 2n, 1n << BigInt(this.int(64)), (1n << 64n) - 1n, (1n << 63n) - 1n,
      BigInt(this.rng.nextUint32()), (BigInt(this.rng.nextUint32()) << 32n) | BigInt(this.rng.nextUint32())];
    const v = this.pick(choices);
    return v < 0n ? 0n : v & ((1n << 64n) - 1n);
  }
  u32(around: number): number {
    return Number(this.u64(BigInt(around)) & 0xffffffffn);
  }
}

/** One mutation: what it did, and the file's new bytes. */
export interface Mutation {
  what: string;
  bytes: Uint8Array;
}

const HYPER_PARAMETERS = [
  "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count", "attention.head_count_kv",
  "rope.dimension_count", "vocab_size", "attention.key_length", "attention.value_length",
];

type Mutator = (r: FuzzRandom, bytes: Uint8Array, view: DataView, map: HeaderMap) => string;

const u64At = (view: DataView, at: number) => view.getBigUint64(at, true);
const tensorList = (map: HeaderMap) => [...map.tensors.values()];
const valueList = (map: HeaderMap) => [...map.values.entries()];

/** The file offset of the u64 length of the string that ends right before `end` (a key or a tensor name). */
function keyLengthAt(bytes: Uint8Array, view: DataView, end: number): number | null {
  for (let len = 0; len < 200 && end - len - 8 >= 24; len++) if (u64At(view, end - len - 8) === BigInt(len)) return end - len - 8;
  void bytes;
  return null;
}

const MUTATORS: readonly [string, Mutator][] = [
  ["header count", (r, _b, v) => {
    const at = r.pick([4, 8, 16]);
    if (at === 4) {
      v.setUint32(4, r.u32(3), true);
      return `version = ${v.getUint32(4, true)}`;
    }
    v.setBigUint64(at, r.u64(u64At(v, at)), true);
    return `${at === 8 ? "tensor_count" : "kv_count"} = ${u64At(v, at)}`;
  }],
  ["string length", (r, b, v, m) => {
    const useKey = r.int(2) === 0;
    const end = useKey ? r.pick(valueList(m))[1].at - 4 : r.pick(tensorList(m)).nDimsAt;
    const at = keyLengthAt(b, v, end);
    if (at === null) return "no string found";
    v.setBigUint64(at, r.u64(u64At(v, at)), true);
    return `${useKey ? "key" : "tensor name"} length at ${at} = ${u64At(v, at)}`;
  }],
  ["value type", (r, _b, v, m) => {
    const [key, value] = r.pick(valueList(m));
    v.setUint32(value.at - 4, r.u32(value.type), true);
    return `type of ${key} = ${v.getUint32(value.at - 4, true)}`;
  }],
  ["array header", (r, _b, v, m) => {
    const arrays = valueList(m).filter(([, value]) => value.type === 9);
    if (arrays.length === 0) return "no array";
    const [key, value] = r.pick(arrays);
    if (r.int(2) === 0) {
      v.setUint32(value.at, r.u32(v.getUint32(value.at, true)), true);
      return `item type of ${key} = ${v.getUint32(value.at, true)}`;
    }
    v.setBigUint64(value.at + 4, r.u64(u64At(v, value.at + 4)), true);
    return `item count of ${key} = ${u64At(v, value.at + 4)}`;
  }],
  ["tensor dims", (r, _b, v, m) => {
    const t = r.pick(tensorList(m));
    if (r.int(4) === 0) {
      v.setUint32(t.nDimsAt, r.u32(t.dims.length), true);
      return `n_dims of ${t.name} = ${v.getUint32(t.nDimsAt, true)}`;
    }
    const d = r.int(t.dims.length);
    v.setBigUint64(t.dimsAt + 8 * d, r.u64(t.dims[d]!), true);
    return `dim ${d} of ${t.name} = ${u64At(v, t.dimsAt + 8 * d)}`;
  }],
  ["tensor type", (r, _b, v, m) => {
    const t = r.pick(tensorList(m));
    v.setUint32(t.typeAt, r.pick([0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 15, 20, 24, 28, 30, 39, 40, r.u32(0)]), true);
    return `type of ${t.name} = ${v.getUint32(t.typeAt, true)}`;
  }],
  ["tensor offset", (r, _b, v, m) => {
    const t = r.pick(tensorList(m));
    const other = r.pick(tensorList(m));
    const choice = r.int(3);
    const value = choice === 0 ? u64At(v, other.offsetAt) : choice === 1 ? u64At(v, other.offsetAt) + 32n : r.u64(u64At(v, t.offsetAt));
    v.setBigUint64(t.offsetAt, value, true);
    return `offset of ${t.name} = ${value}`;
  }],
  ["tensor name", (r, b, _v, m) => {
    // Same length, so the header stays aligned: a duplicate of another tensor's name, or a changed character.
    const t = r.pick(tensorList(m));
    const nameAt = t.nDimsAt - t.name.length;
    const twins = tensorList(m).filter((o) => o.name.length === t.name.length && o.name !== t.name);
    if (twins.length > 0 && r.int(2) === 0) {
      const twin = r.pick(twins);
      b.set(new TextEncoder().encode(twin.name), nameAt);
      return `${t.name} renamed ${twin.name} (a duplicate)`;
    }
    const at = nameAt + r.int(t.name.length);
    b[at] = r.pick([0x00, 0x0a, 0x1b, 0x9b, 0xff, 0x22, 0x78]);
    return `a byte of ${t.name}'s name = ${b[at]}`;
  }],
  ["hyper-parameter", (r, _b, v, m) => {
    const arch = [...m.values.keys()].find((k) => k.endsWith(".block_count"))?.split(".")[0] ?? "llama";
    const key = `${arch}.${r.pick(HYPER_PARAMETERS)}`;
    const value = m.values.get(key);
    if (value === undefined || value.type !== 4) return `no u32 ${key}`;
    v.setUint32(value.at, r.pick([0, 1, 2, 3, 7, 64, 1 << 16, 1 << 24, 0x7fffffff, 0xffffffff, r.u32(v.getUint32(value.at, true))]), true);
    return `${key} = ${v.getUint32(value.at, true)}`;
  }],
  ["token id", (r, _b, v, m) => {
    const ids = valueList(m).filter(([k, value]) => k.endsWith("_token_id") && value.type === 4);
    if (ids.length === 0) return "no token id";
    const [key, value] = r.pick(ids);
    v.setUint32(value.at, r.pick([0, 1, 2, 511, 512, 513, 100000, 0xffffffff, 0x7fffffff, r.u32(0)]), true);
    return `${key} = ${v.getUint32(value.at, true)}`;
  }],
  ["metadata string bytes", (r, b, v, m) => {
    const strings = valueList(m).filter(([, value]) => value.type === 8);
    if (strings.length === 0) return "no string";
    const [key, value] = r.pick(strings);
    const length = Number(u64At(v, value.at));
    if (length === 0) return `${key} is empty`;
    const at = value.at + 8 + r.int(length);
    b[at] = r.pick([0x00, 0x0a, 0x1b, 0x07, 0x9b, 0xc2, 0xe2, 0xff, 0x7b, 0x25]);
    return `a byte of ${key} = ${b[at]}`;
  }],
  ["header byte", (r, b, _v, m) => {
    const end = Math.max(...tensorList(m).map((t) => t.offsetAt + 8));
    const at = r.int(end);
    b[at] = r.int(256);
    return `header byte ${at} = ${b[at]}`;
  }],
];

/** `count` seeded mutations of `good`, each one to three edits of its header. */
export function* mutations(good: Uint8Array, seed: number, count: number): Generator<Mutation> {
  const r = new FuzzRandom(seed);
  // Fields are found in the good file's layout: edits never move bytes, so its offsets stay right
  // (a mutated header is never walked here, which its absurd counts would make endless).
  const map = mapHeader(good);
  for (let i = 0; i < count; i++) {
    const bytes = good.slice();
    const view = new DataView(bytes.buffer);
    const edits: string[] = [];
    const n = 1 + r.int(3);
    for (let e = 0; e < n; e++) {
      const [kind, mutate] = r.pick(MUTATORS);
      edits.push(`${kind}: ${mutate(r, bytes, view, map)}`);
    }
    if (r.int(16) === 0) {
      const cut = r.int(bytes.length);
      edits.push(`truncated to ${cut} bytes`);
      yield { what: edits.join("; "), bytes: bytes.slice(0, cut) };
    } else {
      yield { what: edits.join("; "), bytes };
    }
  }
}

/** What running a file came to: a normal run, or the error it was refused with. */
export type Outcome = { kind: "ran" } | { kind: "refused"; message: string };

/**
 * Load and run the file at `path` in-process as `pagellm info` and `pagellm generate` do: the
 * header's summary (info's text, checked for raw control characters), the checkpoint, the
 * tokenizer, the chat template, and, when all are accepted, a short generation.
 */
export async function runFile(path: string): Promise<Outcome> {
  try {
    const header = readGGUF(path);
    const summary = summarizeModel(path, header);
    const shown = formatInfo(summary, estimateMemory(summary, 256, "f16"));
    expect(shown).not.toMatch(UNSAFE_CHARS);
    const ckpt = openCheckpoint(path);
    const { tokenizer, chatTemplate } = loadTokenizer(path, { modelVocabSize: ckpt.config.vocabSize });
    if (chatTemplate !== null) {
      const specials = { bosToken: tokenizer.bosId === null ? "" : tokenizer.tokenText(tokenizer.bosId), eosToken: "" };
      new ChatTemplate(chatTemplate, path, specials).render([{ role: "user", content: "Hi" }], true);
    }
    const llm = LLM.load({ model: path, engine: { threads: 1, ctxSize: 64, kvCacheMb: 4, maxNumSeqs: 2, maxNumBatchedTokens: 64 } });
    try {
      const [result] = await llm.generate([{ prompt: "Once upon a time", maxTokens: 4, temperature: 0 }]);
      if (result!.finish_reason === "error") return { kind: "refused", message: result!.error! };
    } finally {
      llm.close();
    }
    return { kind: "ran" };
  } catch (e) {
    return { kind: "refused", message: refusal(e, path) };
  }
}

/** The message of an error that is a clean refusal of `path`; fails the test for any other. */
export function refusal(e: unknown, path: string): string {
  if (!(e instanceof PagellmError)) {
    const name = e instanceof Error ? `${e.name}: ${e.message.split("\n")[0]}` : String(e);
    throw new Error(`internal error, not a refusal: ${name}`);
  }
  if (e instanceof ModelFormatError) expect(e.file).toBe(path);
  expect(e.message).toContain(path);
  expectCleanLine(e.message);
  return e.message;
}

/** One line, short, no raw control character. */
export function expectCleanLine(message: string): void {
  expect(message).not.toContain("\n");
  expect(message).not.toMatch(UNSAFE_CHARS);
  expect(message.length).toBeLessThan(600);
}
