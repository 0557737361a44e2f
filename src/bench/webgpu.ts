/**
 * WebGPU figures for `bench decode|prefill|batch --device auto|webgpu`: the same measurements as
 * WebAssembly's, through the same engine on a WebGPU backend, in the same run, with the adapter
 * named (a software adapter labelled as such: its figures are a CPU emulating a GPU) and the GPU
 * path's cost per decode step counted: dispatches, queue submissions, buffer read-backs and bytes
 * moved each way.
 */
import { webgpuRefusal } from "../backend/device-choice.ts";
import { WebGpuBackend, type BackendOptions } from "../backend/webgpu/backend.ts";
import { describeAdapter, selectDevice, type DeviceChoice } from "../backend/webgpu/device.ts";
import type { GpuWorkCounts } from "../backend/webgpu/runner.ts";
import type { LLM } from "../llm/llm.ts";
import { openCheckpoint } from "../model/load.ts";
import type { Summary } from "./measure.ts";
import type { BenchModel } from "./bench-models.ts";
import { fmt, fmtRatio, fmtSpread, type Table } from "./bench-report.ts";

/** The WebGPU backend a bench runs its GPU rows on, and how to name it. */
export interface BenchGpu {
  backend: WebGpuBackend;
  /** "llvmpipe-... (mesa, software, shader-f16)". */
  adapter: string;
  software: boolean;
}

/**
 * The GPU for --device: wasm gives none; webgpu any adapter (DeviceError when there is none);
 * auto only a hardware one. `note` says what was chosen and why, for the report.
 */
export async function benchGpu(choice: DeviceChoice, options: BackendOptions = {}): Promise<{ gpu: BenchGpu | null; note: string }> {
  const selected = await selectDevice(choice);
  if (selected.kind === "wasm") return { gpu: null, note: `${selected.reason}: WebAssembly figures only` };
  let backend: WebGpuBackend;
  try {
    backend = await WebGpuBackend.create(selected.gpu, options);
  } catch (e) {
    selected.gpu.device.destroy();
    throw e;
  }
  const a = selected.gpu.adapter;
  const reason = `${selected.reason}, ${backend.productArithmetic}`;
  const note = a.software
    ? `${reason}: a SOFTWARE adapter (the CPU emulating a GPU): its figures say nothing of a real GPU's speed`
    : reason;
  return { gpu: { backend, adapter: describeAdapter(a), software: a.software }, note };
}

/** Why `model` gets no WebGPU row (a tensor type or numerics WGSL lacks), or null. */
export function gpuRefusal(model: BenchModel): string | null {
  return webgpuRefusal(openCheckpoint(model.path));
}

/** Per decode step of one sequence: what the GPU path did (the runner's counts, means over the steps counted). */
export type GpuStepCounts = GpuWorkCounts;

/**
 * Count one sequence's decode steps: the counters over a `steps + 1`-token generation minus those
 * over a 1-token one (same prompt, prefix cache off), divided by `steps`.
 */
export async function countDecodeStep(llm: LLM, gpu: BenchGpu, prompt: number[], steps: number): Promise<GpuStepCounts> {
  const c = gpu.backend.runner.counts;
  const run = async (maxTokens: number): Promise<GpuWorkCounts> => {
    const before = { ...c };
    await llm.generate([{ promptTokenIds: prompt, maxTokens, temperature: 0, repetitionPenalty: 1 }]);
    const after: GpuWorkCounts = { ...c };
    for (const k of Object.keys(after) as (keyof GpuWorkCounts)[]) after[k] -= before[k];
    return after;
  };
  const one = await run(1);
  const many = await run(steps + 1);
  const per: GpuStepCounts = { ...many };
  for (const k of Object.keys(per) as (keyof GpuWorkCounts)[]) per[k] = (many[k] - one[k]) / steps;
  return per;
}

/** One WebGPU figure next to the WebAssembly one it is compared with. */
export interface GpuRow {
  /** What was measured ("decode", "16 seqs", ...). */
  label: string;
  value: Summary;
  /** WebAssembly's figure in the same run, at `wasmThreads` threads. */
  wasm: Summary;
  wasmThreads: number;
  /** value / wasm (medians). */
  vsWasm: number;
}

/** The WebGPU table of a bench: each figure of `subject`, WebAssembly's beside it, and the ratio. */
export function gpuTable(what: string, subject: string, adapter: string, software: boolean, rows: readonly GpuRow[]): Table {
  const kind = software ? "SOFTWARE adapter, not a GPU" : "hardware adapter";
  return {
    title: `${subject} on WebGPU, ${adapter} (${kind}): ${what} next to WebAssembly's in the same run; median (min-max)`,
    columns: ["", `webgpu ${what}`, `wasm ${what}`, "wasm threads", "webgpu / wasm"],
    rows: rows.map((r) => [r.label, fmtSpread(r.value), fmtSpread(r.wasm), String(r.wasmThreads), fmtRatio(r.vsWasm)]),
  };
}

/** What bounds the GPU path per decode step: its dispatches, submissions and read-backs. */
export function gpuCountsTable(model: string, counts: GpuStepCounts): Table {
  return {
    title: `WebGPU work per decode step of one sequence on ${model}`,
    columns: ["dispatches", "queue submits", "read-backs (buffer maps)", "bytes read back", "uploads", "bytes uploaded"],
    rows: [[fmt(counts.dispatches), fmt(counts.submits), fmt(counts.readBacks), fmt(counts.readBytes), fmt(counts.uploads), fmt(counts.uploadBytes)]],
  };
}
