/**
 * The SDK's types as the contract's (`reconhost:plugin@0.2.0`, in the shapes of `wit.ts`): what
 * `reconciler` hands the host. Exported for the SDK's tests; plugins need not call these.
 */

import type { Check, ChildKind, ConditionStatus, EventType, Info, Response, UpdateStrategy } from './index.js';
import type {
  KindRef,
  PluginInfo,
  WitChildKind,
  WitComparison,
  WitReadyCheck,
  WitResponse,
  WitUpdateMethod,
  WitUpdateStrategy,
} from './wit.js';

const STATUSES = { True: 'true', False: 'false', Unknown: 'unknown' } as const;
const EVENTS = { Normal: 'normal', Warning: 'warning' } as const;
const METHODS: Record<UpdateStrategy['method'], WitUpdateMethod> = {
  InPlace: 'in-place',
  OnDelete: 'on-delete',
  Recreate: 'recreate',
  RollingInPlace: 'rolling-in-place',
  RollingRecreate: 'rolling-recreate',
};
const COMPARISONS: Record<Extract<Check, { kind: 'field' }>['comparison'], WitComparison> = {
  Equal: 'equal',
  NotEqual: 'not-equal',
  AtLeast: 'at-least',
  AtMost: 'at-most',
};

/** One of a table's values, or a TypeError naming what was given (for plugins in plain
 * JavaScript, which no type checker stops). */
function lookup<K extends string, V>(table: Record<K, V>, key: K, what: string): V {
  const value = Object.hasOwn(table, key) ? table[key] : undefined;
  if (value === undefined) {
    throw new TypeError(`${what} is one of ${Object.keys(table).join(', ')}, not ${JSON.stringify(key)}`);
  }
  return value;
}

const kindRef = (k: KindRef): KindRef => ({ apiVersion: k.apiVersion, kind: k.kind });

/** A condition status as `condition-status`. */
export function toWitStatus(status: ConditionStatus) {
  return lookup(STATUSES, status, "a condition's status");
}

/** An event type as `event-type`. */
export function toWitEventType(type: EventType) {
  return lookup(EVENTS, type, "an event's type");
}

/** A {@link Check} as `ready-check`: a value operand crosses as JSON text. */
export function toWitCheck(check: Check): WitReadyCheck {
  switch (check?.kind) {
    case 'condition':
      return { tag: 'condition', val: { type: check.type, status: toWitStatus(check.status) } };
    case 'field': {
      const o = check.operand;
      return {
        tag: 'field',
        val: {
          path: check.path,
          comparison: lookup(COMPARISONS, check.comparison, "a field check's comparison"),
          operand: o.kind === 'field' ? { tag: 'field', val: o.path } : { tag: 'value', val: JSON.stringify(o.value) ?? 'null' },
        },
      };
    }
    default:
      throw new TypeError(`a ready check is made by Check.condition, Check.field or Check.equals, not ${JSON.stringify(check)}`);
  }
}

/** An {@link UpdateStrategy} as `update-strategy`. */
export function toWitStrategy(strategy: UpdateStrategy): WitUpdateStrategy {
  return {
    method: lookup(METHODS, strategy.method, "an update strategy's method"),
    statusChecks: strategy.statusChecks.map(toWitCheck),
  };
}

/** A child kind as `child-kind`: a kind alone is changed in place. */
export function toWitChildKind(child: KindRef | ChildKind): WitChildKind {
  if ('strategy' in child) return { kind: kindRef(child.kind), updateStrategy: toWitStrategy(child.strategy) };
  return { kind: kindRef(child), updateStrategy: { method: 'in-place', statusChecks: [] } };
}

/** {@link Info} as `plugin-info`, with its defaults. */
export function toWitInfo(info: Info): PluginInfo {
  return {
    name: info.name,
    version: info.version ?? '0.1.0',
    parent: kindRef(info.parent),
    children: (info.children ?? []).map(toWitChildKind),
    reads: (info.reads ?? []).map(kindRef),
    finalizer: info.finalizer ?? false,
    ignoreStatusChanges: info.ignoreStatusChanges ?? false,
  };
}

/** Sorted by key, as the Rust SDK's maps are. */
const sorted = (m: Map<string, string>): [string, string][] =>
  [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** A {@link Response} as `response`, with `u64` as `bigint`. */
export function toWitResponse(response: Response): WitResponse {
  const metadata = response.parentMetadata;
  return {
    children: response.children.map((c) => ({
      object: JSON.stringify(c.object),
      wave: c.wave,
      readyWhen: c.readyWhen.length === 0 ? [] : c.readyWhen.map(toWitCheck),
    })),
    status: response.status === undefined ? undefined : JSON.stringify(response.status),
    conditions: response.conditions.map((c) => ({
      type: c.type,
      status: toWitStatus(c.status),
      reason: c.reason,
      message: c.message,
    })),
    events: response.events.map((e) => ({ type: toWitEventType(e.type), reason: e.reason, message: e.message })),
    requeueAfterMs: response.requeueMs === undefined ? undefined : BigInt(response.requeueMs),
    finalized: response.isFinalized,
    parentMetadata:
      metadata === undefined ? undefined : { labels: sorted(metadata.labels), annotations: sorted(metadata.annotations) },
  };
}
