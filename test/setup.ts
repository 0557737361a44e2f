// Preloaded by bun test (bunfig.toml). Whole generations on a shared 2-core machine can take
// tens of seconds; a test that hangs still fails, after two minutes instead of five seconds.
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(120_000);
