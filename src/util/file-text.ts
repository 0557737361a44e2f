/**
 * Text that came from a model file (a metadata key, a tensor name, a token's text, an architecture
 * name), made safe to show. A GGUF file is untrusted input: its strings may be megabytes long, hold
 * newlines that forge extra message lines, or escape sequences (ESC, the C1 CSI U+009B, OSC) that
 * rewrite the terminal, its title or the clipboard. Every message and display that shows such text
 * goes through quoteFileText (one line, quoted, cut) or, for multi-line displays, escapeControls.
 */

/** Characters shown of a quoted file string before it is cut. */
export const FILE_TEXT_MAX = 48;

/**
 * C0 controls, DEL, C1 controls, the line and paragraph separators, bidirectional overrides and
 * isolates (which reorder what follows on the line), the BOM, and lone surrogates.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

const NAMED: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

/** `text` with every unsafe character written as an escape (\n, \t, \u001b, ...) and backslashes doubled. */
export function escapeControls(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(UNSAFE, (c) => NAMED[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * `text` in double quotes for a one-line message: unsafe characters escaped (escapeControls), a
 * quote as \", and cut after `max` characters with "…" and the full length. Only the shown part is
 * escaped, so a 20 MB string costs no more than a short one.
 */
export function quoteFileText(text: string, max = FILE_TEXT_MAX): string {
  const cut = text.length > max;
  // Never cut between the halves of a surrogate pair.
  let end = cut ? max : text.length;
  if (cut && /[\ud800-\udbff]/.test(text[end - 1] ?? "")) end--;
  const shown = escapeControls(text.slice(0, end)).replace(/"/g, '\\"');
  return cut ? `"${shown}…" (${text.length} characters)` : `"${shown}"`;
}

/**
 * For displays that show a file's value bare (`pagellm info`'s "name  SmolLM2 135M"): the text as it
 * is when it is short and holds nothing unsafe, else quoted and cut as quoteFileText does.
 */
export function showFileText(text: string, max = FILE_TEXT_MAX): string {
  UNSAFE.lastIndex = 0;
  return text.length <= max && !UNSAFE.test(text) && !text.includes("\\") ? text : quoteFileText(text, max);
}

/**
 * JSON text (JSON.stringify's) with the unsafe characters JSON leaves raw (DEL, C1 controls, line
 * separators, bidirectional controls) written as \u escapes: the same JSON value, safe on a terminal.
 */
export function terminalSafeJson(json: string): string {
  // JSON.stringify escapes C0 controls and lone surrogates itself; outside strings only whitespace remains.
  return json.replace(/[\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * Generated text for a terminal (pagellm chat's replies): C0 controls but tab and newline, DEL
 * and C1 controls written as \u escapes, so a reply cannot clear the screen, set the title or
 * the clipboard. A vocabulary's tokens are file text too, and byte tokens spell any byte.
 */
export function terminalText(text: string): string {
  return text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
