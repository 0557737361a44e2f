/// <reference types="@webgpu/types" />
/**
 * Buffers, pipelines and dispatches on one GPUDevice. Dispatches are recorded into one compute
 * pass of one command encoder and submitted together by flush() (or a read-back), so a forward
 * step is one submission. Bind groups are cached by (kernel, buffers, parameters): a forward pass
 * repeats the same calls every step, and making new bind groups per dispatch leaked about 7 MiB
 * per 1,000 dispatches under bun-webgpu. Each cached bind group owns its parameter block, written
 * once when created, so calls recorded into the same pass never overwrite each other's parameters.
 */
import { DeviceError } from "../../errors.ts";

/** A compiled kernel: its name (the pipeline cache key) and pipeline. */
export interface GpuKernel {
  name: string;
  pipeline: GPUComputePipeline;
}

/** What the runner has done since it was made: the GPU path's per-step costs, for `bench`. */
export interface GpuWorkCounts {
  dispatches: number;
  /** Queue submissions (one per forward step, plus read-backs). */
  submits: number;
  /** Buffer mappings for read-back (one per step that has logits) and the bytes they read. */
  readBacks: number;
  readBytes: number;
  /** writeBuffer calls (the step's inputs) and their bytes. */
  uploads: number;
  uploadBytes: number;
}

/** Tries of a kernel's compilation before its error is reported (see GpuRunner.compile). */
const COMPILE_ATTEMPTS = 3;

/** Bind groups kept before the cache is cleared (each holds a 16-to-64-byte uniform buffer). */
const MAX_CACHED_BIND_GROUPS = 8192;

export class GpuRunner {
  private readonly bufferIds = new WeakMap<GPUBuffer, number>();
  private nextBufferId = 1;
  private readonly kernels = new Map<string, GpuKernel>();
  private readonly bindGroups = new Map<string, { group: GPUBindGroup; params: GPUBuffer }>();
  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  /** Validation scopes of submitted work, checked at the next read-back (WebGPU reports errors asynchronously). */
  private pendingErrors: Promise<GPUError | null>[] = [];
  /** Staging buffers not in use by a read-back. */
  private readonly freeStaging: GPUBuffer[] = [];
  /** Largest storage binding the device allows (bun-webgpu keeps the default 128 MiB). */
  readonly maxBinding: number;
  readonly counts: GpuWorkCounts = { dispatches: 0, submits: 0, readBacks: 0, readBytes: 0, uploads: 0, uploadBytes: 0 };

  constructor(readonly device: GPUDevice) {
    this.maxBinding = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
  }

  /** A storage buffer of at least `bytes` (rounded up to 4), zero-filled by WebGPU. */
  buffer(bytes: number, label: string): GPUBuffer {
    const size = Math.max(4, Math.ceil(bytes / 4) * 4);
    if (size > this.maxBinding) throw new DeviceError(`webgpu: buffer ${label} needs ${size} bytes, the device binds at most ${this.maxBinding}`);
    const buf = this.device.createBuffer({ size, label, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    this.bufferIds.set(buf, this.nextBufferId++);
    return buf;
  }

  /** Copy `data` into `buf` at byteOffset (queued before any later submission). */
  upload(buf: GPUBuffer, data: ArrayBufferView, byteOffset = 0): void {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    // bun-webgpu copies only from an ArrayBuffer: views of the shared linear memory are copied first.
    const owned = data.buffer instanceof ArrayBuffer ? bytes : bytes.slice();
    const padded = owned.byteLength % 4 === 0 ? owned : padTo4(owned);
    this.device.queue.writeBuffer(buf, byteOffset, padded);
    this.counts.uploads++;
    this.counts.uploadBytes += padded.byteLength;
  }

  /**
   * Compile a kernel once (error scopes report WGSL errors: bun-webgpu has no getCompilationInfo).
   * A failure is tried again before it is reported: bun-webgpu 0.1.7 hands Dawn a pointer to the
   * UTF-8 copy of the source that nothing else keeps alive, and once in a long while Dawn read a
   * collected copy ("null character found" at 1:1 in a kernel that compiles every other time). A
   * real WGSL error fails every attempt the same way.
   */
  async compile(name: string, code: string): Promise<GpuKernel> {
    const known = this.kernels.get(name);
    if (known !== undefined) return known;
    let error: GPUError | null = null;
    for (let attempt = 0; attempt < COMPILE_ATTEMPTS; attempt++) {
      this.device.pushErrorScope("validation");
      const module = this.device.createShaderModule({ code, label: name });
      const pipeline = this.device.createComputePipeline({ layout: "auto", label: name, compute: { module, entryPoint: "main" } });
      error = await this.device.popErrorScope();
      if (error === null) {
        const kernel = { name, pipeline };
        this.kernels.set(name, kernel);
        return kernel;
      }
    }
    throw new DeviceError(`webgpu: kernel ${name} does not compile: ${error!.message.split("\n")[0]}`);
  }

  /**
   * Record kernel(params, ...buffers) over `workgroups`. Binding 0 is the parameter block (u32
   * words; f32 fields as their bits), bindings 1.. the buffers in order.
   */
  dispatch(kernel: GpuKernel, params: Uint32Array, buffers: readonly GPUBuffer[], workgroups: readonly [number, number, number]): void {
    if (workgroups.some((n) => n === 0)) return;
    this.openEncoder();
    const group = this.bindGroup(kernel, params, buffers);
    const pass = this.openPass();
    pass.setPipeline(kernel.pipeline);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(workgroups[0], workgroups[1], workgroups[2]);
    this.counts.dispatches++;
  }

  /** Copy src[srcOffset..+bytes) to dst[dstOffset..) in submission order with the dispatches. */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    this.closePass();
    this.openEncoder().copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
  }

  /** Submit everything recorded so far. */
  flush(): void {
    this.closePass();
    if (this.encoder === null) return;
    this.device.queue.submit([this.encoder.finish()]);
    this.counts.submits++;
    this.encoder = null;
    this.pendingErrors.push(this.device.popErrorScope());
  }

  /** Throw a DeviceError if any submitted work failed validation (an aliased binding, a bad size). */
  async checkErrors(): Promise<void> {
    const pending = this.pendingErrors;
    this.pendingErrors = [];
    for (const error of await Promise.all(pending)) {
      if (error !== null) throw new DeviceError(`webgpu: a dispatch failed validation: ${error.message.split("\n")[0]}`);
    }
  }

  /**
   * Run what is recorded, then read `bytes` of `buf` from byteOffset. The copy is recorded now, so
   * later dispatches cannot change what is read. Staging buffers are kept in a pool (a new one
   * per read-back, every decode step, leaked native memory under bun-webgpu); one still mapped
   * by an earlier read is never reused until it is unmapped.
   */
  async read(buf: GPUBuffer, bytes: number, byteOffset = 0): Promise<ArrayBuffer> {
    const size = Math.ceil(bytes / 4) * 4;
    const staging = this.takeStaging(size);
    try {
      this.copy(buf, byteOffset, staging, 0, size);
      this.flush();
      await this.checkErrors();
      await staging.mapAsync(GPUMapMode.READ, 0, size);
      this.counts.readBacks++;
      this.counts.readBytes += size;
      const data = staging.getMappedRange(0, size).slice(0, bytes);
      staging.unmap();
      return data;
    } finally {
      this.freeStaging.push(staging);
    }
  }

  /**
   * Run what is recorded, then read `regions` of GPU buffers, one after another, as one buffer (a
   * KV block gathered from every layer's K and V and head). The copies are recorded now: later
   * dispatches cannot change what is read. Offsets and lengths are multiples of 4.
   */
  async readRegions(regions: readonly { buf: GPUBuffer; offset: number; bytes: number }[]): Promise<ArrayBuffer> {
    const size = regions.reduce((n, r) => n + r.bytes, 0);
    const staging = this.takeStaging(size);
    try {
      let at = 0;
      for (const r of regions) {
        this.copy(r.buf, r.offset, staging, at, r.bytes);
        at += r.bytes;
      }
      this.flush();
      await this.checkErrors();
      await staging.mapAsync(GPUMapMode.READ, 0, size);
      this.counts.readBacks++;
      this.counts.readBytes += size;
      const data = staging.getMappedRange(0, size).slice(0);
      staging.unmap();
      return data;
    } finally {
      this.freeStaging.push(staging);
    }
  }

  private takeStaging(size: number): GPUBuffer {
    const i = this.freeStaging.findIndex((b) => b.size >= size);
    if (i >= 0) return this.freeStaging.splice(i, 1)[0]!;
    return this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  }

  async readF32(buf: GPUBuffer, count: number, elementOffset = 0): Promise<Float32Array> {
    return new Float32Array(await this.read(buf, 4 * count, 4 * elementOffset));
  }

  private bindGroup(kernel: GpuKernel, params: Uint32Array, buffers: readonly GPUBuffer[]): GPUBindGroup {
    const ids = buffers.map((b) => this.bufferIds.get(b) ?? 0);
    const key = `${kernel.name}|${ids.join(",")}|${Array.from(params).join(",")}`;
    const cached = this.bindGroups.get(key);
    if (cached !== undefined) return cached.group;
    if (this.bindGroups.size >= MAX_CACHED_BIND_GROUPS) this.clearBindGroups();
    const paramBytes = Math.max(16, Math.ceil((4 * params.length) / 16) * 16);
    const paramBuffer = this.device.createBuffer({ size: paramBytes, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    const words = new Uint32Array(paramBytes / 4);
    words.set(params);
    this.device.queue.writeBuffer(paramBuffer, 0, words);
    const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: { buffer: paramBuffer } }];
    buffers.forEach((buffer, i) => entries.push({ binding: i + 1, resource: { buffer } }));
    const group = this.device.createBindGroup({ layout: kernel.pipeline.getBindGroupLayout(0), entries });
    this.bindGroups.set(key, { group, params: paramBuffer });
    return group;
  }

  /** Bind groups cached, and staging buffers pooled: both stop growing once a step's shapes repeat. */
  get cached(): { bindGroups: number; stagingBuffers: number } {
    return { bindGroups: this.bindGroups.size, stagingBuffers: this.freeStaging.length };
  }

  /** Drop every cached bind group (before the buffers they bind are destroyed). */
  forgetBindGroups(): void {
    this.clearBindGroups();
  }

  private clearBindGroups(): void {
    // Recorded but unsubmitted dispatches may still use these; submit them first.
    this.flush();
    for (const { params } of this.bindGroups.values()) params.destroy();
    this.bindGroups.clear();
  }

  private openEncoder(): GPUCommandEncoder {
    if (this.encoder === null) {
      // Everything recorded until the submission is checked as one validation scope.
      this.device.pushErrorScope("validation");
      this.encoder = this.device.createCommandEncoder();
    }
    return this.encoder;
  }

  private openPass(): GPUComputePassEncoder {
    this.pass ??= this.openEncoder().beginComputePass();
    return this.pass;
  }

  private closePass(): void {
    if (this.pass === null) return;
    this.pass.end();
    this.pass = null;
  }

  destroy(): void {
    this.flush();
    for (const b of this.freeStaging) b.destroy();
    this.freeStaging.length = 0;
    for (const { params } of this.bindGroups.values()) params.destroy();
    this.bindGroups.clear();
  }
}

function padTo4(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
  out.set(bytes);
  return out;
}

/** Parameter block builder: u32 and f32 fields in declaration order. */
export function params(...fields: ({ u32: number } | { f32: number } | number)[]): Uint32Array {
  const words = new Uint32Array(fields.length);
  const f32 = new Float32Array(words.buffer);
  fields.forEach((f, i) => {
    if (typeof f === "number") words[i] = f >>> 0;
    else if ("u32" in f) words[i] = f.u32 >>> 0;
    else f32[i] = f.f32;
  });
  return words;
}
