/**
 * The fingerprint of a model and its KV layout: part of every disk block's key, so that another
 * model, another quantization of it, another block size or KV type never reads a block not made for
 * it.
 *
 * model fingerprint = sha256 of: a version tag, the file's format and size, the model config, the
 * tensor table (name, shape, encoding, offset, length of every tensor, in name order), the file's
 * header bytes (everything before the first tensor: GGUF metadata with the vocabulary, or the
 * llama2.c header), and SAMPLE_COUNT slices of SAMPLE_BYTES spread over the tensor data. The
 * samples tell apart files whose headers match but whose weights differ (two random-weight models
 * of one shape, a fine-tune saved with the same metadata); reading them costs a few small reads.
 *
 * layout fingerprint = sha256 of the KV layout (kv-layout.ts: KV type, block size, layers, KV
 * heads, head size, bytes per block) and of the backend that computes the KV (WebAssembly, or
 * WebGPU with its product arithmetic: their K and V bits differ, and a disk hit must give the bits
 * a recomputation would).
 *
 * A model with sliding-window layers keeps each KV cache group's blocks apart (kv-groups.ts): group
 * g > 0's files carry sha256(full fingerprint, g) instead of the full fingerprint, so a block of one
 * group put under another group's name (same hash, tokens and size) fails the fingerprint check.
 * Group 0's files, and so every file of a model with one group, carry the full fingerprint.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import type { Checkpoint } from "../model/checkpoint.ts";
import type { KVLayout } from "../kv/kv-layout.ts";
import type { ModelConfig } from "../model/config.ts";

const SAMPLE_COUNT = 16;
const SAMPLE_BYTES = 4096;
/** Header bytes hashed at most (a GGUF header with a 256k vocabulary is ~10 MB). */
const MAX_HEADER_BYTES = 64 << 20;

export interface KVFingerprint {
  /** sha256 of the model (see the file comment). */
  readonly model: Uint8Array;
  /** sha256 of the KV layout. */
  readonly layout: Uint8Array;
  /** sha256 of both: the bytes every block file carries. */
  readonly full: Uint8Array;
  /** Folder name of this model and layout under the cache root: 16 hex of the model, "-", 8 of the layout. */
  readonly folder: string;
}

/** Fingerprint of a checkpoint's model; reads its header and samples of its tensor data. */
export function modelFingerprint(checkpoint: Checkpoint): Uint8Array {
  const hasher = new Bun.CryptoHasher("sha256");
  const fd = openSync(checkpoint.file, "r");
  try {
    const size = fstatSync(fd).size;
    const tensors = [...checkpoint.tensors.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    hasher.update(JSON.stringify({
      tag: "pagellm/kv-disk/model/v1",
      format: checkpoint.format,
      size,
      config: sortedJson(checkpoint.config),
      tensors: tensors.map((t) => [t.name, t.shape, t.encoding, t.offset, t.byteLength]),
    }));
    const dataStart = tensors.reduce((min, t) => Math.min(min, t.offset), size);
    hasher.update(readAt(fd, 0, Math.min(dataStart, MAX_HEADER_BYTES)));
    const span = size - dataStart;
    for (let i = 0; i < SAMPLE_COUNT && span > 0; i++) {
      const at = dataStart + Math.floor((i * Math.max(0, span - SAMPLE_BYTES)) / Math.max(1, SAMPLE_COUNT - 1));
      hasher.update(readAt(fd, at, Math.min(SAMPLE_BYTES, size - at)));
    }
  } finally {
    closeSync(fd);
  }
  return new Uint8Array(hasher.digest());
}

/** The fingerprint of a model (modelFingerprint) run with a KV layout on the backend `kvProducer`. */
export function kvFingerprint(model: Uint8Array, layout: KVLayout, config: ModelConfig, kvProducer: string): KVFingerprint {
  const shape = { nLayers: config.nLayers, nKvHeads: config.nKvHeads, headDim: config.headDim, kvProducer };
  const layoutHash = new Bun.CryptoHasher("sha256").update(JSON.stringify({ tag: "pagellm/kv-disk/layout/v1", ...layout, ...shape })).digest();
  const full = new Bun.CryptoHasher("sha256").update(model).update(layoutHash).digest();
  const hex = (b: Uint8Array | Buffer, n: number) => Buffer.from(b).toString("hex").slice(0, n);
  return {
    model, layout: new Uint8Array(layoutHash), full: new Uint8Array(full),
    folder: `${hex(model, 16)}-${hex(layoutHash, 8)}`,
  };
}

function readAt(fd: number, at: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, length - done, at + done);
    if (n === 0) break;
    done += n;
  }
  return out.subarray(0, done);
}

/** A plain object with its keys sorted at every level, so equal configs hash equally. */
function sortedJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedJson);
  if (value === null || typeof value !== "object") return value;
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([k, v]) => [k, sortedJson(v)]));
}

/** The fingerprint block files of KV cache group `group` carry (see the file comment). */
export function groupFingerprint(full: Uint8Array, group: number): Uint8Array {
  if (group === 0) return full;
  return new Uint8Array(new Bun.CryptoHasher("sha256").update(full).update(`pagellm/kv-disk/group/${group}`).digest());
}
