/**
 * The object a JSON text holds, or null when the text is not JSON or holds something else (an
 * array, a string, a number). A tool call's arguments are such a text: templates and the
 * Anthropic API want the object, and a model's malformed arguments must not throw.
 */
export function jsonObjectOf(text: string): Record<string, unknown> | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}
