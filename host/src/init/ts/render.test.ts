// The built component (`npm run build` first), run by `reconhost render` on the fixtures: what
// the host itself would do with it. `reconhost` is taken from $RECONHOST, or from PATH.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// Compiled to dist/src/: the project is two levels up.
const root = fileURLToPath(new URL('../../', import.meta.url));
const component = `${root}build/{{name}}.wasm`;

function render(fixture: string) {
  assert.ok(existsSync(component), `${component} is missing: run npm run build first`);
  const reconhost = process.env['RECONHOST'] ?? 'reconhost';
  const done = spawnSync(reconhost, ['render', '--plugin', component, '--parent', `${root}fixtures/${fixture}`, '-o', 'json'], {
    encoding: 'utf8',
  });
  assert.equal(done.error, undefined, `running ${reconhost} (set RECONHOST to its path)`);
  return done;
}

test('the component renders a ConfigMap for the fixture', () => {
  const done = render('parent.yaml');
  assert.equal(done.status, 0, done.stderr);
  const rendered = JSON.parse(done.stdout);
  assert.equal(rendered.children.length, 1);
  assert.equal(rendered.children[0].action, 'create');
  assert.deepEqual(rendered.children[0].object.data, { message: 'hello' });
  assert.equal(rendered.conditions[0].status, 'True');
});

test('the component refuses the invalid fixture', () => {
  const done = render('invalid.yaml');
  assert.notEqual(done.status, 0);
  assert.match(done.stderr, /spec.message must not be empty/);
});
