/**
 * The line `pagellm chat` prints on stderr after each reply (src/cli/chat.ts), read back by tests:
 * `[prompt P tokens (C cached[, D from disk]), reply R tokens[, why], first token T ms, ...]`.
 */

export interface TurnStats {
  prompt: number;
  cached: number;
  /** Of the cached tokens, those loaded from the disk tier (0 when the line names none). */
  fromDisk: number;
  reply: number;
  /** Everything after "reply R tokens" up to the closing bracket (", interrupted", the timings). */
  rest: string;
  firstTokenMs: number;
}

const TURN_LINE = /\[prompt (\d+) tokens \((\d+) cached(?:, (\d+) from disk)?\), reply (\d+) tokens?([^\]]*)\]/g;

/** Every turn line in `output`, in order. */
export function turnStats(output: string): TurnStats[] {
  return [...output.matchAll(TURN_LINE)].map((m) => ({
    prompt: Number(m[1]),
    cached: Number(m[2]),
    fromDisk: Number(m[3] ?? 0),
    reply: Number(m[4]),
    rest: m[5]!,
    firstTokenMs: Number(/first token ([\d.]+) ms/.exec(m[5]!)?.[1] ?? Number.NaN),
  }));
}
