/**
 * Numbers as JSON text writes them, for the checks a double cannot make: past 2^53 a parsed
 * number is rounded (-9223372036854775809 parses to -2^63), so a range check at the 64-bit bounds
 * needs the digits. JSON.parse hands a reviver each value's source text (Bun implements the
 * "JSON.parse source text access" proposal), which topLevelNumberText reads.
 */

/** The JSON number literal: sign, digits, fraction, exponent. */
const NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/** Largest exponent worked out exactly (a double's range ends near 1e308; past it the value is no integer a check needs). */
const MAX_EXPONENT = 400;

/** The integer a JSON number literal stands for, exactly; null when it is not one (a fraction, not a number, or beyond any double). */
export function integerOfNumberText(text: string): bigint | null {
  const m = NUMBER.exec(text.trim());
  if (m === null) return null;
  const [, sign, whole, fraction = "", exponentText = "0"] = m;
  const exponent = Number(exponentText) - fraction.length;
  if (Math.abs(exponent) > MAX_EXPONENT) return null;
  let digits = `${whole}${fraction}`;
  if (exponent < 0) {
    // The digits that the exponent moves behind the point must all be zeros.
    const cut = digits.length + exponent;
    if (!/^0*$/.test(digits.slice(Math.max(0, cut)))) return null;
    digits = cut <= 0 ? "0" : digits.slice(0, cut);
  }
  const magnitude = BigInt(digits) * 10n ** BigInt(Math.max(0, exponent));
  return sign === "-" ? -magnitude : magnitude;
}

type Reviver = (this: unknown, key: string, value: unknown, context?: { source?: string }) => unknown;

/**
 * The source text of the number under `key` at the top level of the JSON object `json`, or null
 * (no such key, or not a number). Parses `json` again: call it only when a parsed number needs
 * its digits.
 */
export function topLevelNumberText(json: string, key: string): string | null {
  const found: [unknown, string][] = [];
  const reviver: Reviver = function (k, v, context) {
    if (k === key && typeof v === "number" && context?.source !== undefined) found.push([this, context.source]);
    return v;
  };
  const root: unknown = JSON.parse(json, reviver as (key: string, value: unknown) => unknown);
  return found.find(([holder]) => holder === root)?.[1] ?? null;
}
