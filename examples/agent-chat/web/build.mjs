// Builds ../static/app.js from src/main.tsx (React, @weirhq/client, ai) with
// esbuild. --check builds in memory and fails if ../static/app.js is not
// what this source builds: CI runs it so the committed bundle stays fresh.
import { build } from 'esbuild';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const out = fileURLToPath(new URL('../static/app.js', import.meta.url));
const check = process.argv.includes('--check');
const res = await build({
  entryPoints: [fileURLToPath(new URL('src/main.tsx', import.meta.url))],
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  jsx: 'automatic',
  legalComments: 'none',
  define: { 'process.env.NODE_ENV': '"production"' },
  write: false,
  logLevel: 'warning',
});
const js = res.outputFiles[0].contents;
if (check) {
  let have;
  try {
    have = readFileSync(out);
  } catch {
    have = Buffer.alloc(0);
  }
  if (!Buffer.from(js).equals(have)) {
    console.error('examples/agent-chat/static/app.js is stale: run `npm run build` in examples/agent-chat/web and commit it');
    process.exit(1);
  }
  console.log('static/app.js is fresh');
} else {
  writeFileSync(out, js);
  console.log(`static/app.js: ${js.length} bytes`);
}
