/**
 * WGSL paged attention and RoPE with K/V writes against assembly/attention.ts and assembly/rope.ts on the same arena layout,
 * block tables and sequence records: shuffled blocks, chunks of new tokens, GQA, contexts of
 * several 16-position tiles. And the GPU's own invariance: a sequence's output is the same bits
 * alone or in a batch with others.
 */
import { expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { attentionScratchBytes } from "../src/backend/wasm/kernels.ts";
import { attentionScale } from "../src/model/attention.ts";
import { SEQ_INFO_INTS } from "../src/model/batch.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { KV_TYPE_CODE, kvRowBytes } from "../src/kv/kv-layout.ts";
import { randInt, randomArray } from "./helpers/random-data.ts";
import { describeGpu } from "./helpers/webgpu.ts";

const cpu = new CpuBackend();
const k = cpu.kernels;
const mem = cpu.mem;

function wasmF32(values: ArrayLike<number>): number {
  const addr = mem.alloc(4 * Math.max(1, values.length));
  mem.f32.set(values, addr >> 2);
  return addr;
}
function wasmI32(values: ArrayLike<number>): number {
  const addr = mem.alloc(4 * Math.max(1, values.length));
  mem.i32.set(values, addr >> 2);
  return addr;
}
function wasmRead(addr: number, n: number): Float32Array {
  return mem.f32.slice(addr >> 2, (addr >> 2) + n);
}

interface Sequence {
  start: number;
  count: number;
  ctx: number;
  table: number[];
}

/** Sequences with shuffled block tables drawn from one pool; contexts up to maxCtx. */
function randomSequences(rng: Xoshiro128, numSeqs: number, numBlocks: number, blockSize: number, maxCtx: number): { seqs: Sequence[]; T: number } {
  const perm = Array.from({ length: numBlocks }, (_, i) => i).sort(() => rng.nextFloat() - 0.5);
  const seqs: Sequence[] = [];
  let T = 0;
  let next = 0;
  for (let s = 0; s < numSeqs; s++) {
    const ctx = randInt(rng, 1, Math.min(maxCtx, Math.floor(numBlocks / numSeqs) * blockSize));
    const count = randInt(rng, 1, Math.min(ctx, 6));
    const table = perm.slice(next, next + Math.ceil(ctx / blockSize));
    next += table.length;
    seqs.push({ start: T, count, ctx, table });
    T += count;
  }
  return { seqs, T };
}

/** GPU records: blockTable is an element index into the concatenated tables. */
function gpuRecords(seqs: Sequence[], firstRow = (s: Sequence) => s.start): { info: Int32Array; tables: Int32Array } {
  const info: number[] = [];
  const tables: number[] = [];
  for (const s of seqs) {
    info.push(firstRow(s), s.count, s.ctx, tables.length);
    tables.push(...s.table);
  }
  return { info: new Int32Array(info), tables: new Int32Array(tables.length > 0 ? tables : [0]) };
}

async function describeAttention(): Promise<void> {
  await describeGpu("WGSL paged attention against the WebAssembly kernel", (gpu: WebGpuBackend) => {
    const run = gpu.runner;
    const upload = (v: Float32Array | Int32Array) => gpu.bufferFrom(v, "test");

    test("matches pagedAttention over shuffled blocks, chunks and GQA; a sequence alone gives the same bits", async () => {
      const rng = new Xoshiro128(31);
      for (let iter = 0; iter < 10; iter++) {
        const nKv = randInt(rng, 1, 2);
        const group = randInt(rng, 1, 3);
        const nHeads = nKv * group;
        // Head sizes past the 64 invocations of a workgroup exercise several elements each.
        const hd = iter % 3 === 0 ? randInt(rng, 65, 90) : randInt(rng, 1, 19);
        const bs = randInt(rng, 1, 6);
        const numBlocks = 24;
        const arena = numBlocks * nKv * bs * hd;
        const kv = { k: randomArray(rng, arena, 2), v: randomArray(rng, arena, 2) };
        const { seqs, T } = randomSequences(rng, randInt(rng, 1, 3), numBlocks, bs, 40);
        const qStride = nHeads * hd;
        const q = randomArray(rng, T * qStride, 2);

        const records = seqs.flatMap((s) => [s.start, s.count, s.ctx, wasmI32(s.table)]);
        const outAddr = mem.alloc(4 * T * qStride);
        const scratch = mem.alloc(attentionScratchBytes(6 * group, hd));
        k.pagedAttention(outAddr, wasmF32(q), wasmF32(kv.k), wasmF32(kv.v), wasmI32(records), nHeads, nKv, hd, bs, numBlocks, qStride, 0, 4 * hd, attentionScale(hd), 0, 0, scratch, 0, seqs.length * nKv);
        expect(records.length).toBe(seqs.length * SEQ_INFO_INTS);

        const kBuf = upload(kv.k), vBuf = upload(kv.v);
        const { info, tables } = gpuRecords(seqs);
        const out = gpu.f32Buffer(T * qStride, "out");
        const maxCount = Math.max(...seqs.map((s) => s.count));
        gpu.attention(out, upload(q), kBuf, vBuf, upload(info), upload(tables), seqs.length, maxCount, nHeads, nKv, hd, bs, numBlocks, qStride, T);
        const got = await run.readF32(out, T * qStride);
        const want = wasmRead(outAddr, T * qStride);
        for (let i = 0; i < got.length; i++) {
          if (!(Math.abs(got[i]! - want[i]!) <= 2e-5 * 2)) throw new Error(`iter ${iter} element ${i}: ${got[i]} vs ${want[i]}`);
        }

        for (const s of seqs) {
          const alone = gpuRecords([s], () => 0);
          const outAlone = gpu.f32Buffer(s.count * qStride, "alone");
          const qAlone = q.slice(s.start * qStride, (s.start + s.count) * qStride);
          gpu.attention(outAlone, upload(qAlone), kBuf, vBuf, upload(alone.info), upload(alone.tables), 1, s.count, nHeads, nKv, hd, bs, numBlocks, qStride, s.count);
          expect(await run.readF32(outAlone, s.count * qStride)).toEqual(got.slice(s.start * qStride, (s.start + s.count) * qStride));
        }
      }
    });

    test("a sliding window, a model's own scale and attention sinks: matches pagedAttention, and blocks before the window are never read", async () => {
      // Blocks wholly before every query's window point at a block of NaN: a read would show.
      const rng = new Xoshiro128(32);
      for (let iter = 0; iter < 8; iter++) {
        const nKv = randInt(rng, 1, 2), group = randInt(rng, 1, 3), nHeads = nKv * group;
        const hd = iter % 3 === 0 ? randInt(rng, 65, 90) : randInt(rng, 1, 19);
        const bs = randInt(rng, 1, 6);
        const window = randInt(rng, 1, 24);
        const numBlocks = 30;
        const freed = numBlocks - 1;
        const arena = numBlocks * nKv * bs * hd;
        const kv = { k: randomArray(rng, arena, 2), v: randomArray(rng, arena, 2) };
        for (const a of [kv.k, kv.v]) for (let h = 0; h < nKv; h++) a.fill(NaN, (h * numBlocks + freed) * bs * hd, (h * numBlocks + freed + 1) * bs * hd);
        const { seqs, T } = randomSequences(rng, randInt(rng, 1, 3), numBlocks - 1, bs, 60);
        for (const s of seqs) {
          const firstNeeded = Math.floor(Math.max(0, s.ctx - s.count - window + 1) / bs);
          for (let b = 0; b < firstNeeded; b++) s.table[b] = freed;
        }
        const qStride = nHeads * hd;
        const q = randomArray(rng, T * qStride, 2);
        const scores = { scale: Math.fround(1.3 / Math.sqrt(hd)), window };
        // gpt-oss's sinks (one logit per head) on every other case.
        const sinks = iter % 2 === 1 ? randomArray(rng, nHeads, 3) : null;
        const records = seqs.flatMap((s) => [s.start, s.count, s.ctx, wasmI32(s.table)]);
        const outAddr = mem.alloc(4 * T * qStride);
        const scratch = mem.alloc(attentionScratchBytes(6 * group, hd));
        k.pagedAttention(
          outAddr, wasmF32(q), wasmF32(kv.k), wasmF32(kv.v), wasmI32(records), nHeads, nKv, hd, bs, numBlocks, qStride, 0, 4 * hd, scores.scale, window,
          sinks === null ? 0 : wasmF32(sinks), scratch, 0, seqs.length * nKv,
        );
        const { info, tables } = gpuRecords(seqs);
        const out = gpu.f32Buffer(T * qStride, "out");
        const maxCount = Math.max(...seqs.map((s) => s.count));
        gpu.attention(
          out, upload(q), upload(kv.k), upload(kv.v), upload(info), upload(tables), seqs.length, maxCount, nHeads, nKv, hd, bs, numBlocks, qStride, T, undefined, scores,
          sinks === null ? null : upload(sinks),
        );
        const got = await run.readF32(out, T * qStride);
        const want = wasmRead(outAddr, T * qStride);
        for (let i = 0; i < got.length; i++) {
          if (!(Math.abs(got[i]! - want[i]!) <= 2e-5 * 2)) throw new Error(`iter ${iter} element ${i}: ${got[i]} vs ${want[i]}`);
        }
      }
    });

    for (const style of ["interleaved", "neox"] as const) {
      test(`ropeWriteKV (${style}) = the wasm RoPE on q and k, then the wasm writeKV: odd heads, partial rotary, GQA`, async () => {
        const rng = new Xoshiro128(style === "neox" ? 23 : 24);
        for (let iter = 0; iter < 6; iter++) {
          const headDim = 2 * randInt(rng, 1, 12);
          // Partial rotary on some iterations: the elements past ropeDim pass through.
          const ropeDim = iter % 2 === 0 ? headDim : 2 * randInt(rng, 1, headDim / 2);
          const nKv = randInt(rng, 1, 3);
          const nHeads = nKv * randInt(rng, 1, 3);
          const [qStride, kvStride] = [nHeads * headDim, nKv * headDim];
          const [T, bs, numBlocks, seqLen] = [randInt(rng, 1, 7), 3, 7, 32];
          const half = ropeDim / 2;
          const cos = new Float32Array(seqLen * half).map((_, i) => Math.cos(i * 0.37));
          const sin = new Float32Array(seqLen * half).map((_, i) => Math.sin(i * 0.37));
          const positions = new Int32Array(T).map(() => randInt(rng, 0, seqLen - 1));
          // Distinct slots in shuffled blocks.
          const slots = Int32Array.from(Array.from({ length: numBlocks * bs }, (_, i) => i).sort(() => rng.nextFloat() - 0.5).slice(0, T));
          const [q, kNew, vNew] = [randomArray(rng, T * qStride), randomArray(rng, T * kvStride), randomArray(rng, T * kvStride)];
          const arena = nKv * numBlocks * bs * headDim;

          const ropeWasm = style === "neox" ? k.ropeNeox : k.ropeInterleaved;
          const [qAddr, kAddr] = [wasmF32(q), wasmF32(kNew)];
          ropeWasm(qAddr, wasmI32(positions), T, nHeads, headDim, ropeDim, qStride, wasmF32(cos), wasmF32(sin));
          ropeWasm(kAddr, wasmI32(positions), T, nKv, headDim, ropeDim, kvStride, wasmF32(cos), wasmF32(sin));
          const kc = wasmF32(new Float32Array(arena)), vc = wasmF32(new Float32Array(arena));
          k.writeKV(kc, vc, kAddr, wasmF32(vNew), wasmI32(slots), T, nKv, headDim, bs, numBlocks, 0, 4 * headDim);

          const qBuf = upload(q);
          const kBuf = gpu.f32Buffer(arena, "k"), vBuf = gpu.f32Buffer(arena, "v");
          const table = new Float32Array(2 * seqLen * half);
          table.set(cos);
          table.set(sin, seqLen * half);
          gpu.ropeWriteKV(
            style,
            { q: qBuf, k: upload(kNew), v: upload(vNew), kArena: kBuf, vArena: vBuf, positions: upload(positions), slots: upload(slots), ropeTable: upload(table) },
            { T, nHeads, nKvHeads: nKv, headDim, ropeDim, qStride, kvStride, blockSize: bs, numBlocks, seqLen },
          );
          // Rotations: the same formula, but a GPU may fuse a multiply-add the wasm kernel rounds twice.
          const close = (got: Float32Array, want: Float32Array) => got.every((g, i) => Math.abs(g - want[i]!) <= 1e-6 * Math.max(1, Math.abs(want[i]!)));
          expect(close(await run.readF32(qBuf, T * qStride), wasmRead(qAddr, T * qStride))).toBe(true);
          expect(close(await run.readF32(kBuf, arena), wasmRead(kc, arena))).toBe(true);
          expect(await run.readF32(vBuf, arena)).toEqual(wasmRead(vc, arena));
        }
      });
    }

    for (const type of ["f16", "q8_0"] as const) {
      test(`${type} KV: ropeWriteKV stores the WebAssembly writer's rows, and attention over them matches the WebAssembly kernel`, async () => {
        const rng = new Xoshiro128(type === "f16" ? 41 : 42);
        const code = KV_TYPE_CODE[type];
        for (let iter = 0; iter < 6; iter++) {
          const style = iter % 2 === 0 ? "interleaved" : "neox";
          const headDim = type === "q8_0" ? 32 * randInt(rng, 1, 3) : 2 * randInt(rng, 1, 40);
          // Partial rotary on some iterations (an even number of rotated elements).
          const ropeDim = iter % 3 === 0 && headDim >= 4 ? 2 * Math.floor(headDim / 4) : headDim;
          const nKv = randInt(rng, 1, 2), group = randInt(rng, 1, 3), nHeads = nKv * group;
          const [qStride, kvStride] = [nHeads * headDim, nKv * headDim];
          const [bs, numBlocks, seqLen] = [randInt(rng, 1, 5), 12, 40];
          const rowBytes = kvRowBytes(type, headDim);
          const arenaBytes = nKv * numBlocks * bs * rowBytes;
          const half = ropeDim / 2;
          const table = new Float32Array(2 * seqLen * half);
          for (let i = 0; i < seqLen * half; i++) [table[i], table[seqLen * half + i]] = [Math.cos(i * 0.37), Math.sin(i * 0.37)];
          // One sequence whose whole context is this step's chunk, in shuffled blocks.
          const T = randInt(rng, 1, Math.min(seqLen, numBlocks * bs));
          const blocks = Array.from({ length: numBlocks }, (_, i) => i).sort(() => rng.nextFloat() - 0.5).slice(0, Math.ceil(T / bs));
          const positions = Int32Array.from({ length: T }, (_, t) => t);
          const slots = Int32Array.from({ length: T }, (_, t) => blocks[Math.floor(t / bs)]! * bs + (t % bs));
          const [q, kNew, vNew] = [randomArray(rng, T * qStride, 2), randomArray(rng, T * kvStride, 2), randomArray(rng, T * kvStride, 2)];

          const ropeWasm = style === "neox" ? k.ropeNeox : k.ropeInterleaved;
          const [qAddr, kAddr] = [wasmF32(q), wasmF32(kNew)];
          const [cosAddr, sinAddr] = [wasmF32(table.subarray(0, seqLen * half)), wasmF32(table.subarray(seqLen * half))];
          ropeWasm(qAddr, wasmI32(positions), T, nHeads, headDim, ropeDim, qStride, cosAddr, sinAddr);
          ropeWasm(kAddr, wasmI32(positions), T, nKv, headDim, ropeDim, kvStride, cosAddr, sinAddr);
          const kc = mem.alloc(arenaBytes), vc = mem.alloc(arenaBytes);
          mem.u8.fill(0, kc, kc + arenaBytes);
          mem.u8.fill(0, vc, vc + arenaBytes);
          k.writeKV(kc, vc, kAddr, wasmF32(vNew), wasmI32(slots), T, nKv, headDim, bs, numBlocks, code, rowBytes);

          const qBuf = upload(q);
          const kBuf = gpu.f32Buffer(arenaBytes / 4, "k"), vBuf = gpu.f32Buffer(arenaBytes / 4, "v");
          const layout = { type, rowBytes };
          gpu.ropeWriteKV(
            style,
            { q: qBuf, k: upload(kNew), v: upload(vNew), kArena: kBuf, vArena: vBuf, positions: upload(positions), slots: upload(slots), ropeTable: upload(table) },
            { T, nHeads, nKvHeads: nKv, headDim, ropeDim, qStride, kvStride, blockSize: bs, numBlocks, seqLen },
            layout,
          );
          // Both arenas widened to f32 by the WebAssembly reader. f16: v is the same bits (the same
          // rounding of the same values); k too up to a GPU's fused multiply-add in the rotation (an
          // ulp of the half). q8_0: WGSL's division is within 2.5 ulp, so a q may move by one step.
          const widen = async (buf: GPUBuffer, wasmArena: number) => {
            const at = mem.alloc(arenaBytes);
            mem.u8.set(new Uint8Array(await run.read(buf, arenaBytes)), at);
            const rows = arenaBytes / rowBytes;
            const gpuWide = mem.alloc(4 * rows * headDim), wasmWide = mem.alloc(4 * rows * headDim);
            for (let r = 0; r < rows; r++) {
              k.kvRowToF32Ref(gpuWide + 4 * r * headDim, at + r * rowBytes, headDim, code);
              k.kvRowToF32Ref(wasmWide + 4 * r * headDim, wasmArena + r * rowBytes, headDim, code);
            }
            return { bytes: mem.u8.slice(at, at + arenaBytes), wasmBytes: mem.u8.slice(wasmArena, wasmArena + arenaBytes), got: wasmRead(gpuWide, rows * headDim), want: wasmRead(wasmWide, rows * headDim) };
          };
          const step = type === "f16" ? 1e-3 : 2 / 127;
          for (const [buf, wasmArena] of [[kBuf, kc], [vBuf, vc]] as const) {
            const w = await widen(buf, wasmArena);
            if (type === "f16" && buf === vBuf) expect(w.bytes).toEqual(w.wasmBytes);
            w.got.forEach((g, i) => {
              if (!(Math.abs(g - w.want[i]!) <= step * Math.max(1, Math.abs(w.want[i]!)))) throw new Error(`iter ${iter} value ${i}: ${g} vs ${w.want[i]}`);
            });
          }

          // Attention over the WebAssembly-written arena on both backends.
          const records = [0, T, T, wasmI32(blocks)];
          const outAddr = mem.alloc(4 * T * qStride);
          k.pagedAttention(outAddr, qAddr, kc, vc, wasmI32(records), nHeads, nKv, headDim, bs, numBlocks, qStride, code, rowBytes, attentionScale(headDim), 0, 0, mem.alloc(attentionScratchBytes(T * group, headDim)), 0, nKv);
          const asWords = (addr: number) => new Int32Array(mem.u8.slice(addr, addr + arenaBytes).buffer);
          const out = gpu.f32Buffer(T * qStride, "out");
          const info = Int32Array.from([0, T, T, 0]);
          gpu.attention(out, upload(wasmRead(qAddr, T * qStride)), upload(asWords(kc)), upload(asWords(vc)), upload(info), upload(Int32Array.from(blocks)), 1, T, nHeads, nKv, headDim, bs, numBlocks, qStride, T, layout);
          const got = await run.readF32(out, T * qStride);
          const want = wasmRead(outAddr, T * qStride);
          got.forEach((g, i) => {
            if (!(Math.abs(g - want[i]!) <= 4e-5)) throw new Error(`iter ${iter} attention element ${i}: ${g} vs ${want[i]}`);
          });
        }
      }, 120_000);
    }
  });
}

await describeAttention();
