// The SDK natively: requests, the response builder, the wire format, errors, the host stand-in.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Kind, PermanentError, Request, Response, TransientError, host, reconciler } from '../sdk/index.js';

const parent = (spec?: unknown) => ({
  apiVersion: 'example.com/v1',
  kind: 'Widget',
  metadata: { name: 'w', namespace: 'team-a', generation: 3 },
  ...(spec === undefined ? {} : { spec }),
});

test('a request exposes the parent identity', () => {
  const r = new Request(parent({ a: 1 }));
  assert.deepEqual([r.name, r.namespace, r.generation], ['w', 'team-a', 3]);
  assert.deepEqual(r.spec(), { a: 1 });
  assert.deepEqual(r.config, {});
  assert.equal(r.finalizing, false);
});

test('a missing spec reads as empty and a spec that is not an object is permanent', () => {
  assert.deepEqual(new Request(parent()).spec(), {});
  assert.throws(() => new Request(parent('text')).spec(), PermanentError);
  assert.throws(() => new Request(parent([1])).spec(), /spec must be an object/);
});

test('child finds an observed child by kind and name', () => {
  const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'w' } };
  const r = new Request(parent({}), [cm, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'w' } }]);
  assert.equal(r.child('v1', 'ConfigMap', 'w'), cm);
  assert.equal(r.child('v1', 'ConfigMap', 'other'), undefined);
});

const INFO = { name: 'w', parent: new Kind('example.com/v1', 'Widget'), children: [new Kind('v1', 'ConfigMap')] };

test('info is declared on the wire with defaults', () => {
  assert.deepEqual(reconciler(INFO, () => new Response()).info(), {
    name: 'w',
    version: '0.1.0',
    parent: { apiVersion: 'example.com/v1', kind: 'Widget' },
    children: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
    reads: [],
    finalizer: false,
  });
});

test('the builder reaches the wire in order, with u64 as bigint', () => {
  const { reconcile } = reconciler(INFO, () =>
    new Response()
      .child({ kind: 'A' })
      .child({ kind: 'B' })
      .withStatus({ phase: 'x' })
      .ready(false, 'Waiting', 'not yet')
      .condition('Degraded', undefined, 'Unknown', 'no data')
      .event('Created', 'made A')
      .warning('Slow', 'B is slow')
      .requeueAfter(1500)
      .finalized(),
  );
  const wire = reconcile({ parent: JSON.stringify(parent({})), children: [], config: '{}', finalizing: false });
  assert.deepEqual(wire.children, ['{"kind":"A"}', '{"kind":"B"}']);
  assert.equal(wire.status, '{"phase":"x"}');
  assert.deepEqual(
    wire.conditions.map((c) => [c.type, c.status]),
    [
      ['Ready', 'false'],
      ['Degraded', 'unknown'],
    ],
  );
  assert.deepEqual(wire.events.map((e) => e.type), ['normal', 'warning']);
  assert.equal(wire.requeueAfterMs, 1500n);
  assert.equal(wire.finalized, true);
});

test('the SDK errors become error variants and anything else is rethrown', () => {
  const call = (error: unknown) =>
    reconciler(INFO, () => {
      throw error;
    }).reconcile({ parent: '{}', children: [], config: '{}', finalizing: false });
  assert.throws(() => call(new TransientError('later')), (e) => JSON.stringify(e) === '{"tag":"transient","val":"later"}');
  assert.throws(() => call(new PermanentError('never')), (e) => JSON.stringify(e) === '{"tag":"permanent","val":"never"}');
  const bug = new TypeError('a bug');
  const stderr = console.error;
  console.error = () => {};
  try {
    assert.throws(() => call(bug), (e) => e === bug);
  } finally {
    console.error = stderr;
  }
});

test('invalid JSON from the host is a permanent error', () => {
  const { reconcile } = reconciler(INFO, () => new Response());
  assert.throws(
    () => reconcile({ parent: '{nope', children: [], config: '{}', finalizing: false }),
    (e: { tag?: string; val?: string }) => e.tag === 'permanent' && /invalid JSON/.test(e.val ?? ''),
  );
});

test('reads go to a stand-in and fail clearly without one', () => {
  const kind = new Kind('v1', 'ConfigMap');
  assert.throws(() => host.get(kind, 'team-a', 'x'), /no host outside a component/);
  const lines: string[] = [];
  host.use({
    log: (level, message) => lines.push(`${level} ${message}`),
    get: (_k, _ns, name) => (name === 'x' ? { metadata: { name } } : undefined),
    list: () => [{ metadata: { name: 'x' } }],
  });
  try {
    assert.deepEqual(host.get(kind, 'team-a', 'x'), { metadata: { name: 'x' } });
    assert.equal(host.get(kind, 'team-a', 'y'), undefined);
    assert.equal(host.list(kind, 'team-a', 'app=web').length, 1);
    host.info('hello');
    assert.deepEqual(lines, ['info hello']);
  } finally {
    host.use(undefined);
  }
});
