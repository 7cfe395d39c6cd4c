// Builds the memory explorer into ../app/ui/static (committed: the service ships it, nothing
// is fetched at run time). `make ui` runs `npm ci` then this script.
//
// Output: index.html (from src/index.html, its asset names filled in), assets/explorer-<hash>.js
// and .css, and the lazily loaded graph chunk (Cytoscape.js) assets/chunk-<hash>.js. Hashed
// names let the service cache assets for a year; index.html itself is never cached.
import { build } from "esbuild";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(here, "../app/ui/static");
const assets = path.join(out, "assets");

await rm(out, { recursive: true, force: true });
await mkdir(assets, { recursive: true });

const result = await build({
  entryPoints: { explorer: path.join(here, "src/main.js") }, // it imports explorer.css
  bundle: true,
  splitting: true,
  format: "esm",
  minify: true,
  target: ["chrome110", "firefox115", "safari16"],
  outdir: assets,
  entryNames: "[name]-[hash]",
  chunkNames: "chunk-[hash]",
  legalComments: "linked",
  metafile: true,
  logLevel: "warning",
});

const names = Object.entries(result.metafile.outputs);
const [jsFile, main] = names.find(([, o]) => o.entryPoint);
const js = "/ui/assets/" + path.basename(jsFile);
const css = "/ui/assets/" + path.basename(main.cssBundle);
const html = (await readFile(path.join(here, "src/index.html"), "utf8"))
  .replace("{{explorer.js}}", js)
  .replace("{{explorer.css}}", css);
await writeFile(path.join(out, "index.html"), html);
// the licences of what the bundle holds, shipped beside it
const licence = await readFile(path.join(here, "node_modules/cytoscape/LICENSE"), "utf8");
await writeFile(path.join(assets, "THIRD-PARTY-LICENSES.txt"), `cytoscape (Cytoscape.js)\n\n${licence}`);
for (const [file, o] of names) {
  console.log(`${path.relative(out, file).padEnd(44)} ${(o.bytes / 1024).toFixed(1).padStart(7)} KiB`);
}
