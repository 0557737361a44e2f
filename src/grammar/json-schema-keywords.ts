/**
 * The keywords of JSON Schema as this compiler reads them: the ones it enforces, the annotations
 * (which constrain nothing), and the ones it refuses. Unknown keywords are ignored, as the
 * specification says.
 */

/** Keywords that say something of a schema, not of its instances. */
export const ANNOTATIONS = new Set([
  "$schema", "$id", "id", "$comment", "$anchor", "$defs", "definitions", "title", "description", "default", "examples", "example",
  "readOnly", "writeOnly", "deprecated", "$vocabulary", "$dynamicAnchor", "contentMediaType", "contentEncoding", "nullable",
]);
/** Keywords this compiler does not enforce: a schema using them is refused. */
export const REFUSED = ["if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains", "$dynamicRef", "$recursiveRef"];

/** Every keyword this compiler reads (enforced or refused). */
const KNOWN = new Set([
  "type", "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
  "multipleOf", "properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties",
  "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "allOf", "anyOf", "oneOf", "not", "$ref", ...REFUSED,
]);
export function isKnownKeyword(k: string): boolean {
  return KNOWN.has(k);
}

/** Whether a keyword constrains instances (an unknown or annotation keyword does not). */
export function isAssertion(k: string): boolean {
  return KNOWN.has(k) && !ANNOTATIONS.has(k);
}

