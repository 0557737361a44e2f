/**
 * Finds a weight tensor holding NaN or infinity, reading the file. Run only after the model has
 * computed non-finite logits (engine.ts), to say which tensor is to blame: scanning every weight at
 * load would cost a read of the whole file before the first token (the fast path reads each byte
 * once, into its final place), for files that are almost never broken.
 *
 * What is checked per encoding: every f32 value; every f16/bf16 value; the f16 scales (and
 * minimums) of each ggml block, at their offsets in the block as ggml lays them out; the f32
 * group scales of llama2.c int8 tensors. Quantized values themselves are integers and always finite.
 */
import { closeSync, openSync, readSync } from "node:fs";
import type { Checkpoint, TensorInfo } from "./checkpoint.ts";

/** Offsets of the f16 scale fields within one block, by ggml type code (ggml-common.h's block_* structs). */
const F16_FIELDS: ReadonlyMap<number, { blockBytes: number; at: readonly number[] }> = new Map([
  [2, { blockBytes: 18, at: [0] }], // Q4_0: d, qs[16]
  [3, { blockBytes: 20, at: [0, 2] }], // Q4_1: d, m, qs[16]
  [6, { blockBytes: 22, at: [0] }], // Q5_0: d, qh[4], qs[16]
  [7, { blockBytes: 24, at: [0, 2] }], // Q5_1: d, m, qh[4], qs[16]
  [8, { blockBytes: 34, at: [0] }], // Q8_0: d, qs[32]
  [10, { blockBytes: 84, at: [80, 82] }], // Q2_K: scales[16], qs[64], d, dmin
  [11, { blockBytes: 110, at: [108] }], // Q3_K: hmask[32], qs[64], scales[12], d
  [12, { blockBytes: 144, at: [0, 2] }], // Q4_K: d, dmin, scales[12], qs[128]
  [13, { blockBytes: 176, at: [0, 2] }], // Q5_K: d, dmin, scales[12], qh[32], qs[128]
  [14, { blockBytes: 210, at: [208] }], // Q6_K: ql[128], qh[64], scales[16], d
]);
const GGML_F16 = 1;
const GGML_BF16 = 30;

const CHUNK_BYTES = 8 << 20;

/** Whether an f16's exponent is all ones (infinity or NaN). */
const f16NonFinite = (h: number): boolean => (h & 0x7c00) === 0x7c00;
const bf16NonFinite = (h: number): boolean => (h & 0x7f80) === 0x7f80;

/** A predicate over one chunk of a tensor's bytes (chunks hold whole blocks), true when a value is not finite. */
type ChunkCheck = (view: DataView) => boolean;

function checkOf(t: TensorInfo): { check: ChunkCheck; unit: number; from: number } | null {
  const e = t.encoding;
  const every = (size: number, bad: (view: DataView, at: number) => boolean): ChunkCheck => (view) => {
    for (let at = 0; at + size <= view.byteLength; at += size) if (bad(view, at)) return true;
    return false;
  };
  if (e.kind === "f32") return { check: every(4, (v, at) => !Number.isFinite(v.getFloat32(at, true))), unit: 4, from: 0 };
  if (e.kind === "q8-llama2c") {
    // int8 values, then one f32 scale per group.
    const values = t.shape.reduce((a, b) => a * b, 1);
    return { check: every(4, (v, at) => !Number.isFinite(v.getFloat32(at, true))), unit: 4, from: values };
  }
  if (e.type === GGML_F16) return { check: every(2, (v, at) => f16NonFinite(v.getUint16(at, true))), unit: 2, from: 0 };
  if (e.type === GGML_BF16) return { check: every(2, (v, at) => bf16NonFinite(v.getUint16(at, true))), unit: 2, from: 0 };
  const fields = F16_FIELDS.get(e.type);
  if (fields === undefined) return null;
  const check: ChunkCheck = (view) => {
    for (let block = 0; block + fields.blockBytes <= view.byteLength; block += fields.blockBytes) {
      for (const at of fields.at) if (f16NonFinite(view.getUint16(block + at, true))) return true;
    }
    return false;
  };
  return { check, unit: fields.blockBytes, from: 0 };
}

/** The name of the first tensor (in file order) with a NaN or infinite value, or null when every one is finite. */
export function firstNonFiniteTensor(ckpt: Checkpoint): string | null {
  const tensors = [...ckpt.tensors.values()].sort((a, b) => a.offset - b.offset);
  const fd = openSync(ckpt.file, "r");
  try {
    for (const t of tensors) {
      const plan = checkOf(t);
      if (plan === null) continue;
      const chunk = Math.max(plan.unit, Math.floor(CHUNK_BYTES / plan.unit) * plan.unit);
      const buffer = new Uint8Array(chunk);
      for (let at = plan.from; at < t.byteLength; at += chunk) {
        const n = readSync(fd, buffer, 0, Math.min(chunk, t.byteLength - at), t.offset + at);
        if (plan.check(new DataView(buffer.buffer, 0, n))) return t.name;
        if (n === 0) break;
      }
    }
    return null;
  } finally {
    closeSync(fd);
  }
}
