/**
 * The native libraries under Dawn (the Vulkan loader, Dawn's own log) write warnings straight to
 * file descriptor 2 while an adapter is looked for: "Found no drivers!" and a Dawn source location
 * on every machine without a Vulkan driver. pagellm says in one stderr line which device it took
 * and why, so while an adapter and device are requested fd 2 points at /dev/null. POSIX only
 * (libc's dup and dup2 through bun:ffi); where they cannot be loaded, nothing is silenced.
 */
import { dlopen, FFIType } from "bun:ffi";
import { closeSync, openSync } from "node:fs";

interface Libc {
  dup(fd: number): number;
  dup2(from: number, to: number): number;
}

let libc: Libc | null | undefined;

function loadLibc(): Libc | null {
  if (libc !== undefined) return libc;
  libc = null;
  const name = process.platform === "linux" ? "libc.so.6" : process.platform === "darwin" ? "libSystem.B.dylib" : null;
  if (name === null) return libc;
  try {
    const lib = dlopen(name, {
      dup: { args: [FFIType.i32], returns: FFIType.i32 },
      dup2: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    });
    libc = { dup: (fd) => lib.symbols.dup(fd), dup2: (from, to) => lib.symbols.dup2(from, to) };
  } catch {
    libc = null;
  }
  return libc;
}

/** Run fn with the process's native stderr sent to /dev/null; restored afterwards, whatever happens. */
export async function withNativeStderrSilenced<T>(fn: () => Promise<T>): Promise<T> {
  const c = loadLibc();
  const saved = c === null ? -1 : c.dup(2);
  if (c === null || saved < 0) return await fn();
  const devNull = openSync("/dev/null", "w");
  try {
    c.dup2(devNull, 2);
    return await fn();
  } finally {
    c.dup2(saved, 2);
    closeSync(saved);
    closeSync(devNull);
  }
}
