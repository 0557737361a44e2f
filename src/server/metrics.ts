/**
 * `GET /metrics`: Prometheus text exposition with vLLM's metric names, prefixed `pagellm:`
 * instead of `vllm:` (a vLLM dashboard needs one substitution), each with vLLM's `model_name`
 * label and histogram buckets. Gauges and the prefix-cache counters are read from the engine when
 * scraped; request and token counts and the latency histograms are recorded here from the outputs
 * the front door hands each request (times are when a step's tokens reached the server).
 */
import type { EngineStats } from "../engine/engine.ts";
import type { EngineOutput } from "../engine/engine-output.ts";
import type { SubmittedRequest } from "../llm/output-stream.ts";

/** vLLM's buckets (vllm/v1/metrics/loggers.py), in seconds. */
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

/** A cumulative histogram as Prometheus exposes it. */
export class Histogram {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) this.counts[i]!++;
  }

  /** The _bucket, _sum and _count lines of metric `name` with `labels` (`k="v"` pairs, joined). */
  lines(name: string, labels: string): string[] {
    const out = this.buckets.map((le, i) => `${name}_bucket{${labels},le="${le}"} ${this.counts[i]}`);
    out.push(`${name}_bucket{${labels},le="+Inf"} ${this.count}`, `${name}_sum{${labels}} ${this.sum}`, `${name}_count{${labels}} ${this.count}`);
    return out;
  }
}

/** Where each sequence's previous token reached the server, for inter-token latency. */
interface TokenClock {
  lastMs: number;
  numTokens: number;
}

export class ServeMetrics {
  promptTokens = 0;
  generationTokens = 0;
  readonly finished = new Map<string, number>([["stop", 0], ["length", 0], ["abort", 0], ["error", 0]]);
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly itl = new Histogram(ITL_BUCKETS);
  readonly e2e = new Histogram(E2E_BUCKETS);
  /** Per sample ("request#index"): where its previous token reached the server. */
  private readonly clocks = new Map<string, TokenClock>();

  constructor(readonly modelName: string) {}

  /** The prompts of a new submission (each once: a prompt is computed once for its n samples). */
  requestArrived(prompts: readonly SubmittedRequest[]): void {
    for (const p of prompts) this.promptTokens += p.promptTokenIds.length;
  }

  /** One sample's output of a step, at time `nowMs`. */
  observe(output: EngineOutput, nowMs: number): void {
    const key = `${output.requestId}#${output.index}`;
    const clock = this.clocks.get(key);
    const numTokens = output.usage.completionTokens;
    const fresh = numTokens - (clock?.numTokens ?? 0);
    const arrivalMs = output.timing.arrivalMs;
    if (fresh > 0) {
      this.generationTokens += fresh;
      if (clock === undefined) this.ttft.observe((nowMs - arrivalMs) / 1000);
      else for (let i = 0; i < fresh; i++) this.itl.observe((nowMs - clock.lastMs) / 1000 / fresh);
      this.clocks.set(key, { lastMs: nowMs, numTokens });
    }
    if (output.finishReason !== null) {
      this.clocks.delete(key);
      const reason = output.finishReason;
      this.finished.set(reason, (this.finished.get(reason) ?? 0) + 1);
      this.e2e.observe((nowMs - arrivalMs) / 1000);
    }
  }

  /** The exposition text, with the engine's gauges and cache counters as of now. */
  render(stats: EngineStats): string {
    return renderMetrics([{ metrics: this, stats }], false);
  }

  /** This model's samples into `out`, labelled `label`; the engine's gauges and cache counters when it is loaded (`stats`). */
  samples(out: MetricSet, stats: EngineStats | null, label: string): void {
    const one = (name: string, type: MetricType, help: string, value: number) => out.add(name, type, help, [`pagellm:${name}{${label}} ${value}`]);
    if (stats !== null) {
      one("num_requests_running", "gauge", "Number of requests in the running batch (sequences holding KV blocks).", stats.numRunning);
      one("num_requests_waiting", "gauge", "Number of requests waiting for a place in the batch.", stats.numWaiting);
      one("kv_cache_usage_perc", "gauge", "KV cache usage: fraction of the KV blocks held by requests (1 = full).", stats.blocksInUse / stats.numBlocks);
      one("kv_cache_blocks_in_use", "gauge", "KV blocks held by requests (pagellm's own: the count behind kv_cache_usage_perc).", stats.blocksInUse);
      one("kv_cache_num_blocks", "gauge", "KV blocks in the pool (pagellm's own).", stats.numBlocks);
      one("prefix_cache_queries_total", "counter", "Prefix cache queries, in tokens.", stats.prefixQueries);
      one("prefix_cache_hits_total", "counter", "Prefix cache hits, in tokens.", stats.prefixHits);
      if (stats.tier !== null) {
        one("prefix_cache_disk_hits_total", "counter", "Prefix cache hits read from the disk KV cache (--kv-cache-dir), in tokens.", stats.prefixTierHits);
        one("prefix_cache_disk_read_bytes_total", "counter", "Bytes of KV blocks read from the disk KV cache.", stats.tier.bytesRead);
        one("prefix_cache_disk_written_bytes_total", "counter", "Bytes of KV blocks written to the disk KV cache.", stats.tier.bytesWritten);
        one("prefix_cache_disk_rejected_blocks_total", "counter", "Disk KV blocks found damaged or foreign, removed and recomputed.", stats.tier.blocksRejected);
      }
      one("num_preemptions_total", "counter", "Cumulative number of preemptions.", stats.preemptions);
    }
    one("prompt_tokens_total", "counter", "Number of prefill tokens processed (each prompt once, cached tokens included).", this.promptTokens);
    one("generation_tokens_total", "counter", "Number of generation tokens processed.", this.generationTokens);
    out.add("request_success_total", "counter", "Count of finished sequences (one per sample), by finish reason.",
      [...this.finished].map(([reason, n]) => `pagellm:request_success_total{${label},finished_reason="${reason}"} ${n}`));
    out.add("time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", this.ttft.lines("pagellm:time_to_first_token_seconds", label));
    out.add("inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.", this.itl.lines("pagellm:inter_token_latency_seconds", label));
    out.add("e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.", this.e2e.lines("pagellm:e2e_request_latency_seconds", label));
  }
}

type MetricType = "gauge" | "counter" | "histogram";

/** Metrics by name, each with its HELP and TYPE once and the samples of every model, in the order first added. */
export class MetricSet {
  private readonly metrics = new Map<string, { type: MetricType; help: string; lines: string[] }>();

  add(name: string, type: MetricType, help: string, lines: readonly string[]): void {
    let m = this.metrics.get(name);
    if (m === undefined) this.metrics.set(name, (m = { type, help, lines: [] }));
    m.lines.push(...lines);
  }

  render(): string {
    const out: string[] = [];
    for (const [name, m] of this.metrics) out.push(`# HELP pagellm:${name} ${m.help}`, `# TYPE pagellm:${name} ${m.type}`, ...m.lines);
    return out.join("\n") + "\n";
  }
}

/**
 * The exposition text of several models' metrics (`stats` null: a model not loaded), each series
 * labelled with vLLM's `model_name` and, when `modelLabel`, also `model` (llama-server's router's).
 */
export function renderMetrics(models: readonly { metrics: ServeMetrics; stats: EngineStats | null }[], modelLabel: boolean, into = new MetricSet()): string {
  for (const { metrics, stats } of models) {
    const name = escapeLabel(metrics.modelName);
    metrics.samples(into, stats, modelLabel ? `model_name="${name}",model="${name}"` : `model_name="${name}"`);
  }
  return into.render();
}

export function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}
