/**
 * Ask Linux to back the WebAssembly memory with 2 MiB transparent huge pages.
 *
 * Why: decode streams every weight once per token, and with 4 KiB pages the hardware
 * prefetcher stops at each page boundary and every page costs a TLB miss. Measured on the 2-core
 * project VM: a 440 MB matrix-vector product went from 17-18 to 20-21 GB/s on one thread and from
 * 38-42 to 45-52 GB/s on two. Most distributions set THP to "madvise", so the memory must ask.
 *
 * Not for the KV arena (adviseSmallPages): a request touches a few rows of each layer's and
 * head's region, and each touch made a whole 2 MiB page resident: Qwen2.5-0.5B's shape at a
 * 4096-token context went from 623 to 817 MiB resident after one short generation (24 layers x
 * K, V x 2 heads, 96 huge pages for a dozen tokens).
 *
 * Best effort: on another OS, without libc, or when the call fails, pages stay 4 KiB and nothing
 * else changes. PAGELLM_HUGE_PAGES=0 turns it off.
 *
 * And give a closed engine's pages back (discardPages): a WebAssembly memory is freed only when the
 * collector finds it unreachable, which in a long-lived process can be much later (a bench that
 * loads one model after another, or runs llama.cpp after pagellm, held two 9 GiB models).
 */
import { dlopen, FFIType, ptr } from "bun:ffi";

const MADV_DONTNEED = 4;
const MADV_HUGEPAGE = 14;
const MADV_NOHUGEPAGE = 15;
const HUGE_PAGE_BYTES = 2 * 1024 * 1024;
const SMALL_PAGE_BYTES = 4096;

/** Whether the advice was taken for `reservedBytes` from the start of `memory`. */
export function adviseHugePages(memory: WebAssembly.Memory, reservedBytes: number): boolean {
  // The engine reserves the memory's maximum up front, so the base never moves and the advice
  // covers pages the memory grows into later.
  return advise(memory, 0, reservedBytes, HUGE_PAGE_BYTES, MADV_HUGEPAGE);
}

/** Keep bytes [offset, offset + length) of `memory` in small pages (whole 4 KiB pages inside the range); whether the advice was taken. */
export function adviseSmallPages(memory: WebAssembly.Memory, offset: number, length: number): boolean {
  return advise(memory, offset, length, SMALL_PAGE_BYTES, MADV_NOHUGEPAGE);
}

/**
 * Give every page of `memory` back to the OS now; whether the advice was taken. Its contents are
 * gone (the pages read as zeros): only for a memory nothing will run on again.
 */
export function discardPages(memory: WebAssembly.Memory): boolean {
  return madviseRange(memory, 0, memory.buffer.byteLength, SMALL_PAGE_BYTES, MADV_DONTNEED);
}

/** The page-size advice, unless PAGELLM_HUGE_PAGES=0. */
function advise(memory: WebAssembly.Memory, offset: number, length: number, unit: number, advice: number): boolean {
  return process.env.PAGELLM_HUGE_PAGES !== "0" && madviseRange(memory, offset, length, unit, advice);
}

/** madvise the whole `unit`-aligned pages of [offset, offset + length) of the memory (Linux). */
function madviseRange(memory: WebAssembly.Memory, offset: number, length: number, unit: number, advice: number): boolean {
  if (process.platform !== "linux") return false;
  try {
    const libc = dlopen("libc.so.6", {
      madvise: { args: [FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i32 },
    });
    try {
      const base = ptr(new Uint8Array(memory.buffer)) + offset;
      const start = Math.ceil(base / unit) * unit;
      const bytes = Math.floor((base + length - start) / unit) * unit;
      return bytes > 0 && libc.symbols.madvise(start, bytes, advice) === 0;
    } finally {
      libc.close();
    }
  } catch {
    return false;
  }
}
