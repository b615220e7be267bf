// Runs a libtest binary built for wasm32-unknown-unknown under Node.
// There is no stdio on that target, so libtest's report is invisible: a failing test
// panics, panics abort (trap) on wasm32, and a trap fails this script. We print our own
// summary line so CI logs say what ran.
import { readFileSync } from "node:fs";

const path = process.argv[2];
const bytes = readFileSync(path);
const module = await WebAssembly.compile(bytes);
const imports = {};
for (const imp of WebAssembly.Module.imports(module)) {
  imports[imp.module] ??= {};
  imports[imp.module][imp.name] = () => {
    throw new Error(`unexpected import ${imp.module}.${imp.name}`);
  };
}
const instance = await WebAssembly.instantiate(module, imports);
const main = instance.exports.main ?? instance.exports.__main_void;
if (typeof main !== "function") {
  console.error(`${path}: no main export`);
  process.exit(2);
}
try {
  const code = main(0, 0);
  if (code !== 0 && code !== undefined) {
    console.error(`${path}: main returned ${code}`);
    process.exit(1);
  }
} catch (e) {
  console.error(`${path}: a test failed (trap: ${e.message})`);
  process.exit(1);
}
console.log(`wasm32 tests of ${path.split("/").pop()}: all passed (no trap)`);
