/**
 * Reads an all-F32 GGUF model into the float64 reference's weight layout ([L][rows][cols] stacked
 * per kind), taking offsets from the checkpoint's tensor table and the bytes straight from the file:
 * no linear memory, no packing, nothing of the engine's loading path.
 */
import { readFileSync } from "node:fs";
import { TensorName, type Checkpoint } from "../../src/model/checkpoint.ts";
import type { Llama2cWeights } from "../../src/synth/llama2c-writer.ts";
import type { ReferenceExtras } from "./forward-f64.ts";

export function readGGUFF32Weights(ckpt: Checkpoint): { weights: Llama2cWeights; extras: ReferenceExtras } {
  const file = readFileSync(ckpt.file);
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const tensor = (name: string): Float32Array => {
    const t = ckpt.tensors.get(name);
    if (t === undefined) throw new Error(`reference: missing ${name}`);
    if (t.encoding.kind !== "f32") throw new Error(`reference: ${name} is not F32`);
    const out = new Float32Array(t.byteLength / 4);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(t.offset + 4 * i, true);
    return out;
  };
  const perLayer = (name: (l: number) => string): Float32Array => {
    const parts = Array.from({ length: ckpt.config.nLayers }, (_, l) => tensor(name(l)));
    const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  };
  const c = ckpt.config;
  const dense = c.experts === undefined;
  const none = new Float32Array(0);
  const weights: Llama2cWeights = {
    tokenEmbedding: tensor(TensorName.tokenEmbedding),
    rmsAtt: perLayer(TensorName.attnNorm),
    wq: perLayer(TensorName.attnQ),
    wk: perLayer(TensorName.attnK),
    wv: perLayer(TensorName.attnV),
    wo: perLayer(TensorName.attnOutput),
    rmsFfn: perLayer(TensorName.ffnNorm),
    w1: dense ? perLayer(TensorName.ffnGate) : none,
    w2: dense ? perLayer(TensorName.ffnDown) : none,
    w3: dense ? perLayer(TensorName.ffnUp) : none,
    rmsFinal: tensor(TensorName.outputNorm),
    wcls: c.sharedClassifier ? null : tensor(TensorName.output),
  };
  const extras: ReferenceExtras = {
    ...(c.qkvBias ? { bq: perLayer(TensorName.attnQBias), bk: perLayer(TensorName.attnKBias), bv: perLayer(TensorName.attnVBias) } : {}),
    ...(c.qkNorm ? { qNorm: perLayer(TensorName.attnQNorm), kNorm: perLayer(TensorName.attnKNorm) } : {}),
    ...(dense
      ? {}
      : {
          experts: {
            router: perLayer(TensorName.ffnRouter), gate: perLayer(TensorName.ffnGateExperts),
            up: perLayer(TensorName.ffnUpExperts), down: perLayer(TensorName.ffnDownExperts),
          },
        }),
  };
  return { weights, extras };
}
