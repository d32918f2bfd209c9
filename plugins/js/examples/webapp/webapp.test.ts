// webapp natively, on the Rust example's fixtures (plugins/examples/webapp/fixtures): the same
// children, status, condition and errors as the Rust plugin's unit tests and the conformance
// test (host/tests/all/languages/conformance.rs) require of the component.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

import { PermanentError, Request, type KubeObject } from '../../sdk/index.js';
import { INFO, webapp } from './webapp.js';

// Compiled to dist/examples/webapp/, run from there: the repository's fixtures are found from
// the package root.
const root = fileURLToPath(new URL('../../../', import.meta.url));
const fixtures = `${root}/../examples/webapp/fixtures`;

function load(name: string): KubeObject[] {
  return parseAllDocuments(readFileSync(`${fixtures}/${name}`, 'utf8'))
    .map((d) => d.toJS())
    .filter((d) => d);
}

test('info matches the Rust plugin', () => {
  assert.equal(INFO.name, 'webapp');
  assert.deepEqual([INFO.parent.apiVersion, INFO.parent.kind], ['examples.reconhost.dev/v1alpha1', 'WebApp']);
  assert.deepEqual(
    INFO.children?.map((k) => ('strategy' in k ? 'with a strategy' : `${k.apiVersion} ${k.kind}`)),
    ['apps/v1 Deployment', 'v1 Service'],
  );
  assert.equal(INFO.finalizer ?? false, false);
  assert.equal(INFO.ignoreStatusChanges ?? false, false);
});

test('a WebApp becomes a Deployment and a Service', () => {
  const response = webapp(new Request(load('parent.yaml')[0]));
  const [deployment, service] = response.children.map((c) => c.object);
  assert.deepEqual(
    response.children.map((c) => [c.wave, c.readyWhen]),
    [
      [0, []],
      [0, []],
    ],
  );
  assert.equal(deployment.kind, 'Deployment');
  assert.equal(service.kind, 'Service');
  assert.equal(deployment.spec.replicas, 2);
  assert.deepEqual(deployment.spec.template.spec.containers[0], {
    name: 'app',
    image: 'nginx:1.27',
    ports: [{ containerPort: 8080, name: 'http' }],
  });
  assert.deepEqual(service.spec.ports, [{ name: 'http', port: 80, targetPort: 8080 }]);
  assert.equal(service.metadata.labels['app.kubernetes.io/managed-by'], 'reconhost');
  assert.deepEqual(response.status, { readyReplicas: 0 });
  assert.equal(response.conditions[0].status, 'False');
});

test('ready replicas come from the observed Deployment', () => {
  const parent = load('parent.yaml')[0];
  const observed = load('observed.yaml');
  const response = webapp(new Request(parent, observed));
  assert.deepEqual(response.status, { readyReplicas: 1 });
  assert.equal(response.conditions[0].message, '1 of 2 replicas ready');
  observed[0].status.readyReplicas = 2;
  const condition = webapp(new Request(parent, observed)).conditions[0];
  assert.deepEqual([condition.status, condition.reason], ['True', 'ReplicasReady']);
});

test('defaults are one replica on port 8080', () => {
  const response = webapp(new Request({ metadata: { name: 'a' }, spec: { image: 'x' } }));
  assert.equal(response.children[0].object.spec.replicas, 1);
  assert.equal(response.children[1].object.spec.ports[0].targetPort, 8080);
});

for (const parent of [...load('invalid-specs.yaml'), ...load('invalid.yaml')]) {
  const expected = parent.metadata.annotations?.expect ?? 'spec.image must not be empty';
  test(`invalid spec ${parent.metadata.name}: a permanent error with the Rust message`, () => {
    assert.throws(
      () => webapp(new Request(parent)),
      (e) => e instanceof PermanentError && e.message === expected,
    );
  });
}

test('a value of the wrong type names the field', () => {
  assert.throws(
    () => webapp(new Request({ metadata: { name: 'a' }, spec: { image: 'x', port: '80' } })),
    /spec.port must be an integer/,
  );
});
