/**
 * Preloaded by bun test (bunfig.toml): the default time limit of every test, two minutes instead
 * of bun's five seconds, so a test that computes for a while on a busy shared 2-core machine does
 * not fail for it (a test that hangs still fails). Tests that start a process or a server name
 * their own limit besides (test/helpers/limits.ts).
 *
 * bunfig has no timeout key, and setDefaultTimeout called here applies to the first test file
 * only (Bun 1.4.5: the second file's tests are back at 5 s, measured with three 6-second tests in
 * three files). So each test file gets the call itself: a runtime plugin puts it in front of the
 * file's source as it loads, on its first line so that every line number stays the same.
 */
import { plugin } from "bun";
import { setDefaultTimeout } from "bun:test";

const DEFAULT_TEST_MS = 120_000;

setDefaultTimeout(DEFAULT_TEST_MS);

plugin({
  name: "pagellm test time limit",
  setup(build) {
    build.onLoad({ filter: /\.test\.ts$/ }, async ({ path }) => ({
      contents: `import { setDefaultTimeout as __pagellmSetDefaultTimeout } from "bun:test"; __pagellmSetDefaultTimeout(${DEFAULT_TEST_MS}); ${await Bun.file(path).text()}`,
      loader: "ts",
    }));
  },
});
