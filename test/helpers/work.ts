/**
 * How much work a piece of code does, measured so that a busy machine changes neither figure: the
 * bytes this process read while it ran (Linux's /proc/self/io `rchar`: every read and pread of
 * every thread), and the CPU time it spent (process.cpuUsage: this process's own, which does not
 * grow while other processes hold the cores, as wall-clock time does). A test bounds a loader's
 * work with them: what it reads of a file, however large the file says it is, and that it does
 * not compute for long; a time limit would fail on a busy machine and pass a slow loader on an
 * idle one.
 */
import { readFileSync } from "node:fs";

/** Bytes read by this process since it started. */
export function bytesReadSoFar(): number {
  let io: string;
  try {
    io = readFileSync("/proc/self/io", "utf8");
  } catch (e) {
    throw new Error(`counting bytes read needs Linux's /proc/self/io: ${(e as Error).message}`);
  }
  const rchar = /^rchar: (\d+)$/m.exec(io);
  if (rchar === null) throw new Error(`no rchar line in /proc/self/io:\n${io}`);
  return Number(rchar[1]);
}

export interface Work<T> {
  result: T;
  /** Bytes this process read while `run` ran (reading /proc/self/io itself adds about 100). */
  bytesRead: number;
  /** CPU seconds this process spent, user and system, while `run` ran. */
  cpuSeconds: number;
}

/** Run `run` and measure its work. Nothing else may run in this process meanwhile (tests of a file run one at a time). */
export async function workOf<T>(run: () => T | Promise<T>): Promise<Work<T>> {
  const bytes = bytesReadSoFar();
  const cpu = process.cpuUsage();
  const result = await run();
  const spent = process.cpuUsage(cpu);
  return { result, bytesRead: bytesReadSoFar() - bytes, cpuSeconds: (spent.user + spent.system) / 1e6 };
}
