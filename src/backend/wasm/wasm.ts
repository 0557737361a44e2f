/**
 * The WebAssembly side of the CPU backend: the compiled kernel module, and a shared linear memory
 * that holds weights, activations and the KV block arena (a model larger than one memory is
 * placed over several: see placement.ts).
 */
import { readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { PagellmError } from "../../errors.ts";
import { adviseHugePages, adviseSmallPages, discardPages } from "./huge-pages.ts";
import type { Kernels } from "./kernels.ts";

const WASM_PATH = fileURLToPath(new URL("../../../build/kernels.wasm", import.meta.url));
const PAGE_BYTES = 65536;
/** The module's own static data (constant tables) lives below this address. */
const STATIC_RESERVE = 65536;
/** Then the kernels' table of every half as f32 (assembly/ggml/common.ts), 256 KiB; the heap starts after it. */
const HALF_TABLE_BYTES = 4 * 65536;
/** wasm32 addresses reach 4 GiB. */
export const MAX_PAGES = 65536;
export const MAX_MEMORY_BYTES = MAX_PAGES * PAGE_BYTES;
/** Bytes below which nothing of a model is placed: the module's static data and its half table. */
export const RESERVED_BYTES = STATIC_RESERVE + HALF_TABLE_BYTES;

let compiledModule: WebAssembly.Module | null = null;

/** The kernel module, compiled once per thread. */
export function kernelModule(): WebAssembly.Module {
  if (compiledModule) return compiledModule;
  if (!existsSync(WASM_PATH)) {
    throw new PagellmError(`${WASM_PATH}: kernels not built; run \`bun install\` (or \`bun run build:wasm\`)`);
  }
  compiledModule = new WebAssembly.Module(readFileSync(WASM_PATH));
  return compiledModule;
}

/** Instantiate the kernels over a memory; workers call this with the same shared memory. */
export function instantiateKernels(memory: WebAssembly.Memory, module: WebAssembly.Module = kernelModule()): Kernels {
  const kernels = instantiateRaw(memory, module);
  if (kernels.heapBase() > STATIC_RESERVE) {
    throw new PagellmError(`kernel module static data (${kernels.heapBase()} bytes) exceeds the reserved ${STATIC_RESERVE}`);
  }
  if (kernels.halfTableAddress() !== STATIC_RESERVE) {
    throw new PagellmError(`kernel module's half table is at ${kernels.halfTableAddress()}, not at the reserved ${STATIC_RESERVE}`);
  }
  return kernels;
}

function instantiateRaw(memory: WebAssembly.Memory, module: WebAssembly.Module): Kernels {
  const instance = new WebAssembly.Instance(module, {
    env: {
      memory,
      abort(_msg: number, _file: number, line: number, column: number): never {
        throw new PagellmError(`WebAssembly kernel aborted at line ${line}:${column}`);
      },
    },
  });
  return instance.exports as unknown as Kernels;
}

/**
 * A shared WebAssembly memory with a bump allocator. Allocation only moves up; `mark`/`release`
 * give back the top of the heap (used for load-time staging buffers). The memory grows on demand;
 * typed-array views are refreshed whenever the buffer has grown.
 */
export class LinearMemory {
  readonly memory: WebAssembly.Memory;
  private top: number;
  /** The highest top ever: bytes above it were never handed out, so they are still zero (and not resident). */
  private highWater: number;
  /** The high-water mark before the latest allocation. */
  private lastFresh = 0;
  private viewBytes = 0;
  private f32View = new Float32Array(0);
  private i32View = new Int32Array(0);
  private u8View = new Uint8Array(0);

  constructor(initialBytes = 16 * PAGE_BYTES) {
    const pages = Math.max(1, Math.ceil(initialBytes / PAGE_BYTES));
    this.memory = new WebAssembly.Memory({ initial: pages, maximum: MAX_PAGES, shared: true });
    adviseHugePages(this.memory, MAX_PAGES * PAGE_BYTES);
    this.top = RESERVED_BYTES;
    this.highWater = this.top;
    this.ensure(this.top);
  }

  /** Reserve `bytes` at an address aligned to `align`; grows the memory when needed. */
  alloc(bytes: number, align = 64): number {
    const addr = alignUp(this.top, align);
    const end = addr + bytes;
    this.ensure(end);
    const fresh = this.highWater;
    this.top = end;
    this.highWater = Math.max(this.highWater, end);
    this.lastFresh = fresh;
    return addr;
  }

  /**
   * Allocate and zero-fill. Only what was handed out before (and given back by release) is
   * filled: bytes never handed out are zero already, and writing them would make their pages
   * resident before anything uses them.
   */
  allocZeroed(bytes: number, align = 64): number {
    const addr = this.alloc(bytes, align);
    const end = Math.min(addr + bytes, this.lastFresh);
    if (end > addr) this.u8.fill(0, addr, end);
    return addr;
  }

  /** Keep [addr, addr + bytes) in small pages: rows of it are touched sparsely (the KV arena). */
  keepSmallPages(addr: number, bytes: number): void {
    adviseSmallPages(this.memory, addr, bytes);
  }

  /**
   * Give the memory's pages back to the OS at once, for an engine that was closed: its contents
   * read as zeros afterwards, so nothing may run on it again (the engine's close() contract).
   */
  discard(): void {
    discardPages(this.memory);
  }

  mark(): number {
    return this.top;
  }

  release(mark: number): void {
    if (mark > this.top) throw new Error("LinearMemory.release: mark above the current top");
    this.top = mark;
  }

  get bytesInUse(): number {
    return this.top;
  }

  get f32(): Float32Array {
    this.refresh();
    return this.f32View;
  }

  get i32(): Int32Array {
    this.refresh();
    return this.i32View;
  }

  get u8(): Uint8Array {
    this.refresh();
    return this.u8View;
  }

  private ensure(end: number): void {
    const have = this.memory.buffer.byteLength;
    if (end <= have) return;
    const pages = Math.ceil((end - have) / PAGE_BYTES);
    if (have / PAGE_BYTES + pages > MAX_PAGES) {
      throw new PagellmError(
        `out of WebAssembly memory: need ${(end / 2 ** 30).toFixed(2)} GiB, a wasm32 memory holds at most 4 GiB`,
      );
    }
    try {
      this.memory.grow(pages);
    } catch (e) {
      // The runtime refuses the pages (the machine's memory or the process's limit): one line.
      throw new PagellmError(
        `WebAssembly memory could not grow from ${gib(have)} to ${gib(have + pages * PAGE_BYTES)}: ${(e as Error).message}`,
      );
    }
  }

  private refresh(): void {
    const buffer = this.memory.buffer;
    if (buffer.byteLength === this.viewBytes) return;
    this.viewBytes = buffer.byteLength;
    this.f32View = new Float32Array(buffer);
    this.i32View = new Int32Array(buffer);
    this.u8View = new Uint8Array(buffer);
  }
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}

export function alignUp(x: number, align: number): number {
  return Math.ceil(x / align) * align;
}
