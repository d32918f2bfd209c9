// Builds one TypeScript plugin into a component: esbuild bundles the plugin with the SDK into
// one ES module (the WIT imports left as imports, and an entry that connects them to the SDK),
// then componentize-js (called directly: the jco CLI bundles an older componentize-js) turns it
// into a component of the `reconciler` world.
//
//   node build.mjs <plugin.ts> <wit dir> <out.wasm>
import { build } from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const [source, wit, out] = process.argv.slice(2);
if (!source || !wit || !out) {
  console.error('usage: node build.mjs <plugin.ts> <wit dir> <out.wasm>');
  process.exit(2);
}
const here = path.dirname(new URL(import.meta.url).pathname);
// The host interface the entry imports is named with the contract's version, read from the WIT
// package itself (e.g. `package reconhost:plugin@0.2.0;`).
let version;
for (const file of (await readdir(wit)).filter((f) => f.endsWith('.wit'))) {
  version ??= /^package\s+reconhost:plugin@([^;\s]+)\s*;/m.exec(await readFile(path.join(wit, file), 'utf8'))?.[1];
}
if (!version) {
  console.error(`no \`package reconhost:plugin@<version>;\` in ${wit}`);
  process.exit(2);
}
const work = await mkdtemp(path.join(tmpdir(), 'reconhost-js-'));
try {
  const entry = path.join(work, 'entry.ts');
  await writeFile(
    entry,
    [
      `import { log, get, list } from 'reconhost:plugin/host@${version}';`,
      `import { connect } from ${JSON.stringify(path.join(here, 'sdk/host.ts'))};`,
      `connect({ log, get, list } as any);`,
      `export { info, reconcile } from ${JSON.stringify(path.resolve(source))};`,
      '',
    ].join('\n'),
  );
  const bundle = path.join(work, 'plugin.js');
  await build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    external: ['reconhost:plugin/*'],
    outfile: bundle,
    logLevel: 'warning',
  });
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: path.resolve(wit),
    worldName: 'reconciler',
    // Only stdio stays (an uncaught error's message reaches stderr, and the host's error):
    // no fetch, no clocks, no randomness, so the component imports as little WASI as it can.
    disableFeatures: ['http', 'fetch-event', 'random', 'clocks'],
  });
  await mkdir(path.dirname(path.resolve(out)), { recursive: true });
  await writeFile(out, component);
} finally {
  await rm(work, { recursive: true, force: true });
}
