/**
 * WGSL products over ggml types (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against a scalar
 * dequantize-then-dot in TypeScript, written from ggml-common.h's block layouts and
 * ggml-quants.c's dequantize_row_*, and that dequantization checked bit for bit against the
 * WebAssembly twin (the embed kernels of assembly/ggml, which dequantize whole rows). Random
 * blocks: every quant byte random, scales random normal f16 values. (The WebAssembly products
 * quantize activations to int8 blocks, so the products themselves are compared with f32 x here.)
 */
import { describe, expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { ggmlKernels } from "../src/backend/wasm/ggml-kernels.ts";
import type { MatrixExtras, ProductInput, WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { randInt, randomArray } from "./helpers/random-data.ts";
import { describeGpu, testGpu } from "./helpers/webgpu.ts";

/** IEEE half to number (normal, subnormal, zero; no inf/NaN is ever generated here). */
function f16(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 31;
  const mant = bits & 1023;
  return exp === 0 ? sign * mant * 2 ** -24 : sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
const u16 = (b: Uint8Array, o: number) => b[o]! | (b[o + 1]! << 8);
const i8 = (v: number) => (v << 24) >> 24;

interface BlockType {
  name: string;
  code: number;
  values: number;
  bytes: number;
  /** Byte offsets of the block's f16 fields. */
  halves: number[];
  /** Byte offsets of the block's E8M0 scales (MXFP4). */
  e8m0?: number[];
  dequantize(b: Uint8Array, o: number, y: Float64Array): void;
}

const TYPES: BlockType[] = [
  {
    name: "F16", code: 1, values: 2, bytes: 4, halves: [0, 2],
    dequantize(b, o, y) {
      y[0] = f16(u16(b, o));
      y[1] = f16(u16(b, o + 2));
    },
  },
  {
    name: "BF16", code: 30, values: 2, bytes: 4, halves: [],
    dequantize(b, o, y) {
      y[0] = new Float32Array(new Uint32Array([u16(b, o) << 16]).buffer)[0]!;
      y[1] = new Float32Array(new Uint32Array([u16(b, o + 2) << 16]).buffer)[0]!;
    },
  },
  {
    name: "Q4_1", code: 3, values: 32, bytes: 20, halves: [0, 2],
    dequantize(b, o, y) {
      const d = f16(u16(b, o)), m = f16(u16(b, o + 2));
      for (let j = 0; j < 16; j++) {
        y[j] = Math.fround(d * (b[o + 4 + j]! & 15) + m);
        y[j + 16] = Math.fround(d * (b[o + 4 + j]! >> 4) + m);
      }
    },
  },
  {
    name: "Q5_0", code: 6, values: 32, bytes: 22, halves: [0],
    dequantize(b, o, y) {
      const d = f16(u16(b, o));
      const qh = (u16(b, o + 2) | (u16(b, o + 4) << 16)) >>> 0;
      for (let j = 0; j < 16; j++) {
        y[j] = Math.fround(d * (((b[o + 6 + j]! & 15) | (((qh >>> j) & 1) << 4)) - 16));
        y[j + 16] = Math.fround(d * (((b[o + 6 + j]! >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16));
      }
    },
  },
  {
    name: "Q5_1", code: 7, values: 32, bytes: 24, halves: [0, 2],
    dequantize(b, o, y) {
      const d = f16(u16(b, o)), m = f16(u16(b, o + 2));
      const qh = (u16(b, o + 4) | (u16(b, o + 6) << 16)) >>> 0;
      for (let j = 0; j < 16; j++) {
        y[j] = Math.fround(d * ((b[o + 8 + j]! & 15) | (((qh >>> j) & 1) << 4)) + m);
        y[j + 16] = Math.fround(d * ((b[o + 8 + j]! >> 4) | (((qh >>> (j + 16)) & 1) << 4)) + m);
      }
    },
  },
  {
    name: "Q5_K", code: 13, values: 256, bytes: 176, halves: [0, 2],
    dequantize(b, o, y) {
      const d = f16(u16(b, o));
      const dmin = f16(u16(b, o + 2));
      const sc = o + 4;
      const scaleMin = (j: number): [number, number] => j < 4
        ? [b[sc + j]! & 63, b[sc + j + 4]! & 63]
        : [(b[sc + j + 4]! & 15) | ((b[sc + j - 4]! >> 6) << 4), (b[sc + j + 4]! >> 4) | ((b[sc + j]! >> 6) << 4)];
      for (let i = 0; i < 4; i++) {
        const [s1, m1] = scaleMin(2 * i);
        const [s2, m2] = scaleMin(2 * i + 1);
        const q = o + 48 + 32 * i;
        for (let l = 0; l < 32; l++) {
          const h = b[o + 16 + l]!;
          y[64 * i + l] = d * s1 * ((b[q + l]! & 15) | (((h >> (2 * i)) & 1) << 4)) - dmin * m1;
          y[64 * i + 32 + l] = d * s2 * ((b[q + l]! >> 4) | (((h >> (2 * i + 1)) & 1) << 4)) - dmin * m2;
        }
      }
    },
  },
  {
    name: "Q2_K", code: 10, values: 256, bytes: 84, halves: [80, 82],
    dequantize(b, o, y) {
      const d = f16(u16(b, o + 80)), dmin = f16(u16(b, o + 82));
      for (let v = 0; v < 256; v++) {
        const n = v >> 7, j = (v >> 5) & 3, l = v & 31;
        const sc = b[o + 8 * n + 2 * j + (l >> 4)]!;
        const q = (b[o + 16 + 32 * n + l]! >> (2 * j)) & 3;
        y[v] = Math.fround(Math.fround(d * (sc & 15)) * q) - Math.fround(dmin * (sc >> 4));
      }
    },
  },
  {
    name: "Q3_K", code: 11, values: 256, bytes: 110, halves: [108],
    dequantize(b, o, y) {
      const d = f16(u16(b, o + 108));
      const scale = (j: number) => {
        const low = j < 8 ? b[o + 96 + j]! & 15 : b[o + 96 + j - 8]! >> 4;
        return (low | (((b[o + 104 + (j & 3)]! >> (2 * (j >> 2))) & 3) << 4)) - 32;
      };
      for (let v = 0; v < 256; v++) {
        const n = v >> 7, j = (v >> 5) & 3, l = v & 31;
        const q = (b[o + 32 + 32 * n + l]! >> (2 * j)) & 3;
        const high = (b[o + l]! >> (4 * n + j)) & 1;
        y[v] = Math.fround(d * scale(8 * n + 2 * j + (l >> 4))) * (q - (high !== 0 ? 0 : 4));
      }
    },
  },
  {
    name: "Q8_0", code: 8, values: 32, bytes: 34, halves: [0],
    dequantize(b, o, y) {
      const d = f16(u16(b, o));
      for (let j = 0; j < 32; j++) y[j] = Math.fround(d * i8(b[o + 2 + j]!));
    },
  },
  {
    name: "Q4_0", code: 2, values: 32, bytes: 18, halves: [0],
    dequantize(b, o, y) {
      const d = f16(u16(b, o));
      for (let j = 0; j < 16; j++) {
        y[j] = Math.fround(d * ((b[o + 2 + j]! & 15) - 8));
        y[j + 16] = Math.fround(d * ((b[o + 2 + j]! >> 4) - 8));
      }
    },
  },
  {
    // kvalues_mxfp4 times 2^(e - 128).
    name: "MXFP4", code: 39, values: 32, bytes: 17, halves: [], e8m0: [0],
    dequantize(b, o, y) {
      const values = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
      const d = 2 ** (b[o]! - 128);
      for (let j = 0; j < 16; j++) {
        y[j] = Math.fround(d * values[b[o + 1 + j]! & 15]!);
        y[j + 16] = Math.fround(d * values[b[o + 1 + j]! >> 4]!);
      }
    },
  },
  {
    name: "Q4_K", code: 12, values: 256, bytes: 144, halves: [0, 2],
    dequantize(b, o, y) {
      const d = f16(u16(b, o));
      const dmin = f16(u16(b, o + 2));
      const sc = o + 4;
      const scaleMin = (j: number): [number, number] => j < 4
        ? [b[sc + j]! & 63, b[sc + j + 4]! & 63]
        : [(b[sc + j + 4]! & 15) | ((b[sc + j - 4]! >> 6) << 4), (b[sc + j + 4]! >> 4) | ((b[sc + j]! >> 6) << 4)];
      for (let i = 0; i < 4; i++) {
        const [s1, m1] = scaleMin(2 * i);
        const [s2, m2] = scaleMin(2 * i + 1);
        const q = o + 16 + 32 * i;
        for (let l = 0; l < 32; l++) {
          y[64 * i + l] = d * s1 * (b[q + l]! & 15) - dmin * m1;
          y[64 * i + 32 + l] = d * s2 * (b[q + l]! >> 4) - dmin * m2;
        }
      }
    },
  },
  {
    name: "Q6_K", code: 14, values: 256, bytes: 210, halves: [208],
    dequantize(b, o, y) {
      const d = f16(u16(b, o + 208));
      for (let half = 0; half < 2; half++) {
        const ql = o + 64 * half, qh = o + 128 + 32 * half, sc = o + 192 + 8 * half;
        for (let l = 0; l < 32; l++) {
          const is = Math.floor(l / 16);
          const q1 = ((b[ql + l]! & 15) | (((b[qh + l]! >> 0) & 3) << 4)) - 32;
          const q2 = ((b[ql + l + 32]! & 15) | (((b[qh + l]! >> 2) & 3) << 4)) - 32;
          const q3 = ((b[ql + l]! >> 4) | (((b[qh + l]! >> 4) & 3) << 4)) - 32;
          const q4 = ((b[ql + l + 32]! >> 4) | (((b[qh + l]! >> 6) & 3) << 4)) - 32;
          y[128 * half + l] = d * i8(b[sc + is]!) * q1;
          y[128 * half + l + 32] = d * i8(b[sc + is + 2]!) * q2;
          y[128 * half + l + 64] = d * i8(b[sc + is + 4]!) * q3;
          y[128 * half + l + 96] = d * i8(b[sc + is + 6]!) * q4;
        }
      }
    },
  },
];

/** Random blocks: random quant bytes, f16 scales of magnitude 2^-6 .. 2^-1 (E8M0 ones 2^-8 .. 2^-2). */
function randomBlocks(rng: Xoshiro128, type: BlockType, blocks: number): Uint8Array {
  const b = new Uint8Array(blocks * type.bytes).map(() => randInt(rng, 0, 255));
  if (type.code === 30) {
    // bf16 values of magnitude 2^-7 .. 2^3 (f32 exponents 120 .. 130).
    for (let i = 0; i < b.length; i += 2) {
      const bits = (randInt(rng, 0, 1) << 15) | (randInt(rng, 120, 130) << 7) | randInt(rng, 0, 127);
      b[i] = bits & 255;
      b[i + 1] = bits >> 8;
    }
  }
  for (let i = 0; i < blocks; i++) {
    for (const h of type.halves) {
      const bits = (randInt(rng, 0, 1) << 15) | (randInt(rng, 9, 14) << 10) | randInt(rng, 0, 1023);
      b[i * type.bytes + h] = bits & 255;
      b[i * type.bytes + h + 1] = bits >> 8;
    }
    for (const e of type.e8m0 ?? []) b[i * type.bytes + e] = randInt(rng, 120, 126);
  }
  return b;
}

const cpu = new CpuBackend();

/** Rows of a ggml matrix dequantized by the WebAssembly embed kernel of its type. */
function wasmDequantize(bytes: Uint8Array, type: BlockType, rows: number, cols: number): Float32Array {
  const mem = cpu.mem;
  const mark = mem.mark();
  try {
    const w = mem.alloc(bytes.byteLength);
    mem.u8.set(bytes, w);
    const tokens = mem.alloc(4 * rows);
    mem.i32.set(Array.from({ length: rows }, (_, r) => r), tokens >> 2);
    const out = mem.alloc(4 * rows * cols);
    const embed = cpu.kernels[ggmlKernels(type.code).embed] as (out: number, w: number, tokens: number, T: number, cols: number) => void;
    embed(out, w, tokens, rows, cols);
    return mem.f32.slice(out >> 2, (out >> 2) + rows * cols);
  } finally {
    mem.release(mark);
  }
}

describe("the TypeScript dequantizers equal the WebAssembly ones", () => {
  for (const type of TYPES) {
    test(type.name, () => {
      const rng = new Xoshiro128(60 + type.code);
      const rows = 3;
      const blocksPerRow = type.values === 2 ? 37 : 2;
      const cols = blocksPerRow * type.values;
      const bytes = randomBlocks(rng, type, rows * blocksPerRow);
      const want = wasmDequantize(bytes, type, rows, cols);
      const y = new Float64Array(type.values);
      const got = new Float32Array(rows * cols);
      for (let b = 0; b < rows * blocksPerRow; b++) {
        type.dequantize(bytes, b * type.bytes, y);
        got.set(y, b * type.values);
      }
      expect(Array.from(got)).toEqual(Array.from(want));
    });
  }
});

/** x rounded to bfloat16 or IEEE half (as f32) by the WebAssembly kernel the CPU products use. */
function roundedLikeWasm(x: Float32Array, bf16: boolean): Float32Array {
  const cpu = new CpuBackend(1);
  try {
    const src = cpu.mem.alloc(4 * x.length), dst = cpu.mem.alloc(4 * x.length);
    cpu.mem.f32.set(x, src >> 2);
    cpu.kernels.roundActivations(dst, src, x.length, bf16 ? 1 : 0);
    return cpu.mem.f32.slice(dst >> 2, (dst >> 2) + x.length);
  } finally {
    cpu.close();
  }
}

/** Values at every edge of the two roundings: ties, the half's subnormal and overflow edges, f32 extremes. */
const ROUNDING_EDGES = new Float32Array(new Uint32Array([
  0x00000000, 0x80000000, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f802fff, 0x3f801001, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff,
  0x387fe000, 0x387ff000, 0x387fffff, 0x38800000, 0x38801000, 0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0xb3800001,
  0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0xc77ff000, 0x7f7fffff, 0x7f800000, 0xff800000, 0xc0490fdb,
]).buffer);

/**
 * Stacks of two and three matrices (q, k and v; gate and up) multiplied in one dispatch give each
 * member's output the same bits as the member alone, over parts that cut across members too; with
 * a bias per row (qwen2's q, k and v), the same bits as the member alone plus the bias in f32.
 */
function stackTests(gpu: WebGpuBackend, names: string[]): void {
  for (const name of names) {
    test(`${name}: a stack of 2 or 3 matrices in one dispatch = each alone, bit for bit, split parts and a bias included`, async () => {
      const type = TYPES.find((t) => t.name === name);
      const rng = new Xoshiro128(90 + (type?.code ?? 0));
      for (const members of [[5, 3, 3], [7, 7], [1, 9, 2]]) {
        const blocksPerRow = randInt(rng, 1, 2);
        const cols = type === undefined ? 64 * blocksPerRow : type.values * (type.values === 2 ? 32 : blocksPerRow);
        const T = randInt(rng, 1, 6);
        const x = gpu.bufferFrom(randomArray(rng, T * cols), "x");
        const upload = (rows: number, data: Float32Array | Uint8Array, label: string, extras?: MatrixExtras) => type === undefined
          ? gpu.uploadF32Matrix(data as Float32Array, rows, cols, label, extras)
          : gpu.uploadGgmlMatrix(data as Uint8Array, type.code, rows, cols, label, extras);
        const data = members.map((rows) => type === undefined ? randomArray(rng, rows * cols) : randomBlocks(rng, type, rows * (cols / type.values)));
        const alone: Float32Array[] = [];
        for (const [i, rows] of members.entries()) {
          const out = gpu.f32Buffer(T * rows, "alone");
          gpu.matmul(out, gpu.productInput(x, T, cols), upload(rows, data[i]!, `member${i}`));
          alone.push(await gpu.runner.readF32(out, T * rows));
        }
        const total = members.reduce((a, b) => a + b, 0);
        const joined = type === undefined
          ? Float32Array.from(data.flatMap((d) => Array.from(d as Float32Array)))
          : Uint8Array.from(data.flatMap((d) => Array.from(d as Uint8Array)));
        const bias = randomArray(rng, total);
        for (const [partRows, withBias] of [[total, false], [4, false], [4, true]] as const) {
          gpu.matrixPartBytes = partRows === total ? Infinity : partRows * (joined.byteLength / total);
          const stack = upload(total, joined, "stack", { stack: members, ...(withBias ? { bias } : {}) });
          gpu.matrixPartBytes = Infinity;
          const outs = members.map((rows) => gpu.f32Buffer(T * rows, "member"));
          const before = gpu.runner.counts.dispatches;
          gpu.matmul(outs, gpu.productInput(x, T, cols), stack);
          // One dispatch per part (and, for f16 products, one conversion of x).
          expect(gpu.runner.counts.dispatches - before).toBeLessThanOrEqual(stack.parts.length + 1);
          let first = 0;
          for (const [i, rows] of members.entries()) {
            const want = withBias ? alone[i]!.map((v, j) => Math.fround(v + bias[first + (j % rows)]!)) : alone[i]!;
            expect(await gpu.runner.readF32(outs[i]!, T * rows)).toEqual(want);
            first += rows;
          }
        }
      }
    });
  }
}

async function describeGgml(): Promise<void> {
  await describeGpu("WGSL activation rounding of F16 and BF16 products against the WebAssembly kernel", (gpu: WebGpuBackend) => {
    for (const [name, code] of [["F16", 1], ["BF16", 30]] as const) {
      test(`${name}: every edge value and random ones, bit for bit`, async () => {
        // One row of weights (1, 0): each token's output is its first activation as rounded.
        const weights = new Uint8Array(4);
        new DataView(weights.buffer).setUint16(0, name === "F16" ? 0x3c00 : 0x3f80, true);
        const m = gpu.uploadGgmlMatrix(weights, code, 1, 2, `${name}-one`);
        const rng = new Xoshiro128(7);
        const firsts = Float32Array.from([...ROUNDING_EDGES, ...randomArray(rng, 61).map((v, i) => v * 2 ** ((i % 40) - 26))]);
        const T = firsts.length;
        const x = new Float32Array(2 * T);
        firsts.forEach((v, t) => (x[2 * t] = v));
        const out = gpu.f32Buffer(T, "out");
        gpu.matmul(out, gpu.productInput(gpu.bufferFrom(x, "x"), T, 2), m);
        const got = await gpu.runner.readF32(out, T);
        // Bits, but -0 as 0: the product adds 0 * x1 to a rounded -0.
        const bits = (v: Float32Array) => Array.from(new Uint32Array(Float32Array.from(v, (f) => (f === 0 ? 0 : f)).buffer));
        expect(bits(got)).toEqual(bits(roundedLikeWasm(firsts, name === "BF16")));
      });
    }
  });

  await describeGpu("WGSL ggml block products against scalar dequantize-then-dot", (gpu: WebGpuBackend) => {
    stackTests(gpu, ["F32", "F16", "Q8_0", "Q4_K", "Q6_K"]);
    for (const type of TYPES) {
      test(`${type.name}: odd row counts, several blocks per row, a few tokens, split parts`, async () => {
        const rng = new Xoshiro128(40 + type.code);
        for (let iter = 0; iter < 4; iter++) {
          const rows = randInt(rng, 1, 9);
          const blocksPerRow = type.values === 2 ? randInt(rng, 1, 150) : randInt(rng, 1, 3);
          const cols = blocksPerRow * type.values;
          const T = randInt(rng, 1, 3);
          const bytes = randomBlocks(rng, type, rows * blocksPerRow);
          const x = randomArray(rng, T * cols);
          // F16 and BF16 products read the activations rounded to their type (llama.cpp's numerics).
          const xRead = type.values === 2 ? roundedLikeWasm(x, type.name === "BF16") : x;
          const want = new Float64Array(T * rows);
          const y = new Float64Array(type.values);
          let scale = 1;
          for (let r = 0; r < rows; r++) {
            for (let bi = 0; bi < blocksPerRow; bi++) {
              type.dequantize(bytes, (r * blocksPerRow + bi) * type.bytes, y);
              for (let t = 0; t < T; t++) {
                for (let j = 0; j < type.values; j++) {
                  const term = y[j]! * xRead[t * cols + bi * type.values + j]!;
                  want[t * rows + r] = want[t * rows + r]! + term;
                  scale = Math.max(scale, Math.abs(term) * Math.sqrt(cols));
                }
              }
            }
          }
          const m = gpu.uploadGgmlMatrix(bytes, type.code, rows, cols, type.name);
          const out = gpu.f32Buffer(T * rows, "out");
          gpu.matmul(out, gpu.productInput(gpu.bufferFrom(x, "x"), T, cols), m);
          const got = await gpu.runner.readF32(out, T * rows);
          for (let i = 0; i < got.length; i++) {
            if (!(Math.abs(got[i]! - want[i]!) <= 1e-5 * scale)) throw new Error(`${type.name} element ${i}: ${got[i]} vs ${want[i]}`);
          }

          // Parts of one or two rows: each row's result is unchanged, bit for bit.
          gpu.matrixPartBytes = m.rowBytes * randInt(rng, 1, 2);
          const split = gpu.uploadGgmlMatrix(bytes, type.code, rows, cols, `${type.name}-split`);
          gpu.matrixPartBytes = Infinity;
          const outSplit = gpu.f32Buffer(T * rows, "out-split");
          gpu.matmul(outSplit, gpu.productInput(gpu.bufferFrom(x, "x"), T, cols), split);
          expect(await gpu.runner.readF32(outSplit, T * rows)).toEqual(got);
        }
      });
    }
  });

  // f16 products (wgsl-matmul-f16.ts): activations as f16 with a power-of-two scale per 32 values,
  // each scale group's sums in f16, groups added in f32. Their error against the exact dot is
  // measured relative to the dot's mass, sum |w_j x_j| (no f16 arithmetic can do better than a
  // relative error of the mass); 2^-8 of it is 4 times the worst seen over these cases (Q4_K's,
  // where minimums cancel) and far below what a wrong quant, scale or index gives.
  await describeGpu("WGSL f16 products of quantized types against the exact dot", (gpu: WebGpuBackend) => {
    stackTests(gpu, ["Q8_0", "Q4_K", "Q6_K"]);
    for (const type of TYPES.filter((t) => t.values > 2)) {
      test(`${type.name}: within 2^-8 of the mass, activations from 1e-6 to 1e6, a token's result the same bits alone or in the batch`, async () => {
        const rng = new Xoshiro128(80 + type.code);
        for (let iter = 0; iter < 4; iter++) {
          const rows = randInt(rng, 1, 9);
          const blocksPerRow = randInt(rng, 1, 3);
          const cols = blocksPerRow * type.values;
          const T = randInt(rng, 2, 6);
          const bytes = randomBlocks(rng, type, rows * blocksPerRow);
          // Each 32-value block of a token at its own scale: f16's range (65504) alone would overflow at 1e6.
          const x = randomArray(rng, T * cols);
          for (let i = 0; i < x.length; i += 32) {
            const scale = 10 ** randInt(rng, -6, 6);
            for (let j = i; j < i + 32; j++) x[j] = x[j]! * scale;
          }
          const want = new Float64Array(T * rows);
          const mass = new Float64Array(T * rows);
          const y = new Float64Array(type.values);
          for (let r = 0; r < rows; r++) {
            for (let bi = 0; bi < blocksPerRow; bi++) {
              type.dequantize(bytes, (r * blocksPerRow + bi) * type.bytes, y);
              for (let t = 0; t < T; t++) {
                for (let j = 0; j < type.values; j++) {
                  const term = y[j]! * x[t * cols + bi * type.values + j]!;
                  want[t * rows + r] = want[t * rows + r]! + term;
                  mass[t * rows + r] = mass[t * rows + r]! + Math.abs(term);
                }
              }
            }
          }
          const m = gpu.uploadGgmlMatrix(bytes, type.code, rows, cols, type.name);
          const xBuf = gpu.bufferFrom(x, "x");
          const out = gpu.f32Buffer(T * rows, "out");
          gpu.matmul(out, gpu.productInput(xBuf, T, cols), m);
          const got = await gpu.runner.readF32(out, T * rows);
          for (let i = 0; i < got.length; i++) {
            const err = Math.abs(got[i]! - want[i]!) / mass[i]!;
            if (!(err <= 2 ** -8)) throw new Error(`${type.name} element ${i}: ${got[i]} vs ${want[i]} (mass ${mass[i]})`);
          }

          // Each token alone, through a matrix split into parts of one or two rows: the same bits.
          gpu.matrixPartBytes = m.rowBytes * randInt(rng, 1, 2);
          const split = gpu.uploadGgmlMatrix(bytes, type.code, rows, cols, `${type.name}-split`);
          gpu.matrixPartBytes = Infinity;
          for (let t = 0; t < T; t++) {
            const one = gpu.f32Buffer(rows, "one");
            gpu.matmul(one, gpu.productInput(gpu.bufferFrom(x.slice(t * cols, (t + 1) * cols), "x-one"), 1, cols), split);
            expect(await gpu.runner.readF32(one, rows)).toEqual(got.slice(t * rows, (t + 1) * rows));
          }
        }
      });
    }

    test("q, k and v share one conversion of their input; a new input is converted again", async () => {
      const type = TYPES.find((t) => t.name === "Q8_0")!;
      const rng = new Xoshiro128(5);
      const bytes = randomBlocks(rng, type, 4);
      const m = gpu.uploadGgmlMatrix(bytes, type.code, 2, 64, "q8");
      const xBuf = gpu.bufferFrom(randomArray(rng, 64), "x");
      const out = gpu.f32Buffer(2, "out");
      const before = gpu.runner.counts.dispatches;
      const input = gpu.productInput(xBuf, 1, 64);
      for (let i = 0; i < 3; i++) gpu.matmul(out, input, m);
      expect(gpu.runner.counts.dispatches - before).toBe(1 + 3);
      gpu.matmul(out, gpu.productInput(xBuf, 1, 64), m);
      expect(gpu.runner.counts.dispatches - before).toBe(1 + 3 + 2);
      await gpu.runner.readF32(out, 2);
    });

    test("RMSNorm, the add before it, SwiGLU, GeGLU and attention (windowed too) write the f16 form themselves: the f32 kernels' bits, and the products' bits of a conversion of its own", async () => {
      const plain = await testGpu();
      if (!("backend" in plain)) throw new Error(plain.reason);
      const f32Gpu = plain.backend;
      const type = TYPES.find((t) => t.name === "Q4_K")!;
      const rng = new Xoshiro128(11);
      type Op = (g: WebGpuBackend, out: GPUBuffer, xb: GPUBuffer, yb: GPUBuffer, upb: GPUBuffer, weight: GPUBuffer) => ProductInput;
      for (const n of [256, 512]) {
        const T = randInt(rng, 1, 5);
        const m = gpu.uploadGgmlMatrix(randomBlocks(rng, type, 3 * (n / 256)), type.code, 3, n, "q4k");
        const [x, y, up, w] = [randomArray(rng, T * n, 4), randomArray(rng, T * n), randomArray(rng, T * n), randomArray(rng, n)];
        // Attention over one sequence of T new tokens: heads of 64 (n / 64 of them, half as many KV heads), blocks of 4 in reverse order.
        const [headDim, blockSize, numBlocks] = [64, 4, Math.ceil(T / 4)];
        const arena = (n / 128) * numBlocks * blockSize * headDim;
        const [keys, values] = [randomArray(rng, arena), randomArray(rng, arena)];
        const ops: [string, Op][] = [
          ["rmsnorm", (g, out, xb, _yb, _upb, wb) => g.rmsnormInput(out, xb, wb, T, n, 1e-5)],
          ["addRmsnorm", (g, out, xb, yb, _upb, wb) => g.addRmsnorm(out, xb, yb, wb, T, n, 1e-5)],
          ["swiglu", (g, _out, xb, _yb, upb) => g.swiglu(xb, upb, T, n)],
          ["geglu", (g, _out, xb, _yb, upb) => g.gated("gelu", xb, upb, T, n)],
          ["attention", (g, out, xb) => {
            const info = g.bufferFrom(new Int32Array([0, T, T, 0]), "seq_info");
            const tables = g.bufferFrom(Int32Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i), "tables");
            const [kb, vb] = [g.bufferFrom(keys, "k"), g.bufferFrom(values, "v")];
            return g.attention(out, xb, kb, vb, info, tables, 1, T, n / 64, n / 128, headDim, blockSize, numBlocks, n, T);
          }],
          ["windowed attention", (g, out, xb) => {
            const info = g.bufferFrom(new Int32Array([0, T, T, 0]), "seq_info");
            const tables = g.bufferFrom(Int32Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i), "tables");
            const [kb, vb] = [g.bufferFrom(keys, "k"), g.bufferFrom(values, "v")];
            return g.attention(out, xb, kb, vb, info, tables, 1, T, n / 64, n / 128, headDim, blockSize, numBlocks, n, T, undefined, { scale: 0.1, window: 2 });
          }],
        ];
        for (const [name, op] of ops) {
          const run = (g: WebGpuBackend) => op(g, g.f32Buffer(T * n, "out"), g.bufferFrom(x, "x"), g.bufferFrom(y, "y"), g.bufferFrom(up, "up"), g.bufferFrom(w, "w"));
          const before = gpu.runner.counts.dispatches;
          const fused = run(gpu);
          const product = gpu.f32Buffer(3 * T, "product");
          gpu.matmul(product, fused, m);
          // The kernel and the product: no conversion of its own.
          expect([name, gpu.runner.counts.dispatches - before]).toEqual([name, 2]);
          const values = await gpu.runner.readF32(fused.x, T * n);
          const got = await gpu.runner.readF32(product, 3 * T);

          const f32Values = await f32Gpu.runner.readF32(run(f32Gpu).x, T * n);
          expect(values).toEqual(f32Values);
          const separate = gpu.f32Buffer(3 * T, "separate");
          gpu.matmul(separate, gpu.productInput(gpu.bufferFrom(f32Values, "values"), T, n), m);
          expect(await gpu.runner.readF32(separate, 3 * T)).toEqual(got);
        }
      }
    });
  }, { half: true });
}

await describeGgml();
