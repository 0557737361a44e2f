/**
 * Byte-level edits of a GGUF file's header, for crafting broken files from a good one: a metadata
 * value or a tensor's dims, type or offset rewritten in place (same byte length), found by walking
 * the header as the format defines it (independently of src/model/gguf.ts).
 */
const SCALAR_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;

export interface TensorRecord {
  name: string;
  /** Byte offsets of the record's fields in the file. */
  nDimsAt: number;
  dimsAt: number;
  typeAt: number;
  offsetAt: number;
  dims: bigint[];
}

export interface HeaderMap {
  tensorCountAt: number;
  /** Where each metadata value starts (after its type tag). */
  values: Map<string, { type: number; at: number }>;
  tensors: Map<string, TensorRecord>;
}

export function mapHeader(buf: Uint8Array): HeaderMap {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let pos = 8;
  const tensorCountAt = pos;
  const tensorCount = Number(view.getBigUint64(pos, true));
  const kvCount = Number(view.getBigUint64(pos + 8, true));
  pos += 16;
  const str = (): string => {
    const n = Number(view.getBigUint64(pos, true));
    const s = new TextDecoder().decode(buf.subarray(pos + 8, pos + 8 + n));
    pos += 8 + n;
    return s;
  };
  const skipValue = (type: number): void => {
    if (type === STRING) str();
    else if (type === ARRAY) {
      const itemType = view.getUint32(pos, true);
      const n = Number(view.getBigUint64(pos + 4, true));
      pos += 12;
      for (let i = 0; i < n; i++) skipValue(itemType);
    } else pos += SCALAR_BYTES[type]!;
  };
  const values = new Map<string, { type: number; at: number }>();
  for (let i = 0; i < kvCount; i++) {
    const key = str();
    const type = view.getUint32(pos, true);
    pos += 4;
    values.set(key, { type, at: pos });
    skipValue(type);
  }
  const tensors = new Map<string, TensorRecord>();
  for (let i = 0; i < tensorCount; i++) {
    const name = str();
    const nDimsAt = pos;
    const nDims = view.getUint32(pos, true);
    const dimsAt = pos + 4;
    const dims = Array.from({ length: nDims }, (_, d) => view.getBigUint64(dimsAt + 8 * d, true));
    const typeAt = dimsAt + 8 * nDims;
    const offsetAt = typeAt + 4;
    pos = offsetAt + 8;
    tensors.set(name, { name, nDimsAt, dimsAt, typeAt, offsetAt, dims });
  }
  return { tensorCountAt, values, tensors };
}

/** A copy of `buf` with `edit` applied through a DataView and the header map. */
export function patched(buf: Uint8Array, edit: (view: DataView, map: HeaderMap, bytes: Uint8Array) => void): Uint8Array {
  const copy = buf.slice();
  edit(new DataView(copy.buffer), mapHeader(copy), copy);
  return copy;
}

export function tensorRecord(map: HeaderMap, name: string): TensorRecord {
  const t = map.tensors.get(name);
  if (t === undefined) throw new Error(`no tensor ${name} in the file`);
  return t;
}

export function valueAt(map: HeaderMap, key: string): number {
  const v = map.values.get(key);
  if (v === undefined) throw new Error(`no key ${key} in the file`);
  return v.at;
}
