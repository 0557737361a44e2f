/**
 * Inputs and outputs of kernel tests, placed in a region of a backend's linear memory.
 */
import type { LinearMemory } from "../../src/backend/wasm/wasm.ts";

/**
 * A bump allocator inside `[region, region + bytes)`; make a new one per test iteration. It
 * misaligns by 4 bytes now and then: kernels must not assume 16-byte alignment.
 */
export class Scratch {
  private top: number;

  constructor(
    private readonly mem: LinearMemory,
    private readonly region: number,
    private readonly bytes: number,
  ) {
    this.top = region;
  }

  f32(values: ArrayLike<number>): number {
    const addr = this.alloc(4 * values.length);
    this.mem.f32.set(values, addr >> 2);
    return addr;
  }

  i32(values: ArrayLike<number>): number {
    const addr = this.alloc(4 * values.length);
    this.mem.i32.set(values, addr >> 2);
    return addr;
  }

  alloc(bytes: number): number {
    const addr = Math.ceil(this.top / 16) * 16 + (bytes % 3 === 0 ? 4 : 0);
    this.top = addr + bytes;
    if (this.top > this.region + this.bytes) throw new Error("test scratch exhausted");
    return addr;
  }
}

/**
 * One region of a backend's memory that a test file's iterations reuse: every iteration writes its
 * inputs and reads its outputs here, through a fresh Scratch.
 */
export class KernelRegion {
  readonly start: number;

  constructor(
    private readonly mem: LinearMemory,
    readonly bytes: number,
  ) {
    this.start = mem.alloc(bytes);
  }

  /** A new bump allocator over the whole region (one per test iteration). */
  scratch(): Scratch {
    return new Scratch(this.mem, this.start, this.bytes);
  }

  /** n f32 at addr, copied out. */
  readF32(addr: number, n: number): Float32Array {
    return this.mem.f32.slice(addr >> 2, (addr >> 2) + n);
  }
}
