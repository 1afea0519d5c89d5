// Checks api/openapi.yaml: a valid OpenAPI 3 document (every $ref resolves),
// and exactly the routes cohortd serves (`cohortd --routes`), no more, no less.
// usage: node tests/openapi_check.mjs api/openapi.yaml path/to/cohortd
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const SwaggerParser = require("@apidevtools/swagger-parser");

const [specPath, cohortd] = process.argv.slice(2);
let failures = 0;
const fail = (msg) => { console.error(`FAIL: ${msg}`); failures++; };

const api = await SwaggerParser.validate(specPath).catch((e) => {
  fail(`${specPath} is not a valid OpenAPI document: ${e.message}`);
  return null;
});

const norm = (p) => p.replace(/\{[^}]*\}/g, "{}");
const served = new Set(
  execFileSync(cohortd, ["--routes"], { encoding: "utf8" })
    .trim().split("\n").map((l) => { const [m, p] = l.split(" "); return `${m} ${norm(p)}`; }),
);
const described = new Set();
if (api) {
  for (const [path, item] of Object.entries(api.paths)) {
    for (const m of ["get", "post", "put", "delete", "patch"]) {
      if (item[m]) described.add(`${m.toUpperCase()} ${norm(path)}`);
    }
  }
}
if (api) {
  for (const r of served) if (!described.has(r)) fail(`served but not in the spec: ${r}`);
  for (const r of described) if (!served.has(r)) fail(`in the spec but not served: ${r}`);
}

console.log(`openapi: ${described.size} operations described, ${served.size} served`);
console.log(`${failures === 0 ? 1 : 0} passed, ${failures === 0 ? 0 : 1} failed`);
process.exit(failures === 0 ? 0 : 1);
