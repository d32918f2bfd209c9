// The SDK natively: requests, the declarations, the response builder, what reaches the contract
// through reconciler(), errors, the host stand-in. The conversions one by one are in wire.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  Check,
  Comparison,
  ConditionStatus,
  EventType,
  Kind,
  Operand,
  PermanentError,
  Request,
  Response,
  TransientError,
  UpdateMethod,
  UpdateStrategy,
  host,
  reconciler,
  type Info,
} from '../sdk/index.js';

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

const INFO: Info = { name: 'w', parent: new Kind('example.com/v1', 'Widget'), children: [new Kind('v1', 'ConfigMap')] };

test('info is declared on the wire with defaults', () => {
  assert.deepEqual(reconciler(INFO, () => new Response()).info(), {
    name: 'w',
    version: '0.1.0',
    parent: { apiVersion: 'example.com/v1', kind: 'Widget' },
    children: [{ kind: { apiVersion: 'v1', kind: 'ConfigMap' }, updateStrategy: { method: 'in-place', statusChecks: [] } }],
    reads: [],
    finalizer: false,
    ignoreStatusChanges: false,
  });
});

test('info with strategies, reads, a finalizer and ignoreStatusChanges reaches the wire', () => {
  const info = reconciler(
    {
      name: 'shop',
      version: '1.2.3',
      parent: new Kind('example.com/v1', 'Shop'),
      children: [
        new Kind('v1', 'ConfigMap'),
        {
          kind: new Kind('apps/v1', 'Deployment'),
          strategy: new UpdateStrategy(UpdateMethod.RollingInPlace).statusCheck(Check.condition('Available', ConditionStatus.True)),
        },
      ],
      reads: [new Kind('v1', 'Secret')],
      finalizer: true,
      ignoreStatusChanges: true,
    },
    () => new Response(),
  ).info();
  assert.deepEqual(info.children[1], {
    kind: { apiVersion: 'apps/v1', kind: 'Deployment' },
    updateStrategy: {
      method: 'rolling-in-place',
      statusChecks: [{ tag: 'condition', val: { type: 'Available', status: 'true' } }],
    },
  });
  assert.deepEqual(info.reads, [{ apiVersion: 'v1', kind: 'Secret' }]);
  assert.deepEqual([info.finalizer, info.ignoreStatusChanges], [true, true]);
});

test('a mistake in info fails when the exports are made (at build time), not on a call', () => {
  const strategy = new UpdateStrategy();
  (strategy as { method: string }).method = 'Rolling';
  assert.throws(
    () => reconciler({ ...INFO, children: [{ kind: new Kind('v1', 'ConfigMap'), strategy }] }, () => new Response()),
    /an update strategy's method is one of InPlace, OnDelete, Recreate, RollingInPlace, RollingRecreate, not "Rolling"/,
  );
});

test('the builder collects everything in order', () => {
  const response = new Response()
    .child({ kind: 'A' })
    .childInWave(2, { kind: 'B' }, [Check.condition('Ready', 'True')])
    .withStatus({ phase: 'x' })
    .ready(false, 'Waiting', 'not yet')
    .condition('Degraded', ConditionStatus.Unknown, 'NoData', 'no data')
    .event('Created', 'made A')
    .warning('Slow', 'B is slow')
    .requeueAfterMs(1500)
    .finalized();
  assert.deepEqual(response.children, [
    { object: { kind: 'A' }, wave: 0, readyWhen: [] },
    { object: { kind: 'B' }, wave: 2, readyWhen: [{ kind: 'condition', type: 'Ready', status: 'True' }] },
  ]);
  assert.deepEqual(response.status, { phase: 'x' });
  assert.deepEqual(
    response.conditions.map((c) => [c.type, c.status]),
    [
      ['Ready', 'False'],
      ['Degraded', 'Unknown'],
    ],
  );
  assert.deepEqual(
    response.events.map((e) => [e.type, e.reason]),
    [
      [EventType.Normal, 'Created'],
      [EventType.Warning, 'Slow'],
    ],
  );
  assert.equal(response.requeueMs, 1500);
  assert.equal(response.isFinalized, true);
  assert.equal(response.parentMetadata, undefined);
});

test('the builder reaches the wire in order, with u64 as bigint', () => {
  const { reconcile } = reconciler(INFO, () =>
    new Response()
      .child({ kind: 'A' })
      .childInWave(1, { kind: 'B' }, [Check.equals('status.phase', 'Running')])
      .withStatus({ phase: 'x' })
      .ready(false, 'Waiting', 'not yet')
      .condition('Degraded', 'Unknown', 'NoData', 'no data')
      .event('Created', 'made A')
      .warning('Slow', 'B is slow')
      .requeueAfterMs(1500)
      .parentLabel('b', '1')
      .parentLabel('a', '2')
      .finalized(),
  );
  const wire = reconcile({ parent: JSON.stringify(parent({})), children: [], config: '{}', finalizing: false });
  assert.deepEqual(wire.children, [
    { object: '{"kind":"A"}', wave: 0, readyWhen: [] },
    {
      object: '{"kind":"B"}',
      wave: 1,
      readyWhen: [{ tag: 'field', val: { path: 'status.phase', comparison: 'equal', operand: { tag: 'value', val: '"Running"' } } }],
    },
  ]);
  assert.equal(wire.status, '{"phase":"x"}');
  assert.deepEqual(
    wire.conditions.map((c) => [c.type, c.status]),
    [
      ['Ready', 'false'],
      ['Degraded', 'unknown'],
    ],
  );
  assert.deepEqual(
    wire.events.map((e) => e.type),
    ['normal', 'warning'],
  );
  assert.equal(wire.requeueAfterMs, 1500n);
  assert.equal(wire.finalized, true);
  assert.deepEqual(wire.parentMetadata, {
    labels: [
      ['a', '2'],
      ['b', '1'],
    ],
    annotations: [],
  });
});

test('a condition takes a ConditionStatus, not a boolean', () => {
  const untyped = new Response() as unknown as { condition(...args: unknown[]): unknown };
  assert.throws(() => untyped.condition('Ready', true, 'R', 'm'), /a condition's status is one of True, False, Unknown, not true/);
  assert.throws(() => untyped.condition('Ready', undefined, 'R', 'm'), TypeError);
  assert.throws(() => untyped.condition('Ready', 'true', 'R', 'm'), TypeError);
  assert.throws(() => Check.condition('Available', 'yes' as ConditionStatus), TypeError);
  assert.deepEqual(new Response().ready(true, 'R', 'm').conditions[0].status, ConditionStatus.True);
});

test('requeueAfterMs takes whole milliseconds', () => {
  for (const ms of [1.5, -1, Number.NaN, Infinity, 2 ** 53]) {
    assert.throws(() => new Response().requeueAfterMs(ms), /whole milliseconds/, String(ms));
  }
  assert.equal(new Response().requeueAfterMs(0).requeueMs, 0);
  assert.equal(new Response().requeueAfterMs(30_000).requeueMs, 30_000);
});

test('a wave is a u32 and readyWhen takes checks only', () => {
  for (const wave of [-1, 2 ** 32, 0.5, Number.NaN]) {
    assert.throws(() => new Response().childInWave(wave, {}), /a wave is an integer/, String(wave));
  }
  assert.equal(new Response().childInWave(2 ** 32 - 1, {}).children[0].wave, 2 ** 32 - 1);
  assert.throws(() => new Response().childInWave(1, {}, [{ type: 'Ready' } as unknown as Check]), /a ready check is made by/);
  const checks = new Set([Check.equals('a', 1)]);
  assert.deepEqual(new Response().childInWave(1, {}, checks).children[0].readyWhen, [...checks]);
});

test('parent labels and annotations collect by key', () => {
  const response = new Response().parentLabel('b', '1').parentLabel('a', '2').parentAnnotation('note', 'x').parentLabel('b', '3');
  assert.deepEqual(response.parentMetadata, {
    labels: new Map([
      ['b', '3'],
      ['a', '2'],
    ]),
    annotations: new Map([['note', 'x']]),
  });
  assert.deepEqual(new Response().parentAnnotation('__proto__', 'v').parentMetadata?.annotations, new Map([['__proto__', 'v']]));
});

test('checks are condition and field checks', () => {
  assert.deepEqual(Check.condition('Available', 'False'), { kind: 'condition', type: 'Available', status: 'False' });
  assert.deepEqual(Check.equals('status.phase', 'Running'), Check.field('status.phase', Comparison.Equal, Operand.value('Running')));
  assert.deepEqual(Check.field('status.readyReplicas', 'AtLeast', Operand.field('spec.replicas')), {
    kind: 'field',
    path: 'status.readyReplicas',
    comparison: 'AtLeast',
    operand: { kind: 'field', path: 'spec.replicas' },
  });
  assert.throws(() => Check.field('a', 'at-least' as Comparison, Operand.value(1)), /comparison is one of Equal, NotEqual, AtLeast, AtMost/);
  assert.throws(() => Check.field('a', 'AtLeast', 1 as unknown as Operand), /made by Operand.value or Operand.field/);
});

test('an update strategy defaults to in place and collects status checks', () => {
  assert.equal(new UpdateStrategy().method, 'InPlace');
  const rolling = new UpdateStrategy('RollingRecreate').statusCheck(Check.equals('status.phase', 'Running'));
  assert.deepEqual(rolling.statusChecks, [Check.equals('status.phase', 'Running')]);
  assert.equal(new UpdateStrategy().statusChecks.length, 0, 'not shared');
  assert.throws(() => new UpdateStrategy('rolling' as UpdateMethod), TypeError);
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
