/**
 * `pagellm bench decode`: single-sequence decode speed next to its memory-bandwidth limit. A
 * decode step multiplies one token by every weight matrix, so it must read all of them: at best
 * tokens/s = bandwidth / bytes of weights per token, with the bandwidth of a plain streaming read
 * measured in the same run, on the same threads.
 */
import { measureDecode, withLLM } from "./engine-runs.ts";
import { ratio, type RepeatOptions, type Summary } from "./measure.ts";
import type { BenchModel } from "./models.ts";
import { fmt, fmtPct, fmtRatio, fmtSpread, progress, type Table } from "./report.ts";
import { measureStreamBandwidth } from "./roofline.ts";

export interface DecodeOptions extends RepeatOptions {
  threads: number[];
  model: BenchModel;
  promptTokens: number;
  genTokens: number;
  streamBytes: number;
  seed: number;
}

export interface DecodeRow {
  threads: number;
  tokensPerSecond: Summary;
  msPerToken: Summary;
  generatedTokens: number;
  /** Streaming-read bandwidth on the engine's own threads, GB/s. */
  bandwidthGBps: Summary;
  /** bandwidth (best repetition) / bytes per token. */
  limitTokensPerSecond: number;
  /** achieved (median) / limit. */
  fractionOfLimit: number;
  /** tokens/s against the first thread count. */
  vsFirst: number;
}

export interface DecodeResult {
  model: string;
  bytesPerToken: number;
  rows: DecodeRow[];
}

export async function runDecodeBench(o: DecodeOptions): Promise<DecodeResult> {
  const rows: DecodeRow[] = [];
  for (const threads of o.threads) {
    progress(`decode of ${o.model.label}, ${threads} thread(s)`);
    const row = await withLLM(o.model, { threads }, async (llm): Promise<DecodeRow> => {
      const d = await measureDecode(llm, o);
      const bw = measureStreamBandwidth(llm.engine.backend, o.reps, o.streamBytes);
      // A ceiling is the best repetition: interference from other processes only ever slows one.
      const limit = (bw.max * 1e9) / o.model.bytesPerToken;
      return {
        threads, tokensPerSecond: d.tokensPerSecond, msPerToken: d.msPerToken, generatedTokens: d.generatedTokens,
        bandwidthGBps: bw, limitTokensPerSecond: limit, fractionOfLimit: d.tokensPerSecond.median / limit, vsFirst: 1,
      };
    });
    row.vsFirst = rows.length === 0 ? 1 : ratio(row.tokensPerSecond, rows[0]!.tokensPerSecond);
    rows.push(row);
  }
  return { model: o.model.label, bytesPerToken: o.model.bytesPerToken, rows };
}

export function decodeTables(r: DecodeResult): Table[] {
  return [{
    title: `single-sequence decode of ${r.model} (${fmt(r.bytesPerToken / 2 ** 20, 4)} MiB of weights per token) vs the bandwidth limit (best stream repetition); median (min-max)`,
    columns: ["threads", "tokens/s", "ms/token", "stream GB/s", "limit tokens/s", "of limit", `vs ${r.rows[0]?.threads ?? 1} thread(s)`],
    rows: r.rows.map((x) => [
      String(x.threads), fmtSpread(x.tokensPerSecond), fmtSpread(x.msPerToken), fmtSpread(x.bandwidthGBps),
      fmt(x.limitTokensPerSecond), fmtPct(x.fractionOfLimit), fmtRatio(x.vsFirst),
    ]),
  }];
}
