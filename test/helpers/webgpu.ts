/**
 * The WebGPU device for tests. Without a usable adapter, WebGPU tests skip with the reason outside
 * CI, and in CI (process.env.CI === "true") become one failing test naming it: CI installs a
 * software Vulkan driver (.ci/run), so a missing adapter there is a broken set-up, not a skip.
 * CI runs the suite at PAGELLM_TEST_THREADS=1 and 2; the WebGPU path runs no worker threads (the
 * engine's host side is one thread there), so its tests run in the 1-thread pass only, which
 * halves their time on the software adapter.
 */
import { describe, test } from "bun:test";
import { acquireGpu, type GpuContext } from "../../src/backend/webgpu/device.ts";
import { WebGpuBackend } from "../../src/backend/webgpu/backend.ts";
import { PagellmError } from "../../src/errors.ts";
import { describeUnavailable } from "./shared.ts";
import { testThreads } from "./threads.ts";

type TestGpu = { backend: WebGpuBackend; gpu: GpuContext } | { reason: string };

let shared: Promise<TestGpu> | null = null;
let sharedHalf: Promise<TestGpu> | null = null;

/**
 * One backend for the whole test run (devices are slow to create on llvmpipe), with f32 products
 * (the tests written for f32 arithmetic state it, whatever the adapter offers).
 */
export function testGpu(): Promise<TestGpu> {
  shared ??= (async () => {
    let gpu: GpuContext;
    try {
      gpu = await acquireGpu();
    } catch (e) {
      if (e instanceof PagellmError) return { reason: e.message };
      throw e;
    }
    // A kernel that does not compile on a working adapter is a bug: it throws, never skips.
    return { backend: await WebGpuBackend.create(gpu, { halfProducts: false }), gpu };
  })();
  return shared;
}

/** A second backend on the same device with f16 products; the reason when the adapter has no shader-f16. */
export function testHalfGpu(): Promise<TestGpu> {
  sharedHalf ??= (async () => {
    const got = await testGpu();
    if (!("backend" in got)) return got;
    if (!got.gpu.adapter.shaderF16) return { reason: `${got.gpu.adapter.name} does not offer shader-f16` };
    return { backend: await WebGpuBackend.create(got.gpu, { halfProducts: true }), gpu: got.gpu };
  })();
  return sharedHalf;
}

/**
 * describe() a group that needs a WebGPU backend; fn receives it (with f16 products when
 * opts.half: then an adapter without shader-f16 skips, or in CI fails, as a missing adapter does).
 */
export async function describeGpu(
  name: string, fn: (backend: WebGpuBackend, gpu: GpuContext) => void, opts: { half?: boolean } = {},
): Promise<void> {
  if (testThreads() > 1) {
    const reason = `WebGPU runs no worker threads: covered by the PAGELLM_TEST_THREADS=1 pass`;
    describe.skip(name, () => {
      test(reason, () => {});
    });
    return;
  }
  const got = await (opts.half === true ? testHalfGpu() : testGpu());
  if ("backend" in got) {
    describe(name, () => fn(got.backend, got.gpu));
    return;
  }
  describeUnavailable(name, `no WebGPU adapter${opts.half === true ? " with shader-f16" : ""}: ${got.reason}`);
}
