/**
 * JSON Schema `format`s that constrain strings, as regular expressions over the decoded text
 * (RFC 3339 dates and times, RFC 4122 UUIDs, RFC 791/4291 addresses, RFC 1123 host names, the
 * HTML living standard's e-mail address, RFC 3986-shaped URIs, ISO 8601 durations). A format not
 * listed here is an annotation, as JSON Schema 2019-09 and later define it: it does not constrain.
 */

// Real calendar dates: 30-day months, February's 28 days and the 29th of leap years; no year 0000.
const YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
const LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)";
const DATE = [
  `${YEAR}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])`,
  `${YEAR}-(0[469]|11)-(0[1-9]|[12][0-9]|30)`,
  `${YEAR}-02-(0[1-9]|1[0-9]|2[0-8])`,
  `${LEAP_YEAR}-02-29`,
].map((d) => `(${d})`).join("|");
const TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
const OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
const IPV4 = `(${OCTET}\\.){3}${OCTET}`;
const H16 = "[0-9a-fA-F]{1,4}";
const LS32 = `(${H16}:${H16}|${IPV4})`;
const IPV6 = [
  `(${H16}:){6}${LS32}`,
  `::(${H16}:){5}${LS32}`,
  `(${H16})?::(${H16}:){4}${LS32}`,
  `((${H16}:){0,1}${H16})?::(${H16}:){3}${LS32}`,
  `((${H16}:){0,2}${H16})?::(${H16}:){2}${LS32}`,
  `((${H16}:){0,3}${H16})?::${H16}:${LS32}`,
  `((${H16}:){0,4}${H16})?::${LS32}`,
  `((${H16}:){0,5}${H16})?::${H16}`,
  `((${H16}:){0,6}${H16})?::`,
].map((b) => `(${b})`).join("|");
const LABEL = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
const HOSTNAME = `${LABEL}(\\.${LABEL})*`;
const DUR_TIME = "T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S)";
const DURATION = `P(([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M)?([0-9]+D)?)(${DUR_TIME})?|${DUR_TIME}|[0-9]+W)`;

const FORMATS: ReadonlyMap<string, string> = new Map([
  ["date", DATE],
  ["time", TIME],
  ["date-time", `(${DATE})[Tt]${TIME}`],
  ["duration", DURATION],
  ["email", "[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@" + HOSTNAME],
  ["idn-email", "[^@\\s]+@[^@\\s]+"],
  ["hostname", HOSTNAME],
  ["ipv4", IPV4],
  ["ipv6", IPV6],
  ["uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"],
  ["uri", "[a-zA-Z][a-zA-Z0-9+.-]*:[^\\s\"<>\\\\^`{|}]*"],
  ["uri-reference", "[^\\s\"<>\\\\^`{|}]*"],
  ["iri", "[a-zA-Z][a-zA-Z0-9+.-]*:[^\\s\"<>\\\\^`{|}]*"],
  ["iri-reference", "[^\\s\"<>\\\\^`{|}]*"],
  ["uri-template", "[^\\s\"<>\\\\^`|]*"],
  ["json-pointer", "(/([^/~]|~[01])*)*"],
  ["relative-json-pointer", "(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)"],
]);

/** The full-match regular expression of a string format, or undefined where it does not constrain. */
export function formatRegex(format: string): string | undefined {
  return FORMATS.get(format);
}
