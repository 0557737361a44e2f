/**
 * llama2.c run.c's recorded outputs (../shared/golden/runc-greedy.json): `run MODEL -z TOKENIZER
 * -t TEMPERATURE -n STEPS -i PROMPT`, its stdout, and the completion after the prompt.
 */
import { readFileSync } from "node:fs";

export interface GoldenCase {
  model: string;
  tokenizer: string;
  prompt: string;
  steps: number;
  temperature: number;
  stdout: string;
  completion: string;
}

/** The greedy (temperature 0) cases of the golden file at `path`. */
export function greedyGoldenCases(path: string): GoldenCase[] {
  return (JSON.parse(readFileSync(path, "utf8")) as GoldenCase[]).filter((c) => c.temperature === 0);
}
