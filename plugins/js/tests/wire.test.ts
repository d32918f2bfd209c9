// The SDK's types as the contract's, one conversion at a time (sdk/wire.ts), in the shapes
// componentize-js lifts (sdk/wit.ts): enums as their WIT names, variants as { tag, val }, a
// value operand as JSON text, tuples as arrays.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Check, Comparison, ConditionStatus, EventType, Kind, Operand, Response, UpdateMethod, UpdateStrategy } from '../sdk/index.js';
import { toWitCheck, toWitChildKind, toWitEventType, toWitInfo, toWitResponse, toWitStatus, toWitStrategy } from '../sdk/wire.js';

test('every condition status and event type maps to its contract case', () => {
  assert.deepEqual(Object.values(ConditionStatus).map(toWitStatus), ['true', 'false', 'unknown']);
  assert.deepEqual(Object.values(EventType).map(toWitEventType), ['normal', 'warning']);
  assert.throws(() => toWitStatus(true as unknown as ConditionStatus), /not true/);
  assert.throws(() => toWitStatus('toString' as ConditionStatus), TypeError);
});

test('every update method maps to its contract case', () => {
  assert.deepEqual(
    Object.values(UpdateMethod).map((m) => toWitStrategy(new UpdateStrategy(m)).method),
    ['in-place', 'on-delete', 'recreate', 'rolling-in-place', 'rolling-recreate'],
  );
});

test('every comparison maps to its contract case', () => {
  const wired = Object.values(Comparison).map((c) => toWitCheck(Check.field('a', c, Operand.value(1))));
  assert.deepEqual(
    wired.map((w) => (w.tag === 'field' ? w.val.comparison : w.tag)),
    ['equal', 'not-equal', 'at-least', 'at-most'],
  );
});

test('a condition check names type and status', () => {
  assert.deepEqual(toWitCheck(Check.condition('Available', 'False')), {
    tag: 'condition',
    val: { type: 'Available', status: 'false' },
  });
});

test('a value operand crosses as JSON text', () => {
  const operand = (value: unknown) => {
    const w = toWitCheck(Check.equals('status.x', value));
    return w.tag === 'field' ? w.val.operand : undefined;
  };
  assert.deepEqual(operand('Running'), { tag: 'value', val: '"Running"' });
  assert.deepEqual(operand(true), { tag: 'value', val: 'true' });
  assert.deepEqual(operand(3), { tag: 'value', val: '3' });
  assert.deepEqual(operand(null), { tag: 'value', val: 'null' });
  assert.deepEqual(operand(undefined), { tag: 'value', val: 'null' });
  assert.deepEqual(operand({ a: [1, null] }), { tag: 'value', val: '{"a":[1,null]}' });
});

test('a field operand crosses as its path', () => {
  assert.deepEqual(toWitCheck(Check.field('status.readyReplicas', 'AtLeast', Operand.field('spec.replicas'))), {
    tag: 'field',
    val: { path: 'status.readyReplicas', comparison: 'at-least', operand: { tag: 'field', val: 'spec.replicas' } },
  });
});

test('a strategy keeps its checks in order', () => {
  const strategy = new UpdateStrategy('RollingInPlace')
    .statusCheck(Check.condition('Available', 'True'))
    .statusCheck(Check.field('status.readyReplicas', 'AtLeast', Operand.field('spec.replicas')));
  assert.deepEqual(toWitStrategy(strategy), {
    method: 'rolling-in-place',
    statusChecks: [
      { tag: 'condition', val: { type: 'Available', status: 'true' } },
      { tag: 'field', val: { path: 'status.readyReplicas', comparison: 'at-least', operand: { tag: 'field', val: 'spec.replicas' } } },
    ],
  });
});

test('a kind alone is a child kind changed in place; a ChildKind keeps its strategy', () => {
  assert.deepEqual(toWitChildKind(new Kind('v1', 'Pod')), {
    kind: { apiVersion: 'v1', kind: 'Pod' },
    updateStrategy: { method: 'in-place', statusChecks: [] },
  });
  assert.deepEqual(toWitChildKind({ kind: new Kind('v1', 'Pod'), strategy: new UpdateStrategy('OnDelete') }), {
    kind: { apiVersion: 'v1', kind: 'Pod' },
    updateStrategy: { method: 'on-delete', statusChecks: [] },
  });
});

test('info defaults to no finalizer and every status change', () => {
  const info = toWitInfo({ name: 'shop', parent: new Kind('example.com/v1', 'Shop') });
  assert.deepEqual(info, {
    name: 'shop',
    version: '0.1.0',
    parent: { apiVersion: 'example.com/v1', kind: 'Shop' },
    children: [],
    reads: [],
    finalizer: false,
    ignoreStatusChanges: false,
  });
});

test('an empty response leaves everything unset', () => {
  assert.deepEqual(toWitResponse(new Response()), {
    children: [],
    status: undefined,
    conditions: [],
    events: [],
    requeueAfterMs: undefined,
    finalized: false,
    parentMetadata: undefined,
  });
});

test('children keep their order, waves and checks', () => {
  const wire = toWitResponse(
    new Response()
      .child({ kind: 'A' })
      .childInWave(2, { kind: 'B' }, [Check.condition('Ready', 'True'), Check.equals('data.ok', 'yes')])
      .childInWave(1, { kind: 'C' }),
  );
  assert.deepEqual(wire.children, [
    { object: '{"kind":"A"}', wave: 0, readyWhen: [] },
    {
      object: '{"kind":"B"}',
      wave: 2,
      readyWhen: [
        { tag: 'condition', val: { type: 'Ready', status: 'true' } },
        { tag: 'field', val: { path: 'data.ok', comparison: 'equal', operand: { tag: 'value', val: '"yes"' } } },
      ],
    },
    { object: '{"kind":"C"}', wave: 1, readyWhen: [] },
  ]);
});

test('parent metadata crosses as tuples sorted by key', () => {
  const wire = toWitResponse(new Response().parentLabel('b', '1').parentLabel('a', '2').parentAnnotation('z', 'x'));
  assert.deepEqual(wire.parentMetadata, {
    labels: [
      ['a', '2'],
      ['b', '1'],
    ],
    annotations: [['z', 'x']],
  });
  assert.deepEqual(toWitResponse(new Response().parentAnnotation('k', 'v')).parentMetadata, { labels: [], annotations: [['k', 'v']] });
});
