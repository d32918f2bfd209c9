// The plugin's logic, natively: no component, no host.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PermanentError, Request } from '../sdk/index.js';
import { plugin } from './plugin.js';

const parent = (spec: object) =>
  new Request({
    apiVersion: '{{group}}/{{version}}',
    kind: '{{kind}}',
    metadata: { name: 'example', namespace: 'default', generation: 1 },
    spec,
  });

test('a message becomes a ConfigMap', () => {
  const response = plugin(parent({ message: 'hello' }));
  assert.equal(response.children.length, 1);
  const configMap = response.children[0].object;
  assert.equal(configMap.kind, 'ConfigMap');
  assert.equal(configMap.metadata.name, 'example');
  assert.deepEqual(configMap.data, { message: 'hello' });
  assert.equal(response.conditions[0].status, 'True');
});

test('an empty message is a permanent error', () => {
  assert.throws(() => plugin(parent({ message: '' })), (e) => e instanceof PermanentError && e.message === 'spec.message must not be empty');
});
