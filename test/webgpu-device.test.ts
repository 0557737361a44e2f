/**
 * Device acquisition and --device selection: adapter classification (null backend, software),
 * the choice rules of auto / wasm / webgpu, and, in a child process whose Vulkan loader finds no
 * driver, the refusal of Dawn's null backend with a DeviceError (exit code 2) and auto's fallback.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseDeviceChoice, selectDevice, summarizeAdapter } from "../src/backend/webgpu/device.ts";
import { GpuRunner } from "../src/backend/webgpu/runner.ts";
import { WebGpuBackend } from "../src/backend/webgpu/backend.ts";
import { DeviceError } from "../src/errors.ts";
import { describeGpu } from "./helpers/webgpu.ts";
import { PROCESS_TEST_MS } from "./helpers/limits.ts";

/** A GPUAdapterInfo-shaped record with Dawn's extra fields. */
function info(fields: { vendor: string; architecture: string; device: string; description: string; backendType: number }): GPUAdapterInfo {
  return fields as unknown as GPUAdapterInfo;
}

describe("kernel compilation", () => {
  /** A device whose compilations report the given errors in turn (null: compiled). */
  function deviceFailing(errors: (string | null)[]): { device: GPUDevice; compilations: () => number } {
    let compilations = 0;
    const device = {
      limits: { maxStorageBufferBindingSize: 1 << 27, maxBufferSize: 1 << 28 },
      pushErrorScope: () => undefined,
      createShaderModule: () => ({}),
      createComputePipeline: () => ({}),
      popErrorScope: async () => {
        const e = errors[compilations++] ?? null;
        return e === null ? null : { message: e };
      },
    };
    return { device: device as unknown as GPUDevice, compilations: () => compilations };
  }

  test("a failure that does not repeat (bun-webgpu's collected source copy) is tried again and the kernel compiles", async () => {
    const { device, compilations } = deviceFailing([":1:1 error: null character found"]);
    const kernel = await new GpuRunner(device).compile("k", "@compute @workgroup_size(1) fn main() {}");
    expect(kernel.name).toBe("k");
    expect(compilations()).toBe(2);
  });

  test("an error on every attempt is a DeviceError naming the kernel and the first line of the message", async () => {
    const { device, compilations } = deviceFailing(["bad wgsl\nmore", "bad wgsl\nmore", "bad wgsl\nmore"]);
    await expect(new GpuRunner(device).compile("matmulX", "nonsense")).rejects.toThrow(new DeviceError("webgpu: kernel matmulX does not compile: bad wgsl"));
    expect(compilations()).toBe(3);
  });
});

describe("adapter classification", () => {
  test("Dawn's null backend is flagged, by backend type or by name", () => {
    const nullInfo = info({ vendor: "", architecture: "", device: "", description: "null-backend", backendType: 1 });
    expect(summarizeAdapter(nullInfo, new Set()).nullBackend).toBe(true);
    const named = info({ vendor: "", architecture: "", device: "Null backend", description: "", backendType: 0 });
    expect(summarizeAdapter(named, new Set()).nullBackend).toBe(true);
  });

  test("llvmpipe is software; a discrete GPU is not; shader-f16 is read from the features", () => {
    const llvmpipe = info({ vendor: "mesa", architecture: "software", device: "llvmpipe-llvm-15", description: "llvmpipe: Mesa 25.0.7", backendType: 6 });
    const s = summarizeAdapter(llvmpipe, new Set(["shader-f16"]));
    expect([s.software, s.nullBackend, s.shaderF16]).toEqual([true, false, true]);
    const h100 = info({ vendor: "nvidia", architecture: "hopper", device: "NVIDIA H100 80GB HBM3", description: "NVIDIA: 550", backendType: 6 });
    const g = summarizeAdapter(h100, new Set());
    expect([g.software, g.nullBackend, g.shaderF16, g.name]).toEqual([false, false, false, "NVIDIA H100 80GB HBM3"]);
    const swiftshader = info({ vendor: "google", architecture: "", device: "SwiftShader Device (Subzero)", description: "", backendType: 6 });
    expect(summarizeAdapter(swiftshader, new Set()).software).toBe(true);
  });

  test("DeviceError exits with code 2", () => {
    const e = new DeviceError("webgpu: x");
    expect([e.exitCode, e.name]).toEqual([2, "DeviceError"]);
  });

  test("--device values", () => {
    expect(["auto", "wasm", "webgpu", "gpu", ""].map(parseDeviceChoice)).toEqual(["auto", "wasm", "webgpu", null, null]);
  });

  test("wasm is chosen when asked, without touching WebGPU", async () => {
    expect(await selectDevice("wasm")).toEqual({ kind: "wasm", reason: "device: wasm (requested)" });
  });
});

describe("no usable driver (child process with an empty Vulkan loader)", () => {
  test("webgpu fails with one DeviceError line (exit code 2); auto falls back to wasm with the reason", async () => {
    const device = join(import.meta.dir, "..", "src", "backend", "webgpu", "device.ts");
    const script = `
      import { selectDevice } from ${JSON.stringify(device)};
      const auto = await selectDevice("auto");
      let webgpu;
      try { await selectDevice("webgpu"); webgpu = "chosen"; }
      catch (e) { webgpu = { name: e.name, exitCode: e.exitCode, message: e.message }; }
      console.log(JSON.stringify({ auto: { kind: auto.kind, reason: auto.reason }, webgpu }));`;
    const child = Bun.spawn([process.execPath, "-e", script], {
      env: { ...process.env, VK_ICD_FILENAMES: "/nonexistent-icd.json", VK_DRIVER_FILES: "/nonexistent-icd.json" },
      stdout: "pipe", stderr: "pipe",
    });
    const out = await new Response(child.stdout).text();
    expect(await child.exited).toBe(0);
    const result = JSON.parse(out.trim().split("\n").pop()!) as {
      auto: { kind: string; reason: string };
      webgpu: { name: string; exitCode: number; message: string } | string;
    };
    expect(result.auto.kind).toBe("wasm");
    expect(result.auto.reason).toStartWith("device: wasm (auto: webgpu: ");
    expect(typeof result.webgpu).toBe("object");
    const err = result.webgpu as { name: string; exitCode: number; message: string };
    expect([err.name, err.exitCode]).toEqual(["DeviceError", 2]);
    expect(err.message).toStartWith("webgpu: ");
    expect(err.message).not.toContain("\n");
  }, PROCESS_TEST_MS);
});

await describeGpu("device selection with an adapter", (_backend, gpu) => {
  test("webgpu takes the adapter (software or not) after the known-answer kernel; auto takes only hardware", async () => {
    const chosen = await selectDevice("webgpu");
    expect(chosen.kind).toBe("webgpu");
    expect(chosen.reason).toContain(gpu.adapter.name);
    if (chosen.kind === "webgpu") chosen.gpu.device.destroy();
    const auto = await selectDevice("auto");
    expect(auto.kind).toBe(gpu.adapter.software ? "wasm" : "webgpu");
    if (gpu.adapter.software) expect(auto.reason).toContain("software adapter");
    if (auto.kind === "webgpu") auto.gpu.device.destroy();
  });

  test("f16 products: on by default where the adapter offers shader-f16, off when asked, a DeviceError when asked of an adapter without it", async () => {
    const byDefault = await WebGpuBackend.create(gpu);
    expect(byDefault.halfProducts).toBe(gpu.adapter.shaderF16);
    const off = await WebGpuBackend.create(gpu, { halfProducts: false });
    expect([off.halfProducts, off.productArithmetic]).toEqual([false, "products in f32"]);
    const withoutF16 = { ...gpu, adapter: { ...gpu.adapter, shaderF16: false } };
    expect((await WebGpuBackend.create(withoutF16)).halfProducts).toBe(false);
    const refused = await WebGpuBackend.create(withoutF16, { halfProducts: true }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DeviceError);
    expect((refused as DeviceError).message).toBe(`webgpu: ${gpu.adapter.name} does not offer shader-f16 for f16 products`);
  });
});
