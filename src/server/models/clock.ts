/**
 * The time the model registry reads and the timers it sets (keep_alive's expiries), behind one
 * small interface: the server runs on the system clock, tests on a fake one they move by hand
 * (never sleeping for a timer to fire).
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Runs `fn` after `ms` milliseconds; the function returned cancels it. */
  schedule(ms: number, fn: () => void): () => void;
}

export const SYSTEM_CLOCK: Clock = {
  now: () => Date.now(),
  schedule(ms, fn) {
    const timer = setTimeout(fn, ms);
    // An expiry never keeps the process alive on its own.
    timer.unref?.();
    return () => clearTimeout(timer);
  },
};
