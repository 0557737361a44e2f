/**
 * One forward step's input, laid out in linear memory for the kernels: the new tokens of every
 * scheduled sequence, back to back, with their positions, one SEQ_INFO record per sequence (see
 * assembly/attention.ts) and the rows whose logits are wanted; and per KV cache group (kv-groups.ts:
 * one for most models) each token's KV slot, each sequence's block table and the records that
 * point at them: a layer reads its group's (LlamaModel: KVArena.groupOf).
 */

import { RequestTooLongError } from "../errors.ts";
import type { MultimodalItem } from "../kv/request.ts";

/** Ints per sequence record read by attention: queryStart, queryCount, contextLen, blockTable. */
export const SEQ_INFO_INTS = 4;

/** Bidirectional spans one step may hold besides its sequences: each takes up to two more attention records. */
export const MAX_STEP_SPANS = 32;

/** Attention records a batch of `maxSeqs` sequences holds: one per sequence, two more per bidirectional span. */
function recordsFor(maxSeqs: number): number {
  return maxSeqs + 2 * MAX_STEP_SPANS;
}

/**
 * Rows that stand in for a span of a prompt's tokens at the model's input (an image's embeddings,
 * from its encoder): the span's placeholder tokens keep their places (positions, KV slots,
 * block hashes, with the item's id as an extra key), but the layers start from these rows,
 * unscaled, instead of the tokens' embeddings. `bidirectional`: the span's tokens attend to each
 * other in both directions (Gemma 3's images), so a step must hold the span whole.
 */
export interface EmbeddedSpan extends MultimodalItem {
  /** length x the model's width values, row after row. */
  readonly rows: Float32Array;
  readonly bidirectional: boolean;
}

/** The part of a span that one step computes: its first token relative to the step's tokens of the sequence. */
export interface StepSpan {
  readonly start: number;
  readonly length: number;
  readonly rows: Float32Array;
  readonly bidirectional: boolean;
}

/**
 * The memory a batch lives in: the WebAssembly linear memory (LinearMemory), where the scheduler
 * writes it and both backends read it.
 */
export interface BatchMemory {
  /** Address of `bytes` fresh bytes, 64-byte aligned. */
  alloc(bytes: number): number;
  /** The memory as i32s (a view that may be replaced when the memory grows). */
  readonly i32: Int32Array;
}

export class StepBatch {
  readonly tokens: number; // i32 [maxTokens]
  readonly positions: number; // i32 [maxTokens]
  /** Group 0's slots and records (every layer's, for a model of one group): seqInfoOf(0), slotsOf(0). */
  readonly slots: number; // i32 [numGroups][maxTokens]: block * blockSize + row
  readonly seqInfo: number; // i32 [numGroups][maxRecords][SEQ_INFO_INTS]
  readonly blockTables: number; // i32 [numGroups][maxSeqs][maxBlocksPerSeq]
  readonly logitRows: number; // i32 [maxLogitRows]: batch rows whose logits are computed
  /** i32 [maxLogitRows]: batch rows whose normed hidden state is wanted without logits (an embedding's last token). */
  readonly hiddenRows: number;
  numTokens = 0;
  /** Attention records: one per sequence, more for a sequence with bidirectional spans (addSequence). */
  numSeqs = 0;
  /** Sequences added (each has a block table). */
  private numTables = 0;
  readonly maxRecords: number;
  numLogits = 0;
  numHidden = 0;
  /** Sum of the sequences' context lengths: the keys attention reads, per head. */
  contextTokens = 0;
  /** Rows that replace the token embeddings of batch rows row.. (EmbeddedSpan), in batch order. */
  inputRows: { row: number; rows: Float32Array }[] = [];

  constructor(
    private readonly mem: BatchMemory,
    readonly maxTokens: number,
    readonly maxSeqs: number,
    readonly maxBlocksPerSeq: number,
    readonly blockSize: number,
    /** Logit rows one step may ask for (one per sequence, unless whole chunks are scored), hidden rows included. */
    readonly maxLogitRows: number = maxSeqs,
    /** KV cache groups: a block table (and slots) per sequence for each. */
    readonly numGroups = 1,
  ) {
    this.tokens = mem.alloc(4 * maxTokens);
    this.positions = mem.alloc(4 * maxTokens);
    this.slots = mem.alloc(4 * numGroups * maxTokens);
    this.maxRecords = recordsFor(maxSeqs);
    this.seqInfo = mem.alloc(4 * numGroups * SEQ_INFO_INTS * this.maxRecords);
    this.blockTables = mem.alloc(4 * numGroups * maxSeqs * maxBlocksPerSeq);
    this.logitRows = mem.alloc(4 * maxLogitRows);
    this.hiddenRows = mem.alloc(4 * maxLogitRows);
  }

  /** Bytes a batch of these bounds takes in linear memory (each allocation aligned to 64 bytes). */
  static bytes(maxTokens: number, maxSeqs: number, maxBlocksPerSeq: number, maxLogitRows: number = maxSeqs, numGroups = 1): number {
    const ints = (2 + numGroups) * maxTokens + numGroups * (SEQ_INFO_INTS * recordsFor(maxSeqs) + maxSeqs * maxBlocksPerSeq) + 2 * maxLogitRows;
    return 4 * ints + 7 * 64;
  }

  /** Address of group g's sequence records (their blockTable fields point into group g's tables). */
  seqInfoOf(g: number): number {
    return this.seqInfo + 4 * g * SEQ_INFO_INTS * this.maxRecords;
  }

  /** Address of group g's KV slot of every token. */
  slotsOf(g: number): number {
    return this.slots + 4 * g * this.maxTokens;
  }

  /** Address of group g's block tables. */
  private tablesOf(g: number): number {
    return this.blockTables + 4 * g * this.maxSeqs * this.maxBlocksPerSeq;
  }

  /**
   * Copy this step into `dst`, a batch of the same bounds in another memory (a model placed over
   * several memories: each runs its layers from its own copy). Only what the step uses is copied;
   * each sequence's block-table address is rebased to dst's tables.
   */
  copyTo(dst: StepBatch): void {
    if (dst.maxTokens !== this.maxTokens || dst.maxSeqs !== this.maxSeqs || dst.maxBlocksPerSeq !== this.maxBlocksPerSeq ||
      dst.maxLogitRows !== this.maxLogitRows || dst.blockSize !== this.blockSize || dst.numGroups !== this.numGroups) {
      throw new Error("StepBatch.copyTo: batches of different bounds");
    }
    const from = this.mem.i32;
    const to = dst.mem.i32;
    const copy = (src: number, at: number, n: number) => to.set(from.subarray(src >>> 2, (src >>> 2) + n), at >>> 2);
    copy(this.tokens, dst.tokens, this.numTokens);
    copy(this.positions, dst.positions, this.numTokens);
    copy(this.logitRows, dst.logitRows, this.numLogits);
    copy(this.hiddenRows, dst.hiddenRows, this.numHidden);
    for (let g = 0; g < this.numGroups; g++) {
      copy(this.slotsOf(g), dst.slotsOf(g), this.numTokens);
      for (let s = 0; s < this.numSeqs; s++) {
        const info = (this.seqInfoOf(g) >>> 2) + s * SEQ_INFO_INTS;
        const out = (dst.seqInfoOf(g) >>> 2) + s * SEQ_INFO_INTS;
        for (let i = 0; i < SEQ_INFO_INTS; i++) to[out + i] = from[info + i]!;
        // Addresses past 2 GiB are stored wrapped in the i32 field: read them back as unsigned.
        const table = from[info + 3]! >>> 0;
        const rebased = table - this.blockTables + dst.blockTables;
        to[out + 3] = rebased;
        copy(table, rebased, Math.ceil(from[info + 2]! / this.blockSize));
      }
    }
    dst.numTokens = this.numTokens;
    dst.numSeqs = this.numSeqs;
    dst.numTables = this.numTables;
    dst.numLogits = this.numLogits;
    dst.numHidden = this.numHidden;
    dst.contextTokens = this.contextTokens;
    dst.inputRows = this.inputRows;
  }

  reset(): void {
    this.numTokens = 0;
    this.numSeqs = 0;
    this.numTables = 0;
    this.numLogits = 0;
    this.numHidden = 0;
    this.contextTokens = 0;
    this.inputRows = [];
  }

  /**
   * Append a sequence's new tokens, which occupy positions startPos.. in the sequence whose KV
   * blocks are `blockTables` (one per KV cache group, in token order; a sliding window's skipped
   * entries are never read). `logits` says which of its new tokens get logits: none, its last
   * (a decode, or the end of a prompt), all (scoring a whole chunk), or its last `logits` (a
   * number: the last known token and the draft tokens after it, when speculating), or "hidden":
   * no logits, the normed hidden state of its last token (an embedding). Returns the logits row of
   * its first such token (the hidden row, for "hidden"), or -1; the others follow it in order.
   * `spans` (in order, inside the new tokens) replace their tokens' input rows; a bidirectional
   * one becomes an attention record of its own between causal ones (assembly/attention.ts).
   */
  addSequence(
    newTokens: ArrayLike<number>, startPos: number, blockTables: readonly ArrayLike<number>[], logits: "none" | "last" | "all" | "hidden" | number,
    spans: readonly StepSpan[] = [],
  ): number {
    const n = newTokens.length;
    if (n === 0) throw new Error("StepBatch.addSequence: no tokens");
    const records = attentionRecords(n, spans);
    if (this.numTokens + n > this.maxTokens || this.numTables >= this.maxSeqs || this.numSeqs + records.length > this.maxRecords) {
      throw new Error("StepBatch: batch is full");
    }
    if (blockTables.length !== this.numGroups) throw new Error(`StepBatch: ${blockTables.length} block tables for ${this.numGroups} KV cache groups`);
    const contextLen = startPos + n;
    const needBlocks = Math.ceil(contextLen / this.blockSize);
    for (const table of blockTables) {
      if (table.length < needBlocks || needBlocks > this.maxBlocksPerSeq) {
        throw new Error(`StepBatch: ${table.length} blocks cannot hold ${contextLen} tokens`);
      }
    }
    const i32 = this.mem.i32;
    const t0 = this.numTokens;
    const s = this.numSeqs;
    const tableSlot = this.numTables;
    for (let i = 0; i < n; i++) {
      i32[(this.tokens >>> 2) + t0 + i] = newTokens[i]!;
      i32[(this.positions >>> 2) + t0 + i] = startPos + i;
    }
    blockTables.forEach((blockTable, g) => {
      for (let i = 0; i < n; i++) {
        const pos = startPos + i;
        const block = blockTable[Math.floor(pos / this.blockSize)]!;
        i32[(this.slotsOf(g) >>> 2) + t0 + i] = block * this.blockSize + (pos % this.blockSize);
      }
      const table = this.tablesOf(g) + 4 * tableSlot * this.maxBlocksPerSeq;
      for (let b = 0; b < needBlocks; b++) i32[(table >>> 2) + b] = blockTable[b]!;
      // The records of one sequence share its table.
      records.forEach(([from, count, both], r) => {
        const info = (this.seqInfoOf(g) >>> 2) + (s + r) * SEQ_INFO_INTS;
        i32[info] = t0 + from;
        i32[info + 1] = both ? -count : count;
        i32[info + 2] = startPos + from + count;
        i32[info + 3] = table;
      });
    });
    for (const span of spans) this.inputRows.push({ row: t0 + span.start, rows: span.rows });
    this.numTokens += n;
    this.numSeqs += records.length;
    this.numTables += 1;
    this.contextTokens += records.reduce((sum, [from, count]) => sum + startPos + from + count, 0);
    if (logits === "hidden") return this.addHiddenRow(t0 + n - 1);
    const count = logits === "none" ? 0 : logits === "last" ? 1 : logits === "all" ? n : logits;
    if (!Number.isInteger(count) || count < 0 || count > n) throw new Error(`StepBatch: ${count} logit rows for ${n} tokens`);
    if (count === 0) return -1;
    const first = this.numLogits;
    const from = n - count;
    if (first + this.numHidden + n - from > this.maxLogitRows) throw new Error("StepBatch: too many logit rows");
    for (let i = from; i < n; i++) i32[(this.logitRows >>> 2) + this.numLogits++] = t0 + i;
    return first;
  }

  /** Batch row `row` as the next hidden row; returns its index. */
  private addHiddenRow(row: number): number {
    if (this.numLogits + this.numHidden >= this.maxLogitRows) throw new Error("StepBatch: too many logit rows");
    this.mem.i32[(this.hiddenRows >>> 2) + this.numHidden] = row;
    return this.numHidden++;
  }
}

/**
 * A sequence's attention records for `n` new tokens: [first, count, bidirectional], one causal
 * record for all of them unless a span is bidirectional, which then gets a record of its own
 * between the causal ones before and after it.
 */
function attentionRecords(n: number, spans: readonly StepSpan[]): [number, number, boolean][] {
  const records: [number, number, boolean][] = [];
  let at = 0;
  let end = 0;
  for (const span of spans) {
    if (span.start < end || span.length < 1 || span.start + span.length > n) throw new Error("StepBatch: spans must be in order, inside the new tokens");
    end = span.start + span.length;
    if (!span.bidirectional) continue;
    if (span.start > at) records.push([at, span.start - at, false]);
    records.push([span.start, span.length, true]);
    at = span.start + span.length;
  }
  if (at < n) records.push([at, n - at, false]);
  return records;
}

/**
 * Where a chunk from `start` ends, at most at `end`, so that it cuts no bidirectional span (its
 * tokens must see each other in one step): before a span it would cut, or, for a span begun at or
 * before `start` (its start cached), at the span's end when that is within `limit` tokens of
 * `start` (else `start`: nothing this step). RequestTooLongError when a span alone exceeds `limit`.
 */
export function spanChunkEnd(start: number, end: number, embeds: readonly MultimodalItem[], limit = end - start, refuse = true): number {
  for (const e of embeds) {
    const spanEnd = e.offset + e.length;
    if (e.bidirectional !== true || spanEnd <= end || e.offset >= end || spanEnd <= start) continue;
    if (e.offset > start) return e.offset;
    if (refuse && e.length > limit && e.offset === start) {
      throw new RequestTooLongError(`an image of ${e.length} tokens does not fit one step of ${limit} tokens (a larger --batch-size)`, "prompt");
    }
    return spanEnd - start <= limit ? spanEnd : start;
  }
  return end;
}

/** The parts of the items' input rows (EmbeddedSpan) inside the tokens [start, end), relative to start. */
export function stepSpans(embeds: readonly MultimodalItem[], start: number, end: number): StepSpan[] {
  const out: StepSpan[] = [];
  for (const e of embeds) {
    if (e.rows === undefined) continue;
    const from = Math.max(start, e.offset);
    const to = Math.min(end, e.offset + e.length);
    if (from >= to) continue;
    const width = e.rows.length / e.length;
    out.push({ start: from - start, length: to - from, rows: e.rows.subarray((from - e.offset) * width, (to - e.offset) * width), bidirectional: e.bidirectional === true });
  }
  return out;
}
