/**
 * The thread count tests run the engine at: CI runs the whole suite once with
 * PAGELLM_TEST_THREADS=1 and once with 2, and every token-exact test must hold at both.
 */
export function testThreads(): number {
  const raw = process.env.PAGELLM_TEST_THREADS;
  const n = raw === undefined ? 1 : Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`PAGELLM_TEST_THREADS must be a positive integer, got ${raw}`);
  return n;
}
