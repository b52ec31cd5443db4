// Builds the package twice from one source, ESM (dist/esm) and CommonJS
// (dist/cjs), each with its declarations, and marks each folder's module
// type so Node loads each .js as what it is whatever the package's type.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
rmSync(join(root, 'dist'), { recursive: true, force: true });
for (const [config, dir, type] of [
  ['tsconfig.json', 'esm', 'module'],
  ['tsconfig.cjs.json', 'cjs', 'commonjs'],
]) {
  try {
    execFileSync(process.execPath, [tsc, '-p', join(root, config)], { stdio: 'inherit' });
  } catch {
    process.exit(1); // tsc said why
  }
  writeFileSync(join(root, 'dist', dir, 'package.json'), JSON.stringify({ type }) + '\n');
}
