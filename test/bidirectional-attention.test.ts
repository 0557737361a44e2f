/**
 * pagedAttention's bidirectional records (a negative query count: an image's tokens in Gemma 3,
 * which attend to each other both ways): against plain softmax attention where each query of the
 * span sees every key up to the span's end (from its own window's first key on local layers),
 * the tokens before and after the span staying causal; and the same bits whatever the block size
 * and whether the tokens before the span came in the same step or an earlier one.
 */
import { expect, test } from "bun:test";
import { CpuBackend } from "../src/backend/wasm/cpu.ts";
import { attentionScratchBytes } from "../src/backend/wasm/kernels.ts";
import { Xoshiro128 } from "../src/util/random.ts";
import { KernelRegion } from "./helpers/wasm-scratch.ts";
import { randInt, randomArray } from "./helpers/random-data.ts";

const be = new CpuBackend();
const k = be.kernels;
const region = new KernelRegion(be.mem, 8 << 20);

test("a bidirectional span sees its later keys, the rest stays causal, windows hold, and the bits do not depend on the block size or the step", () => {
  const rng = new Xoshiro128(29);
  for (let iter = 0; iter < 80; iter++) {
    const s = region.scratch();
    const nKv = randInt(rng, 1, 2), group = randInt(rng, 1, 3), nHeads = nKv * group;
    const hd = randInt(rng, 1, 37);
    const window = iter % 2 === 0 ? 0 : randInt(rng, 1, 40);
    const ctx = randInt(rng, 3, 90);
    const count = randInt(rng, 3, Math.min(ctx, 40));
    const firstPos = ctx - count;
    // The step's queries: `before` causal ones, then the span, then causal ones after it.
    const before = randInt(rng, 0, count - 2);
    const span = randInt(rng, 1, count - before - 1);
    const spanEnd = firstPos + before + span;
    const keys = randomArray(rng, ctx * nKv * hd, 2), values = randomArray(rng, ctx * nKv * hd, 2);
    const qStride = nHeads * hd;
    const q = randomArray(rng, count * qStride, 2);
    const scale = Math.fround(1 / Math.sqrt(hd));
    const runs: Float32Array[] = [];
    for (const bs of [1, 7, 16]) {
      const nBlocks = Math.ceil(ctx / bs);
      const table = Array.from({ length: nBlocks }, (_, i) => i).sort(() => rng.nextFloat() - 0.5);
      const kc = s.alloc(4 * nBlocks * nKv * bs * hd), vc = s.alloc(4 * nBlocks * nKv * bs * hd);
      for (let p = 0; p < ctx; p++) {
        for (let h = 0; h < nKv; h++) {
          const at = 4 * ((h * nBlocks + table[Math.floor(p / bs)]!) * bs + (p % bs)) * hd;
          k.storeKVRow(kc + at, s.f32(keys.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd)), hd, 0);
          k.storeKVRow(vc + at, s.f32(values.subarray((p * nKv + h) * hd, (p * nKv + h + 1) * hd)), hd, 0);
        }
      }
      const tableAddr = s.i32(table);
      // Records: [queryStart, queryCount, contextLen, table]; the span's count negative.
      const whole = [0, before, firstPos + before, tableAddr, before, -span, spanEnd, tableAddr, before + span, count - before - span, ctx, tableAddr]
        .slice(before === 0 ? 4 : 0);
      // The same, with the tokens before the span computed in a step of their own.
      const split = [[0, before, firstPos + before, tableAddr], [0, -span, spanEnd, tableAddr, span, count - before - span, ctx, tableAddr]];
      const outs: Float32Array[] = [];
      for (const steps of [[whole], before === 0 ? [whole] : split]) {
        const out = new Float32Array(count * qStride);
        let done = 0;
        for (const records of steps) {
          const numRecords = records.length / 4;
          const n = records.filter((_, i) => i % 4 === 1).reduce((a, c) => a + Math.abs(c), 0);
          const o = s.alloc(4 * n * qStride);
          const scratch = s.alloc(attentionScratchBytes(n * group, hd));
          k.pagedAttention(o, s.f32(q.subarray(done * qStride, (done + n) * qStride)), kc, vc, s.i32(records), nHeads, nKv, hd, bs, nBlocks, qStride, 0, 4 * hd, scale, window, 0, scratch, 0, numRecords * nKv);
          out.set(region.readF32(o, n * qStride), done * qStride);
          done += n;
        }
        outs.push(out);
      }
      expect(outs[1]!).toEqual(outs[0]!);
      runs.push(outs[0]!);
    }
    for (const r of runs) expect(r).toEqual(runs[0]!);
    const got = runs[0]!;
    for (let i = 0; i < count; i++) {
      const pos = firstPos + i;
      const inSpan = i >= before && i < before + span;
      const lo = window > 0 ? Math.max(0, pos - window + 1) : 0;
      const hi = inSpan ? spanEnd - 1 : pos;
      for (let h = 0; h < nHeads; h++) {
        const row = (p: number) => (p * nKv + Math.floor(h / group)) * hd;
        const scores: number[] = [];
        for (let p = lo; p <= hi; p++) {
          let dot = 0;
          for (let j = 0; j < hd; j++) dot += q[i * qStride + h * hd + j]! * keys[row(p) + j]!;
          scores.push(dot * scale);
        }
        const m = Math.max(...scores);
        const e = scores.map((v) => Math.exp(v - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j < hd; j++) {
          let want = 0;
          for (let p = lo; p <= hi; p++) want += (e[p - lo]! / z) * values[row(p) + j]!;
          expect(Math.abs(got[i * qStride + h * hd + j]! - want)).toBeLessThan(2e-5 * Math.max(1, Math.abs(want)));
        }
      }
    }
  }
});
