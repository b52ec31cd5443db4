// The world-testing port: @workflow/world-testing@5.0.0-beta.35's test
// files, installed from npm by the lockfile and never committed, placed
// beside our own server.mjs in a temporary directory (they spawn the
// server.mjs next to them), and run unmodified.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { appDir } from './procs.mjs';

export const FILES = ['addition', 'idempotency', 'hooks', 'null-byte', 'errors'];

export function prepareHarness() {
  const require = createRequire(path.join(appDir, 'index.js'));
  const pkg = path.dirname(require.resolve('@workflow/world-testing/package.json'));
  const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
  if (version !== '5.0.0-beta.35') throw new Error(`@workflow/world-testing is ${version}, the port is of 5.0.0-beta.35`);
  // Inside the app's directory, so that their imports resolve from its
  // node_modules (v4's @workflow/core and @workflow/world).
  const dir = fs.mkdtempSync(path.join(appDir, '.harness-'));
  for (const f of [...FILES, 'util', 'jsonlines']) {
    fs.copyFileSync(path.join(pkg, 'dist/src', `${f}.mjs`), path.join(dir, `${f}.mjs`));
  }
  fs.copyFileSync(path.join(appDir, 'app/server.mjs'), path.join(dir, 'server.mjs'));
  return { dir, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
