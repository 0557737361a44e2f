// ============================================================================================
// Paged KV cache: writing new keys/values, and attention that walks block tables
// ============================================================================================
//
// The K and V arenas of one layer are [block][kvHead][blockSize][headDim] floats. A sequence's
// block table lists its physical block ids in logical order: token at position p lives in block
// table[p / blockSize], row p % blockSize.
//
// A batch describes each sequence with four i32 (SEQ_INFO_INTS):
//   queryStart   index of its first new token in the batch (rows of q and out)
//   queryCount   number of new tokens (1 for decode, a chunk for prefill)
//   contextLen   tokens in the cache once this step's keys are written (last position + 1)
//   blockTable   address of its i32 block table

export const SEQ_INFO_INTS: i32 = 4;

/** Scatter this step's keys and values into their cache slots (slot = block * blockSize + row). */
export function writeKV(
  kLayer: usize, vLayer: usize, k: usize, v: usize, slots: usize,
  T: i32, nKvHeads: i32, headDim: i32, blockSize: i32,
): void {
  const headBytes = <usize>headDim << 2;
  const kvDim = nKvHeads * headDim;
  for (let t = 0; t < T; t++) {
    const slot = load<i32>(slots + (<usize>t << 2));
    const block = slot / blockSize;
    const row = slot - block * blockSize;
    for (let h = 0; h < nKvHeads; h++) {
      const dst = <usize>((block * nKvHeads + h) * blockSize + row) * headBytes;
      const src = <usize>(t * kvDim + h * headDim) << 2;
      memory.copy(kLayer + dst, k + src, headBytes);
      memory.copy(vLayer + dst, v + src, headBytes);
    }
  }
}

@inline function dot(a: usize, b: usize, n: i32): f32 {
  const n4 = n & ~3;
  let acc = f32x4.splat(0);
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    acc = f32x4.add(acc, f32x4.mul(v128.load(a + o), v128.load(b + o)));
  }
  let s = (f32x4.extract_lane(acc, 0) + f32x4.extract_lane(acc, 1)) + (f32x4.extract_lane(acc, 2) + f32x4.extract_lane(acc, 3));
  for (let j = n4; j < n; j++) s += load<f32>(a + (<usize>j << 2)) * load<f32>(b + (<usize>j << 2));
  return s;
}

/** acc = acc * scale + p * v over n floats (SIMD body, scalar tail). */
@inline function scaleAndAccumulate(acc: usize, scale: f32, p: f32, v: usize, n: i32): void {
  const n4 = n & ~3;
  const vs = f32x4.splat(scale), vp = f32x4.splat(p);
  for (let j = 0; j < n4; j += 4) {
    const o = <usize>j << 2;
    v128.store(acc + o, f32x4.add(f32x4.mul(v128.load(acc + o), vs), f32x4.mul(vp, v128.load(v + o))));
  }
  for (let j = n4; j < n; j++) {
    const o = <usize>j << 2;
    store<f32>(acc + o, load<f32>(acc + o) * scale + p * load<f32>(v + o));
  }
}

/**
 * One query head at position pos against keys 0..pos of one kv head, by online softmax:
 * per block, scores s_j; running max m, running sum l and accumulator rescaled by exp(m_old - m_new).
 * scores: scratch of blockSize floats; result written to out[headDim].
 */
function attendOne(
  out: usize, q: usize, kLayer: usize, vLayer: usize, table: usize, pos: i32,
  kvHead: i32, nKvHeads: i32, headDim: i32, blockSize: i32, scores: usize,
): void {
  const headBytes = <usize>headDim << 2;
  const blockBytes = <usize>(nKvHeads * blockSize) * headBytes;
  const invSqrt: f32 = 1.0 / Mathf.sqrt(<f32>headDim);
  memory.fill(out, 0, headBytes);
  let m: f32 = -Infinity;
  let l: f32 = 0;
  const nBlocks = pos / blockSize + 1;
  for (let b = 0; b < nBlocks; b++) {
    const block = load<i32>(table + (<usize>b << 2));
    const base = <usize>block * blockBytes + <usize>(kvHead * blockSize) * headBytes;
    const n = min(blockSize, pos + 1 - b * blockSize);
    let blockMax: f32 = -Infinity;
    for (let j = 0; j < n; j++) {
      const s = dot(q, kLayer + base + <usize>j * headBytes, headDim) * invSqrt;
      store<f32>(scores + (<usize>j << 2), s);
      blockMax = max(blockMax, s);
    }
    const mNew = max(m, blockMax);
    // exp(-inf) = 0 on the first block: the empty accumulator is scaled to zero, as it should be.
    const alpha = Mathf.exp(m - mNew);
    l *= alpha;
    for (let j = 0; j < n; j++) {
      const p = Mathf.exp(load<f32>(scores + (<usize>j << 2)) - mNew);
      l += p;
      scaleAndAccumulate(out, j == 0 ? alpha : <f32>1.0, p, vLayer + base + <usize>j * headBytes, headDim);
    }
    m = mNew;
  }
  const inv: f32 = 1.0 / l;
  for (let j = 0; j < headDim; j++) {
    const o = out + (<usize>j << 2);
    store<f32>(o, load<f32>(o) * inv);
  }
}

/**
 * Attention for every new token of every sequence in the batch, with the causal mask: the token
 * at position p sees keys 0..p, which includes the earlier tokens of its own chunk (their keys
 * were written by writeKV before this call). Query head h reads kv head h / (nHeads / nKvHeads).
 *
 * Work items are (sequence, kv head) pairs, item = seq * nKvHeads + kvHead; a thread computes
 * items [itemStart, itemEnd) and every output element is computed by exactly one item.
 * q and out are [T][qStride] floats; scratch holds blockSize floats for this thread.
 */
export function pagedAttention(
  out: usize, q: usize, kLayer: usize, vLayer: usize, seqInfo: usize,
  nHeads: i32, nKvHeads: i32, headDim: i32, blockSize: i32, qStride: i32,
  scratch: usize, itemStart: i32, itemEnd: i32,
): void {
  const group = nHeads / nKvHeads;
  for (let item = itemStart; item < itemEnd; item++) {
    const seq = item / nKvHeads;
    const kvHead = item - seq * nKvHeads;
    const info = seqInfo + (<usize>(seq * SEQ_INFO_INTS) << 2);
    const queryStart = load<i32>(info);
    const queryCount = load<i32>(info, 4);
    const contextLen = load<i32>(info, 8);
    const table = <usize>load<i32>(info, 12);
    for (let i = 0; i < queryCount; i++) {
      const t = queryStart + i;
      const pos = contextLen - queryCount + i;
      for (let h = kvHead * group; h < (kvHead + 1) * group; h++) {
        const off = <usize>(t * qStride + h * headDim) << 2;
        attendOne(out + off, q + off, kLayer, vLayer, table, pos, kvHead, nKvHeads, headDim, blockSize, scratch);
      }
    }
  }
}
