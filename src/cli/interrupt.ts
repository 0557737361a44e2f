/**
 * Ctrl-C: the first SIGINT asks the run to stop (finished results are already written; the
 * command then exits 130 with a one-line message); a second one exits at once.
 */
import { PagellmError } from "../errors.ts";

export class InterruptedError extends PagellmError {
  override readonly exitCode = 130;
}

/** Call `stop` on the first SIGINT/SIGTERM; returns a function that removes the handlers. */
export function onInterrupt(stop: () => void): () => void {
  let count = 0;
  const handler = () => {
    count++;
    if (count === 1) stop();
    else process.exit(130);
  };
  process.on("SIGINT", handler);
  process.on("SIGTERM", handler);
  return () => {
    process.off("SIGINT", handler);
    process.off("SIGTERM", handler);
  };
}
