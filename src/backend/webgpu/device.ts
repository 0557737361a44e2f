/// <reference types="@webgpu/types" />
/**
 * WebGPU device acquisition under Bun. Bun has no `navigator.gpu`; the bun-webgpu package (Dawn
 * through bun:ffi) provides one. Dawn hands out its "null" backend when no driver works, and that
 * adapter accepts shaders and returns garbage, so an adapter is used only after it passes two
 * checks: it is not the null backend, and a small kernel computes a known answer exactly.
 *
 * Invariant: a GpuContext returned by acquireGpu() has run the known-answer kernel successfully.
 */
import { DeviceError } from "../../errors.ts";
import { withNativeStderrSilenced } from "./quiet-stderr.ts";

/** What the adapter says about itself, and what pagellm concluded from it. */
export interface GpuAdapterSummary {
  /** Device name (or description when the driver gives no name). */
  name: string;
  vendor: string;
  architecture: string;
  description: string;
  /** A CPU implementation (llvmpipe, lavapipe, SwiftShader, WARP): correct, but slow. */
  software: boolean;
  /** The adapter offers `shader-f16` (and the device was created with it). */
  shaderF16: boolean;
}

export interface GpuContext {
  device: GPUDevice;
  adapter: GpuAdapterSummary;
}

/** Dawn's WGPUBackendType value of its null backend (webgpu.h: Undefined 0, Null 1, WebGPU 2, ...). */
const DAWN_NULL_BACKEND = 1;
/** Names of CPU implementations of Vulkan, D3D or WebGPU. */
const SOFTWARE_NAMES = /llvmpipe|lavapipe|swiftshader|warp|software rasterizer/i;

/** Dawn's adapter info carries fields the standard GPUAdapterInfo does not declare. */
interface DawnAdapterInfo {
  backendType?: number;
  isFallbackAdapter?: boolean;
}

type GpuModule = typeof import("bun-webgpu");

let gpuModule: Promise<GpuModule | null> | null = null;

/** Load bun-webgpu and install navigator.gpu once; null when the package or its binary is unusable. */
async function loadGpuModule(): Promise<GpuModule | null> {
  gpuModule ??= (async () => {
    try {
      const mod = await import("bun-webgpu");
      await mod.setupGlobals();
      return mod;
    } catch {
      return null;
    }
  })();
  return gpuModule;
}

/** Summarise an adapter's info; `null` in the name or backend marks Dawn's null backend. */
export function summarizeAdapter(info: GPUAdapterInfo, features: ReadonlySet<string>): GpuAdapterSummary & { nullBackend: boolean } {
  const dawn = info as unknown as DawnAdapterInfo;
  const name = info.device || info.description || "unknown adapter";
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`;
  const nullBackend = dawn.backendType === DAWN_NULL_BACKEND || /\bnull\b/i.test(text);
  const software = info.architecture === "software" || dawn.isFallbackAdapter === true || SOFTWARE_NAMES.test(text);
  return {
    name, vendor: info.vendor, architecture: info.architecture, description: info.description,
    software, shaderF16: features.has("shader-f16"), nullBackend,
  };
}

/** Raised by acquireGpu({ hardwareOnly: true }) for a software adapter, before any device is made. */
export class SoftwareAdapterError extends DeviceError {
  constructor(readonly adapter: GpuAdapterSummary) {
    super(`webgpu: ${describeAdapter(adapter)} is a software adapter; use --device webgpu to run on it`);
  }
}

/**
 * Find an adapter, refuse the null backend (and, with hardwareOnly, a software one), create a
 * device (default limits: bun-webgpu rejects requiredLimits) and run the known-answer kernel.
 * Throws DeviceError with a one-line reason.
 */
export async function acquireGpu(opts: { hardwareOnly?: boolean } = {}): Promise<GpuContext> {
  // The Vulkan loader and Dawn print driver warnings on fd 2 while looking: the reason goes in the DeviceError instead.
  const adapter = await withNativeStderrSilenced(async () => {
    const mod = await loadGpuModule();
    if (mod === null || typeof navigator === "undefined" || navigator.gpu === undefined) {
      throw new DeviceError("webgpu: the bun-webgpu package (Dawn) could not be loaded");
    }
    return await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  });
  if (adapter === null) throw new DeviceError("webgpu: no adapter found (no Vulkan, Metal or D3D driver)");
  const summary = summarizeAdapter(adapter.info, adapter.features as ReadonlySet<string>);
  if (summary.nullBackend) {
    throw new DeviceError(`webgpu: only Dawn's null backend is available (${summary.description || summary.name}): no usable driver`);
  }
  const { nullBackend: _ignored, ...adapterSummary } = summary;
  if (opts.hardwareOnly === true && summary.software) throw new SoftwareAdapterError(adapterSummary);
  const requiredFeatures: GPUFeatureName[] = summary.shaderF16 ? ["shader-f16"] : [];
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({ requiredFeatures } as GPUDeviceDescriptor);
  } catch (e) {
    throw new DeviceError(`webgpu: ${summary.name}: requestDevice failed: ${firstLine(e)}`);
  }
  const context: GpuContext = { device, adapter: adapterSummary };
  await checkKnownAnswer(context);
  return context;
}

const KNOWN_ANSWER_N = 256;
const KNOWN_ANSWER_WGSL = /* wgsl */ `
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i < arrayLength(&out)) { out[i] = a[i] * 3.0 + f32(i); }
}`;

/**
 * out[i] = 3 a[i] + i over 256 small integers: exact in f32, so any deviation means the adapter
 * does not really run shaders (Dawn's null backend returns zeros or stale memory).
 */
async function checkKnownAnswer(ctx: GpuContext): Promise<void> {
  const { device } = ctx;
  const input = new Float32Array(KNOWN_ANSWER_N).map((_, i) => (i * 7) % 13 - 6);
  device.pushErrorScope("validation");
  const a = device.createBuffer({ size: 4 * KNOWN_ANSWER_N, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  const out = device.createBuffer({ size: 4 * KNOWN_ANSWER_N, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ size: 4 * KNOWN_ANSWER_N, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(a, 0, input);
  const pipeline = device.createComputePipeline({
    layout: "auto",
    compute: { module: device.createShaderModule({ code: KNOWN_ANSWER_WGSL }), entryPoint: "main" },
  });
  const bind = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: out } }],
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bind);
  pass.dispatchWorkgroups(KNOWN_ANSWER_N / 64);
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, 4 * KNOWN_ANSWER_N);
  device.queue.submit([encoder.finish()]);
  const error = await device.popErrorScope();
  if (error !== null) throw new DeviceError(`webgpu: ${ctx.adapter.name}: start-up kernel rejected: ${firstLine(error.message)}`);
  await read.mapAsync(GPUMapMode.READ);
  const got = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  for (const b of [a, out, read]) b.destroy();
  for (let i = 0; i < KNOWN_ANSWER_N; i++) {
    const want = input[i]! * 3 + i;
    if (got[i] !== want) {
      throw new DeviceError(`webgpu: ${ctx.adapter.name}: start-up kernel gave a wrong answer (element ${i}: ${got[i]}, expected ${want})`);
    }
  }
}

// ============================================================================================
// --device selection
// ============================================================================================

export type DeviceChoice = "auto" | "wasm" | "webgpu";

export type DeviceSelection =
  | { kind: "wasm"; reason: string }
  | { kind: "webgpu"; reason: string; gpu: GpuContext };

/** Parse a --device value; null when it is not one of the three. */
export function parseDeviceChoice(value: string): DeviceChoice | null {
  return value === "auto" || value === "wasm" || value === "webgpu" ? value : null;
}

/**
 * Choose the backend. "webgpu" insists (DeviceError when unusable) and accepts a software adapter;
 * "auto" takes WebGPU only on a real, hardware adapter and otherwise falls back to WebAssembly.
 * The reason is one line for stderr.
 */
export async function selectDevice(choice: DeviceChoice): Promise<DeviceSelection> {
  if (choice === "wasm") return { kind: "wasm", reason: "device: wasm (requested)" };
  if (choice === "webgpu") {
    const gpu = await acquireGpu();
    return { kind: "webgpu", reason: `device: webgpu on ${describeAdapter(gpu.adapter)} (requested)`, gpu };
  }
  let gpu: GpuContext;
  try {
    // A software adapter is refused before a device is made: auto on a CPU-only machine stays cheap.
    gpu = await acquireGpu({ hardwareOnly: true });
  } catch (e) {
    if (!(e instanceof DeviceError)) throw e;
    return { kind: "wasm", reason: `device: wasm (auto: ${e.message})` };
  }
  return { kind: "webgpu", reason: `device: webgpu on ${describeAdapter(gpu.adapter)} (auto)`, gpu };
}

/** "NVIDIA H100 (nvidia, shader-f16)" / "llvmpipe-... (mesa, software)". */
export function describeAdapter(a: GpuAdapterSummary): string {
  const notes = [a.vendor || "unknown vendor", ...(a.software ? ["software"] : []), ...(a.shaderF16 ? ["shader-f16"] : [])];
  return `${a.name} (${notes.join(", ")})`;
}

function firstLine(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.split("\n")[0]!.trim();
}
