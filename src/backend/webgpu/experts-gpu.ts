/// <reference types="@webgpu/types" />
/**
 * A mixture-of-experts feed-forward on WebGPU, step for step src/backend/wasm/experts.ts's: the router's
 * product, then routing, grouping by expert, each expert's gate, up and down products over its
 * slots and the mixture in rank order, all as WGSL dispatches (wgsl-experts.ts), without a
 * read-back. A slot's rows are reduced in the same fixed order whichever slots share its expert's
 * group, and each token's experts are added in rank order: a token's output is the same bits alone
 * or in any batch.
 */
import { TensorName } from "../../model/checkpoint.ts";
import type { ExpertsConfig, ModelConfig } from "../../model/config.ts";
import type { ExpertRouting, GpuExpertStack, GpuWeightMatrix, ProductInput, WebGpuBackend } from "./backend.ts";
import type { FileWeights, HostMatrix } from "./file-weights.ts";

/** One layer's experts on the GPU. */
export interface GpuExpertLayer {
  router: GpuWeightMatrix; // [count][dim], with the router's bias (gpt-oss) as the product's bias
  gate: GpuExpertStack; // [count][width][dim]
  up: GpuExpertStack; // [count][width][dim]
  down: GpuExpertStack; // [count][dim][width]
}

export class GpuExperts {
  private readonly e: ExpertsConfig;
  private readonly routing: ExpertRouting;
  private readonly gate: GPUBuffer; // [T*used][width], then the activation's output
  private readonly up: GPUBuffer; // [T*used][width]
  private readonly down: GPUBuffer; // [T*used][dim]

  /** `own` keeps every buffer made here for the model to destroy. */
  constructor(private readonly gpu: WebGpuBackend, private readonly config: ModelConfig, maxTokens: number, own: (b: GPUBuffer) => GPUBuffer) {
    const e = config.experts;
    if (e === undefined) throw new Error("GpuExperts: the model has no experts");
    this.e = e;
    const routing = gpu.expertRoutingBuffers(maxTokens, e, "experts");
    for (const b of Object.values(routing)) own(b);
    this.routing = routing;
    const slots = maxTokens * e.used;
    this.gate = own(gpu.f32Buffer(slots * e.hiddenDim, "experts.gate"));
    this.up = own(gpu.f32Buffer(slots * e.hiddenDim, "experts.up"));
    this.down = own(gpu.f32Buffer(slots * config.dim, "experts.down"));
  }

  /** Upload layer l's router and expert stacks (with their biases when the experts have them). */
  static upload(gpu: WebGpuBackend, weights: FileWeights, c: ModelConfig, l: number, own: (b: GPUBuffer) => GPUBuffer): GpuExpertLayer {
    const e = c.experts!;
    const T = TensorName;
    const stack = (name: string, biasName: string): GpuExpertStack => {
      const { host, count, rows } = weights.experts(name);
      const bias = e.biases ? weights.vector(biasName) : undefined;
      const s = gpu.uploadExperts(hostData(host), host.kind === "f32" ? 0 : host.type, count, rows, host.cols, name, bias);
      for (const part of s.matrix.parts) own(part.buffer);
      if (s.bias !== null) own(s.bias);
      return s;
    };
    const router = weights.matrix(T.ffnRouter(l));
    const routerBias = e.biases ? { bias: weights.vector(T.ffnRouterBias(l)) } : {};
    const r = router.kind === "f32"
      ? gpu.uploadF32Matrix(router.values, router.rows, router.cols, T.ffnRouter(l), routerBias)
      : gpu.uploadGgmlMatrix(router.bytes, router.type, router.rows, router.cols, T.ffnRouter(l), routerBias);
    for (const part of r.parts) own(part.buffer);
    if (r.bias !== null) own(r.bias);
    return {
      router: r,
      gate: stack(T.ffnGateExperts(l), T.ffnGateExpertsBias(l)),
      up: stack(T.ffnUpExperts(l), T.ffnUpExpertsBias(l)),
      down: stack(T.ffnDownExperts(l), T.ffnDownExpertsBias(l)),
    };
  }

  /** out[t] = the mixture of token t's experts on input (the layer's normed input, [T][dim]). */
  forward(out: GPUBuffer, input: ProductInput, L: GpuExpertLayer, T: number): void {
    const { gpu, e, routing } = this;
    gpu.matmul(routing.logits, input, L.router);
    gpu.routeExperts(routing, e, T);
    gpu.expertMatmul(this.gate, input, L.gate, routing, e, T, false);
    gpu.expertMatmul(this.up, input, L.up, routing, e, T, false);
    const act = gpu.gated(e.activation === "swiglu-oai" ? "silu-oai" : "silu", this.gate, this.up, T * e.used, e.hiddenDim);
    gpu.expertMatmul(this.down, act, L.down, routing, e, T, true);
    gpu.mixExperts(out, this.down, routing, T, e.used, this.config.dim);
  }
}

/** A host matrix's data as uploaded: f32 values or ggml bytes. */
function hostData(h: HostMatrix): Float32Array | Uint8Array {
  return h.kind === "f32" ? h.values : h.bytes;
}
