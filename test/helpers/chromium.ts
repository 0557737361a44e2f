/**
 * Headless Chromium for the tests that need a browser (a chart's picture, a page calling the
 * server). Outside CI such a test skips, saying why, when no Chromium is installed; under CI=true
 * a missing Chromium fails it (.ci/run installs Debian's chromium).
 */

/** The Chromium on PATH, or null. */
function findChromium(): string | null {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    const path = Bun.which(name);
    if (path !== null) return path;
  }
  return null;
}

/** The browser a test runs, or null when there is none. */
export const browser = findChromium();

/** Whether the browser tests run (a Chromium, or CI, where its absence fails them); outside CI without one, `what` is said skipped. */
export function browserTestsRun(what: string): boolean {
  const inCi = process.env.CI === "true";
  if (browser === null && !inCi) console.warn(`[skip] ${what}: no chromium on PATH (apt-get install -y chromium)`);
  return browser !== null || inCi;
}

/** The browser's path; under CI without one, the error that fails the test. */
export function requireBrowser(): string {
  if (browser === null) throw new Error("CI=true but no chromium on PATH: .ci/run installs it (apt-get install -y chromium)");
  return browser;
}
