/**
 * The KV cache's element types (src/kv/kv-layout.ts, assembly/kv-types.ts): the f16 and q8_0
 * writers against independent scalar loops (ggml's reference arithmetic, in Math.fround), the SIMD
 * row reader against its scalar reference on odd sizes over many iterations, and paged attention
 * over an f16 or q8_0 cache against f32 attention over the same values, bitwise.
 */
import { describe, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { attentionScratchBytes } from "../src/backend/wasm/kernels.ts";
import { attentionScale } from "../src/model/attention.ts";
import { KV_TYPE_CODE, kvLayout, kvRowBytes, resolveKVType, type KVType } from "../src/kv/kv-layout.ts";
import { makeConfig } from "../src/model/config.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { KernelRegion } from "./helpers/wasm-scratch.ts";
import { randInt, randomArray, randomPagedSequences } from "./helpers/random-data.ts";

const fr = Math.fround;
const be = new CpuBackend();
const k = be.kernels;
const mem = be.mem;
const region = new KernelRegion(mem, 8 << 20);

/** IEEE half bits of x, nearest even (the platform's Float16Array conversion). */
function halfBits(x: number): number {
  const h = new Float16Array([x]);
  return new Uint16Array(h.buffer)[0]!;
}

function halfValue(bits: number): number {
  return new Float16Array(new Uint16Array([bits]).buffer)[0]!;
}

/** ggml's quantize_row_q8_0_ref in f32 steps: 34-byte blocks of an f16 d and 32 int8. */
function q8_0Reference(x: Float32Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array((x.length / 32) * 34);
  const view = new DataView(out.buffer);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[32 * b + j]!));
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    view.setUint16(34 * b, halfBits(d), true);
    for (let j = 0; j < 32; j++) {
      const v = fr(x[32 * b + j]! * id);
      view.setInt8(34 * b + 2 + j, Math.sign(v) * Math.round(Math.abs(v))); // roundf: halves away from zero
    }
  }
  return out;
}

/** Values that exercise every range of a half: ordinary, tiny (subnormal halves), huge (infinite), exact ties. */
function awkwardValues(rng: Xoshiro128, n: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const kind = randInt(rng, 0, 5);
    const r = rng.nextFloat() * 2 - 1;
    if (kind === 0) x[i] = r * 1e-6;
    else if (kind === 1) x[i] = r * 7e4;
    else if (kind === 2) x[i] = halfValue(randInt(rng, 0, 0x7bff)) + halfValue(1) / 2; // halfway between halves near 0
    else x[i] = r * 8;
  }
  return x;
}

describe("KV layout", () => {
  const c = makeConfig({ dim: 384, hiddenDim: 256, nLayers: 3, nHeads: 6, nKvHeads: 2, vocabSize: 10, seqLen: 64, sharedClassifier: true });
  test("bytes of a row, a layer's block and a block across the model, for each type", () => {
    expect([kvRowBytes("f32", 32), kvRowBytes("f16", 32), kvRowBytes("q8_0", 32), kvRowBytes("q8_0", 64), kvRowBytes("f16", 7)]).toEqual([128, 64, 36, 68, 16]);
    for (const type of ["f32", "f16", "q8_0"] as KVType[]) {
      const l = kvLayout(c, 16, type);
      expect(l.layerBlockBytes).toBe(l.rowBytes * 2 * 16);
      expect(l.blockBytes).toBe(2 * 3 * l.layerBlockBytes);
    }
    expect(kvLayout(c, 16, "q8_0").blockBytes / kvLayout(c, 16, "f32").blockBytes).toBeCloseTo(34 / 128, 5);
  });
  test("defaults: f16 for GGUF, f32 for llama2.c; q8_0 on heads that are not whole blocks falls back to f16 with a note", () => {
    expect(resolveKVType(c, "GGUF v3 llama F32", null)).toEqual({ type: "f16", note: null });
    expect(resolveKVType(c, "llama2.c v1", null)).toEqual({ type: "f32", note: null });
    const odd = makeConfig({ dim: 64, hiddenDim: 256, nLayers: 1, nHeads: 8, nKvHeads: 4, vocabSize: 10, seqLen: 64, sharedClassifier: true });
    const r = resolveKVType(odd, "GGUF v3 llama F32", "q8_0");
    expect(r.type).toBe("f16");
    expect(r.note).toMatch(/--kv-type q8_0 needs a head dimension that is a multiple of 32 \(this model's is 8\)/);
    expect(() => resolveKVType({ ...c, numerics: "runq" }, "llama2.c v2", "f16")).toThrow(/--kv-type f16: .*runq/);
    expect(() => kvLayout(odd, 16, "q8_0")).toThrow(/multiple of 32/);
  });
});

describe("KV element kernels", () => {
  test("f32ToHalf rounds to nearest even like an IEEE conversion, over every range", () => {
    const rng = new Xoshiro128(3);
    const x = awkwardValues(rng, 20000);
    const specials = [0, -0, 65504, 65519.99, 65520, -65520, Infinity, -Infinity, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 2 ** -14, 6.1e-5];
    for (const v of [...x, ...specials]) expect(k.f32ToHalf(v)).toBe(halfBits(v));
    expect(k.f32ToHalf(NaN) & 0x7fff).toBe(0x7e00);
  });

  test("quantizeRowQ8_0 is ggml's quantize_row_q8_0_ref bit for bit", () => {
    const rng = new Xoshiro128(4);
    for (let iter = 0; iter < 300; iter++) {
      const s = region.scratch();
      const n = 32 * randInt(rng, 1, 9);
      const x = iter % 3 === 0 ? awkwardValues(rng, n) : randomArray(rng, n, 10 ** randInt(rng, -3, 3));
      if (iter % 7 === 0) x.fill(0, 0, 32); // an all-zero block: d = 0, q = 0
      const dst = s.alloc((n / 32) * 34);
      k.quantizeRowQ8_0(dst, s.f32(x), n);
      expect(mem.u8.slice(dst, dst + (n / 32) * 34)).toEqual(q8_0Reference(x));
    }
  });

  test("kvRowToF32 (SIMD with a scalar tail) equals its scalar reference on odd sizes, halves of every kind included", () => {
    const rng = new Xoshiro128(5);
    for (let iter = 0; iter < 400; iter++) {
      const s = region.scratch();
      const type: KVType = iter % 2 === 0 ? "f16" : "q8_0";
      const n = type === "f16" ? randInt(rng, 1, 300) : 32 * randInt(rng, 1, 8);
      const bytes = type === "f16" ? 2 * n : (n / 32) * 34;
      const src = s.alloc(bytes);
      for (let i = 0; i < bytes; i++) mem.u8[src + i] = randInt(rng, 0, 255); // any bits: subnormals, inf, NaN
      const simd = s.alloc(4 * n), ref = s.alloc(4 * n);
      k.kvRowToF32(simd, src, n, KV_TYPE_CODE[type]);
      k.kvRowToF32Ref(ref, src, n, KV_TYPE_CODE[type]);
      expect(mem.i32.slice(simd >> 2, (simd >> 2) + n)).toEqual(mem.i32.slice(ref >> 2, (ref >> 2) + n));
      if (type === "f16") {
        for (let j = 0; j < n; j++) {
          const want = halfValue(mem.u8[src + 2 * j]! | (mem.u8[src + 2 * j + 1]! << 8));
          expect(Number.isNaN(want) ? Number.isNaN(mem.f32[(ref >> 2) + j]!) : mem.f32[(ref >> 2) + j]).toBe(Number.isNaN(want) ? true : want);
        }
      }
    }
  });

  test("halfRowScaled (SIMD with a scalar tail) equals its scalar reference on odd sizes, and is each finite half times 2^-112 exactly", () => {
    const rng = new Xoshiro128(8);
    for (let iter = 0; iter < 400; iter++) {
      const s = region.scratch();
      const n = randInt(rng, 1, 300);
      const src = s.alloc(2 * n);
      for (let i = 0; i < 2 * n; i++) mem.u8[src + i] = randInt(rng, 0, 255);
      const simd = s.alloc(4 * n), ref = s.alloc(4 * n);
      k.halfRowScaled(simd, src, n);
      k.halfRowScaledRef(ref, src, n);
      expect(mem.i32.slice(simd >> 2, (simd >> 2) + n)).toEqual(mem.i32.slice(ref >> 2, (ref >> 2) + n));
      for (let j = 0; j < n; j++) {
        const h = mem.u8[src + 2 * j]! | (mem.u8[src + 2 * j + 1]! << 8);
        if ((h & 0x7c00) === 0x7c00) continue; // infinities and NaN: see halfRowScaled
        expect(mem.f32[(ref >> 2) + j]).toBe(fr(halfValue(h) * 2 ** -112));
      }
    }
  });

  test("writeKV stores each head's row converted at its slot", () => {
    const rng = new Xoshiro128(6);
    for (const type of ["f16", "q8_0"] as KVType[]) {
      const s = region.scratch();
      const nKv = 3, hd = 64, bs = 4, blocks = 5, T = 7;
      const rowBytes = kvRowBytes(type, hd);
      const kc = s.alloc(rowBytes * blocks * nKv * bs), vc = s.alloc(rowBytes * blocks * nKv * bs);
      const kk = randomArray(rng, T * nKv * hd, 3), vv = randomArray(rng, T * nKv * hd, 3);
      const slots = [0, 5, 19, 7, 12, 3, 16];
      k.writeKV(kc, vc, s.f32(kk), s.f32(vv), s.i32(slots), T, nKv, hd, bs, blocks, KV_TYPE_CODE[type], rowBytes);
      const one = s.alloc(rowBytes);
      slots.forEach((slot, t) => {
        const at = ((Math.floor(slot / bs) + 0) * bs + (slot % bs)) * rowBytes;
        for (let h = 0; h < nKv; h++) {
          const dst = at + h * blocks * bs * rowBytes;
          for (const [arena, src] of [[kc, kk], [vc, vv]] as const) {
            k.storeKVRow(one, s.f32(src.subarray((t * nKv + h) * hd, (t * nKv + h + 1) * hd)), hd, KV_TYPE_CODE[type]);
            expect(mem.u8.slice(arena + dst, arena + dst + rowBytes)).toEqual(mem.u8.slice(one, one + rowBytes));
          }
        }
      });
    }
  });

  test("pagedAttention over an f16 or q8_0 cache is f32 attention over its values, bitwise, for any split, chunk and GQA", () => {
    const rng = new Xoshiro128(7);
    for (let iter = 0; iter < 80; iter++) {
      const s = region.scratch();
      const type: KVType = iter % 2 === 0 ? "f16" : "q8_0";
      const nKv = randInt(rng, 1, 3), group = randInt(rng, 1, 9), nHeads = nKv * group;
      const hd = type === "f16" ? randInt(rng, 1, 70) : 32 * randInt(rng, 1, 3);
      const bs = randInt(rng, 1, 20), numBlocks = 24;
      const rowBytes = kvRowBytes(type, hd);
      const rows = numBlocks * nKv * bs;
      // The typed cache from random rows; the f32 cache holds the same values widened.
      const typedK = s.alloc(rows * rowBytes), typedV = s.alloc(rows * rowBytes);
      const wideK = s.alloc(4 * rows * hd), wideV = s.alloc(4 * rows * hd);
      for (const [typed, wide] of [[typedK, wideK], [typedV, wideV]]) {
        for (let r = 0; r < rows; r++) {
          k.storeKVRow(typed! + r * rowBytes, s.f32(randomArray(rng, hd, 3)), hd, KV_TYPE_CODE[type]);
          k.kvRowToF32Ref(wide! + 4 * r * hd, typed! + r * rowBytes, hd, KV_TYPE_CODE[type]);
        }
      }
      const numSeqs = randInt(rng, 1, 3);
      const { seqs, info, T } = randomPagedSequences(rng, s, { numSeqs, numBlocks, blockSize: bs, maxCtx: 90, maxCount: 7 });
      const qStride = nHeads * hd;
      // Now and then queries too large for the fast f16 path (it scales them by 2^112): the full widening.
      const q = s.f32(randomArray(rng, T * qStride, iter % 8 === 0 ? 1e5 : 2));
      const qBefore = mem.f32.slice(q >> 2, (q >> 2) + T * qStride);
      const scratch = s.alloc(attentionScratchBytes(Math.max(...seqs.map((x) => x.count)) * group, hd));
      const items = numSeqs * nKv, split = randInt(rng, 0, items);
      const outTyped = s.alloc(4 * T * qStride), outWide = s.alloc(4 * T * qStride);
      k.pagedAttention(outTyped, q, typedK, typedV, info, nHeads, nKv, hd, bs, numBlocks, qStride, KV_TYPE_CODE[type], rowBytes, attentionScale(hd), 0, 0, scratch, 0, split);
      k.pagedAttention(outTyped, q, typedK, typedV, info, nHeads, nKv, hd, bs, numBlocks, qStride, KV_TYPE_CODE[type], rowBytes, attentionScale(hd), 0, 0, scratch, split, items);
      k.pagedAttention(outWide, q, wideK, wideV, info, nHeads, nKv, hd, bs, numBlocks, qStride, 0, 4 * hd, attentionScale(hd), 0, 0, scratch, 0, items);
      expect(region.readF32(outTyped, T * qStride)).toEqual(region.readF32(outWide, T * qStride));
      // q is scaled in place by the fast f16 path and restored exactly.
      expect(region.readF32(q, T * qStride)).toEqual(qBefore);
    }
  });
});
