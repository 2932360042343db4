// Builds the Cockpit package into dist/ (not committed): one bundle of the page (React,
// PatternFly) with its CSS and fonts, plus index.html and manifest.json.
//
//   npm ci && npm run build       or: node build.mjs [--outdir DIR]
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const at = process.argv.indexOf("--outdir");
const outdir = at > 0 ? process.argv[at + 1] : join(here, "dist");

rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });
await esbuild.build({
    entryPoints: { index: join(here, "src/index.jsx") },
    bundle: true,
    minify: true,
    outdir,
    target: ["chrome100", "firefox100", "safari15"],
    jsx: "automatic",
    loader: { ".woff": "file", ".woff2": "file", ".ttf": "file", ".eot": "file", ".svg": "file", ".png": "file", ".jpg": "file", ".gif": "file" },
    assetNames: "assets/[name]-[hash]",
    define: { "process.env.NODE_ENV": '"production"' },
    legalComments: "linked",
    logLevel: "warning",
});
for (const file of ["index.html", "manifest.json"])
    copyFileSync(join(here, "src", file), join(outdir, file));
console.log(`built the Cockpit page into ${outdir}`);
