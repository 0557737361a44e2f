/**
 * Appends every item of `items` to `out` in place. `out.push(...items)` passes each item as an
 * argument, and a request-sized array (a prompt's tokens) overflows the call stack.
 */
export function appendAll<T>(out: T[], items: Iterable<T>): void {
  for (const item of items) out.push(item);
}
