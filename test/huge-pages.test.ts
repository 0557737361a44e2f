/**
 * The linear memory asks for transparent huge pages where Linux offers them, and the advice is
 * only advice: the same call is a harmless no-op when turned off. A closed engine's memory gives
 * its pages back at once.
 */
import { expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { adviseHugePages } from "../src/backend/wasm/huge-pages.ts";
import { LinearMemory } from "../src/backend/wasm/wasm.ts";

const THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled";
const thpAvailable = process.platform === "linux" && existsSync(THP_SETTING) && !readFileSync(THP_SETTING, "utf8").includes("[never]");

test.skipIf(!thpAvailable)("a shared memory's reserved range takes the huge-page advice", () => {
  const memory = new WebAssembly.Memory({ initial: 64, maximum: 1024, shared: true });
  expect(adviseHugePages(memory, 1024 * 65536)).toBe(true);
});

test("PAGELLM_HUGE_PAGES=0 leaves pages alone", () => {
  const memory = new WebAssembly.Memory({ initial: 64, maximum: 1024, shared: true });
  const before = process.env.PAGELLM_HUGE_PAGES;
  process.env.PAGELLM_HUGE_PAGES = "0";
  try {
    expect(adviseHugePages(memory, 1024 * 65536)).toBe(false);
  } finally {
    if (before === undefined) delete process.env.PAGELLM_HUGE_PAGES;
    else process.env.PAGELLM_HUGE_PAGES = before;
  }
});

test("a range too small to hold one aligned huge page is declined, not an error", () => {
  const memory = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
  expect(adviseHugePages(memory, 65536)).toBe(false);
});

test.skipIf(process.platform !== "linux")("a discarded memory's pages are given back: written bytes read as zeros", () => {
  const mem = new LinearMemory();
  const addr = mem.alloc(3 * 65536 + 5);
  mem.u8.fill(7, addr, addr + 3 * 65536 + 5);
  mem.discard();
  const bytes = mem.u8.subarray(addr, addr + 3 * 65536 + 5);
  expect(bytes.every((b) => b === 0)).toBe(true);
});
