/**
 * Time limits for tests that start a process or a server. The machines the suite runs on are
 * shared 2-core VMs, often busy with other builds: a `bun bin/pagellm ...` that takes 0.3 s on an
 * idle machine can take ten times that while two compilers run beside it. So such a test names its
 * limit explicitly, sized for that machine, and never leans on bun's 5-second default (nor on the
 * preload's, test/setup.ts, which is a backstop for the rest).
 */

/** A test that runs one or a few short CLI processes (each well under a second on an idle machine). */
export const PROCESS_TEST_MS = 90_000;

/** A test that runs a whole generation, a download from a local server or a pseudo-terminal session. */
export const LONG_PROCESS_TEST_MS = 180_000;

/**
 * The longest a child process that a test waits for synchronously (Bun.spawnSync) may run before
 * it is killed: a test blocked in spawnSync cannot be stopped by its own time limit, so the child
 * bounds itself, a little inside PROCESS_TEST_MS.
 */
export const CHILD_PROCESS_MS = 80_000;

/**
 * A test that runs no process but computes for seconds in-process (a float64 reference forward,
 * a whole model's logits): ten times its idle-machine time, so a busy machine does not fail it.
 */
export const COMPUTE_TEST_MS = 120_000;
