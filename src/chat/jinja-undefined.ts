/**
 * Undefined values as Python's Jinja2 treats them (its default `Undefined`, which transformers'
 * apply_chat_template and vLLM render with; llama.cpp's minja is as lenient): printed it is "",
 * iterated it is empty, its length is 0, it is false, and `default` replaces it. @huggingface/jinja
 * refuses most filters on it ("Cannot apply filter trim to type: UndefinedValue"), so a real
 * template such as Hermes-2-Pro's tool_use one, which writes `param_fields.description|trim` for
 * a parameter that may have no description, did not render.
 *
 * What Jinja2 3.1 gives for each filter and test on an undefined value (measured with jinja2
 * 3.1.6's ImmutableSandboxedEnvironment, as transformers sets it up):
 * - the filters that read their operand as text (`soft_str`: trim, upper, lower, replace, ...)
 *   see "", those that iterate it (list, join, length, first, sort, map, selectattr, ...) see an
 *   empty list, and `items` an empty mapping: the library's own filter then runs on that;
 * - `default` (and its alias `d`) gives its argument, or "" without one (`d` and `count`, Jinja2's
 *   other names of default and length, are taken for every value: jinja-limits.ts);
 * - `first`, `last`, `min` and `max` of nothing are undefined (the library's `first` of an empty
 *   list gave no value at all, which failed further on);
 * - the filters Jinja2 refuses on it (int, float, abs, round, indent, attr, dictsort) stay refused;
 *   `tojson` keeps the library's `null` (Jinja2's json.dumps raises; minja writes null);
 * - the tests `sequence`, `iterable` and `callable` hold for it (Undefined has __len__,
 *   __iter__, __call__); `defined`, `string`, `none`, ... do not, as the library already says;
 * - a loop over it runs no iteration, `~` joins it as "", `x in list` is false for it, and it
 *   equals only another undefined value (the library's `undefined == none` held).
 * Attribute access on an undefined value keeps the library's leniency (undefined again), where
 * Jinja2 raises.
 */
import { Environment } from "@huggingface/jinja";

/** One of the library's runtime values (its classes are not exported: they are taken from values it makes). */
export type RuntimeValue = ReturnType<Environment["lookupVariable"]>;

type ValueClass<T> = new (value: T) => RuntimeValue;
const scratch = new Environment();
const classOf = <T>(sample: unknown): ValueClass<T> => scratch.set(`v${scratch.variables.size}`, sample).constructor as ValueClass<T>;
const StringValue = classOf<string>("");
const ArrayValue = classOf<RuntimeValue[]>([]);
const ObjectValue = classOf<Map<string, RuntimeValue>>({});
const BooleanValue = classOf<boolean>(false);
const UndefinedValue = classOf<undefined>(undefined);

export const isUndefined = (v: RuntimeValue): boolean => v.type === "UndefinedValue";

export function undefinedValue(): RuntimeValue {
  return new UndefinedValue(undefined);
}

export function booleanValue(b: boolean): RuntimeValue {
  return new BooleanValue(b);
}

/** An empty list: what a loop over an undefined value iterates. */
export function emptyList(): RuntimeValue {
  return new ArrayValue([]);
}

/** Jinja2's filters that read their operand as text (soft_str). */
const TEXT_FILTERS = new Set([
  "capitalize", "center", "e", "escape", "forceescape", "format", "lower", "replace", "string", "striptags", "title", "trim", "truncate", "upper",
  "urlencode", "urlize", "wordcount", "wordwrap",
]);
/** Jinja2's filters that iterate their operand (or take its len). */
const ITEM_FILTERS = new Set([
  "batch", "count", "first", "groupby", "join", "last", "length", "list", "map", "max", "min", "random", "reject", "rejectattr", "reverse",
  "select", "selectattr", "slice", "sort", "sum", "unique",
]);

/** The operand filter `name` works on when given `operand`: what Jinja2's filter makes of an undefined value, else `operand`. */
export function filterOperand(name: string | undefined, operand: RuntimeValue): RuntimeValue {
  if (!isUndefined(operand) || name === undefined) return operand;
  if (TEXT_FILTERS.has(name)) return new StringValue("");
  if (ITEM_FILTERS.has(name)) return new ArrayValue([]);
  if (name === "items") return new ObjectValue(new Map());
  return operand;
}

/** `default` and `d` without arguments: "" for an undefined value, else the value (Jinja2's default_value ""). */
export function bareDefault(operand: RuntimeValue): RuntimeValue {
  return isUndefined(operand) ? new StringValue("") : operand;
}

/** A filter's result; none at all (the library's first or last of an empty list) is undefined, as in Jinja2. */
export function filterResult(v: RuntimeValue | undefined): RuntimeValue {
  return v ?? new UndefinedValue(undefined);
}

/** Tests that hold for Jinja2's Undefined though the library says they do not. */
const TESTS_TRUE_OF_UNDEFINED = new Set(["sequence", "iterable", "callable"]);

/** Jinja2's answer to test `name` on `operand` where it differs from the library's; else null. */
export function undefinedTest(name: string, operand: RuntimeValue): boolean | null {
  return isUndefined(operand) && TESTS_TRUE_OF_UNDEFINED.has(name) ? true : null;
}

/** Operators whose result on an undefined operand Jinja2 defines and the library does not (or gets wrong). */
export const UNDEFINED_OPERATORS: ReadonlySet<string> = new Set(["~", "in", "not in", "==", "!="]);

/**
 * Jinja2's `left op right` where an operand is undefined: a value, or the operands the library's
 * operator should take instead (`~` joins an undefined value as ""); null: the library's own answer.
 */
export function undefinedOperation(op: string, left: RuntimeValue, right: RuntimeValue): RuntimeValue | [RuntimeValue, RuntimeValue] | null {
  if (!isUndefined(left) && !isUndefined(right)) return null;
  switch (op) {
    case "~":
      return [isUndefined(left) ? new StringValue("") : left, isUndefined(right) ? new StringValue("") : right];
    case "==":
    case "!=":
      return new BooleanValue((isUndefined(left) && isUndefined(right)) === (op === "=="));
    default: {
      // `x in seq` compares x with each item: an undefined x is in no list or mapping, nor in nothing.
      const container = right.type === "ArrayValue" || right.type === "ObjectValue" || isUndefined(right);
      return isUndefined(left) && container ? new BooleanValue(op === "not in") : null;
    }
  }
}
