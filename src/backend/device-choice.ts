/**
 * Which backend runs a model (--device auto | wasm | webgpu): the adapter rules of
 * webgpu/device.ts (auto takes only a hardware adapter, webgpu insists and accepts a software one)
 * plus what the model needs: a checkpoint WebGPU cannot run is refused up front in one line, before
 * any weight is read, naming what is missing and `--device wasm`.
 */
import { DeviceError } from "../errors.ts";
import { TensorName, type Checkpoint } from "../model/checkpoint.ts";
import { GGML_TYPES } from "../model/gguf.ts";
import { EncoderTensor, type EncoderCheckpoint } from "../model/encoder.ts";
import { encoderShapeRefusal } from "./webgpu/encoder-gpu.ts";
import { WebGpuBackend, type BackendOptions } from "./webgpu/backend.ts";
import { selectDevice, type DeviceChoice } from "./webgpu/device.ts";
import { MAX_HEAD_DIM } from "./webgpu/wgsl-attention.ts";
import { GGML_SHADERS } from "./webgpu/wgsl-matmul.ts";

/** ggml's F32 type code: products read it as plain f32 rows. */
const GGML_F32 = 0;

/** Why `ckpt` cannot run on WebGPU (one line), or null when it can. */
export function webgpuRefusal(ckpt: Checkpoint): string | null {
  const c = ckpt.config;
  const numerics = c.numerics ?? "default";
  if (numerics !== "default") return `${ckpt.file}: ${numerics} numerics run on WebAssembly only`;
  if (c.headDim > MAX_HEAD_DIM) return `${ckpt.file}: head dimension ${c.headDim} exceeds the WGSL attention's ${MAX_HEAD_DIM}`;
  for (const t of ckpt.tensors.values()) {
    // A ggml embedding table is looked up on the host, by the WebAssembly kernel; only a shared classifier multiplies it.
    if (t.shape.length < 2 || (t.name === TensorName.tokenEmbedding && !c.sharedClassifier)) continue;
    const e = t.encoding;
    if (e.kind === "q8-llama2c") return `${ckpt.file}: tensor ${t.name} is llama2.c int8 (q8), which has no WGSL kernel`;
    if (e.kind === "ggml" && e.type !== GGML_F32 && !GGML_SHADERS.has(e.type)) {
      return `${ckpt.file}: tensor ${t.name} has type ${GGML_TYPES.get(e.type)?.name ?? e.type}, which has no WGSL kernel`;
    }
  }
  return null;
}

/** The ggml types of a mixture of experts' expert stacks (0: F32), whose WGSL products WebGpuBackend.prepareExperts compiles; none for a dense model. */
export function expertTypes(ckpt: Checkpoint): number[] {
  const types = new Set<number>();
  for (const t of ckpt.tensors.values()) if (t.shape.length === 3) types.add(t.encoding.kind === "ggml" ? t.encoding.type : GGML_F32);
  return [...types];
}

/** The backend chosen: a WebGPU backend, or null for WebAssembly; and one line saying which and why. */
export interface ChosenDevice {
  gpu: WebGpuBackend | null;
  reason: string;
}

/**
 * Choose the backend for `ckpt`. "wasm" never touches WebGPU; "webgpu" throws DeviceError (exit
 * code 2) when no adapter works or the model needs what WGSL lacks; "auto" falls back to wasm in
 * both cases, saying why. The reason names the products' arithmetic on WebGPU.
 */
export async function chooseDevice(choice: DeviceChoice, ckpt: Checkpoint, gpuOptions: BackendOptions = {}): Promise<ChosenDevice> {
  const refusal = choice === "wasm" ? null : webgpuRefusal(ckpt);
  return chooseBackend(choice, refusal, gpuOptions, async (gpu) => {
    if (ckpt.config.experts !== undefined) await gpu.prepareExperts(expertTypes(ckpt));
  });
}

/**
 * Why the encoder `ckpt` cannot run on WebGPU (one line), or null when it can: its shape
 * (encoderShapeRefusal) and its matrices' types (the token embedding is looked up on the host).
 */
export function encoderWebgpuRefusal(ckpt: EncoderCheckpoint): string | null {
  const shape = encoderShapeRefusal(ckpt.config);
  if (shape !== null) return `${ckpt.file}: ${shape}`;
  for (const t of ckpt.tensors.values()) {
    if (t.shape.length < 2 || t.name === EncoderTensor.tokenEmbedding) continue;
    const e = t.encoding;
    if (e.kind === "ggml" && e.type !== GGML_F32 && !GGML_SHADERS.has(e.type)) {
      return `${ckpt.file}: tensor ${t.name} has type ${GGML_TYPES.get(e.type)?.name ?? e.type}, which has no WGSL kernel`;
    }
  }
  return null;
}

/** chooseDevice() for an encoder (bert, nomic-bert): the same adapter rules, the encoder's refusals. */
export async function chooseEncoderDevice(choice: DeviceChoice, ckpt: EncoderCheckpoint, gpuOptions: BackendOptions = {}): Promise<ChosenDevice> {
  return chooseBackend(choice, choice === "wasm" ? null : encoderWebgpuRefusal(ckpt), gpuOptions, async () => {});
}

/** The adapter rules for a model whose WebGPU refusal is `refusal`; `prepare` compiles what the model needs beyond the backend's kernels. */
async function chooseBackend(
  choice: DeviceChoice, refusal: string | null, gpuOptions: BackendOptions, prepare: (gpu: WebGpuBackend) => Promise<void>,
): Promise<ChosenDevice> {
  if (refusal !== null) {
    if (choice === "webgpu") throw new DeviceError(`webgpu: ${refusal}; run it with --device wasm`);
    return { gpu: null, reason: `device: wasm (auto: ${refusal})` };
  }
  const selected = await selectDevice(choice);
  if (selected.kind === "wasm") return { gpu: null, reason: selected.reason };
  try {
    const gpu = await WebGpuBackend.create(selected.gpu, gpuOptions);
    await prepare(gpu);
    return { gpu, reason: `${selected.reason}, ${gpu.productArithmetic}` };
  } catch (e) {
    selected.gpu.device.destroy();
    if (choice === "auto" && e instanceof DeviceError) return { gpu: null, reason: `device: wasm (auto: ${e.message})` };
    throw e;
  }
}
