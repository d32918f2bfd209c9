/**
 * Write reconhost reconcile plugins in TypeScript.
 *
 * A plugin reconciles one custom resource kind (the *parent*). The host watches, caches,
 * queues, retries and applies; the plugin answers one question: given the parent and the
 * children the host observed, what should exist? Write a function from {@link Request} to
 * {@link Response}, export what {@link reconciler} makes of it, and build with componentize-js:
 *
 * ```ts
 * import { Kind, PermanentError, Response, reconciler, type Info, type Request } from '../sdk/index.js';
 *
 * export const INFO: Info = {
 *   name: 'greeter',
 *   parent: new Kind('examples.reconhost.dev/v1alpha1', 'Greeting'),
 *   children: [new Kind('v1', 'ConfigMap')],
 * };
 *
 * export function greet(request: Request): Response {
 *   const who = request.spec().who;
 *   if (typeof who !== 'string' || who === '') throw new PermanentError('spec.who is required');
 *   return new Response()
 *     .child({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: request.name }, data: { greeting: `hello, ${who}` } })
 *     .ready(true, 'Greeted', 'the greeting exists');
 * }
 *
 * export const { info, reconcile } = reconciler(INFO, greet);
 * ```
 *
 * Contract 0.2 adds, each optional: an update strategy per child kind (`children: [{ kind,
 * strategy: new UpdateStrategy('RollingInPlace').statusCheck(Check.condition('Available',
 * 'True')) }]`), ordered waves of children with readiness checks (`childInWave(1, obj,
 * [Check.equals('status.phase', 'Bound')])`), labels and annotations on the parent
 * (`parentLabel(key, value)`, `parentAnnotation(key, value)`) and `ignoreStatusChanges: true`
 * (no call for a change to the parent's status alone).
 *
 * What the host guarantees and enforces (the WIT contract `reconhost:plugin@0.2.0`; the host
 * also keeps running plugins built against 0.1.0):
 * - Every call runs in a fresh instance: module state starts over each time.
 * - Children land in the parent's namespace with the parent as controller ownerReference; do
 *   not set `metadata.namespace` to anything else or `metadata.ownerReferences` at all.
 * - An observed child missing from the response is deleted. Return every child every time.
 * - Children are partial objects for server-side apply: set only the fields you own.
 * - Calls run under a deadline and a memory cap; logs and output are capped per call.
 * - An exception other than {@link TransientError} and {@link PermanentError} is a bug: the
 *   call traps and its message reaches the host's error, as a Rust panic does.
 */

import type { KindRef, PluginInfo, WitRequest, WitResponse } from './wit.js';
import { toWitInfo, toWitResponse } from './wire.js';

export * as host from './host.js';
export type { KindRef, PluginInfo, WitRequest, WitResponse } from './wit.js';

/** A JSON value as `JSON.parse` returns it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

/** A Kubernetes object as JSON. */
export type KubeObject = { [key: string]: Json };

/** A kind of Kubernetes object, e.g. `new Kind('apps/v1', 'Deployment')`. */
export class Kind implements KindRef {
  constructor(
    /** `group/version`, or `version` for the core group. */
    readonly apiVersion: string,
    readonly kind: string,
  ) {}
}

/** Status of a condition, as Kubernetes writes it: `'True'`, `'False'` or `'Unknown'`, also
 * named `ConditionStatus.True` and so on. */
export const ConditionStatus = { True: 'True', False: 'False', Unknown: 'Unknown' } as const;
export type ConditionStatus = (typeof ConditionStatus)[keyof typeof ConditionStatus];

/** Kubernetes event types: `'Normal'` or `'Warning'`. */
export const EventType = { Normal: 'Normal', Warning: 'Warning' } as const;
export type EventType = (typeof EventType)[keyof typeof EventType];

/** How the host changes a child that exists but differs from what the plugin wants. A missing
 * child is always created and an unwanted one always deleted, whatever the method.
 *
 * - `InPlace`: apply the change to the existing child (server-side apply). The default.
 * - `OnDelete`: never change an existing child; the desired state applies once someone
 *   deletes it.
 * - `Recreate`: delete the child and create it anew on the next reconcile (immutable fields).
 * - `RollingInPlace`: like `InPlace`, one child of the kind at a time: the next is changed only
 *   once every up-to-date child of the kind passes the status checks.
 * - `RollingRecreate`: like `Recreate`, one child of the kind at a time, with the same rule. */
export const UpdateMethod = {
  InPlace: 'InPlace',
  OnDelete: 'OnDelete',
  Recreate: 'Recreate',
  RollingInPlace: 'RollingInPlace',
  RollingRecreate: 'RollingRecreate',
} as const;
export type UpdateMethod = (typeof UpdateMethod)[keyof typeof UpdateMethod];

/** How a field compares with its operand (see {@link Check.field}): `Equal` and `NotEqual` as
 * JSON values (numbers by value; a missing field is `null`); `AtLeast` and `AtMost` only
 * between numbers (never true for a missing field or a non-number). */
export const Comparison = { Equal: 'Equal', NotEqual: 'NotEqual', AtLeast: 'AtLeast', AtMost: 'AtMost' } as const;
export type Comparison = (typeof Comparison)[keyof typeof Comparison];

/** What a field is compared with: a JSON value, `Operand.value(3)`, or another field of the
 * same object, `Operand.field('spec.replicas')`. */
export type Operand = { readonly kind: 'value'; readonly value: Json } | { readonly kind: 'field'; readonly path: string };
export const Operand = {
  /** A JSON value, e.g. `'Running'`, `3`, `true`. */
  value: (value: Json): Operand => ({ kind: 'value', value }),
  /** Another field of the same object, as a dotted path (e.g. `spec.replicas`). */
  field: (path: string): Operand => ({ kind: 'field', path }),
};

/** One readiness check on an observed child: make one with {@link Check.condition},
 * {@link Check.field} or {@link Check.equals}. Besides its checks, a child is ready only once
 * it is not being deleted and, where it reports `status.observedGeneration`, that has caught
 * up with `metadata.generation`. */
export type Check =
  | { readonly kind: 'condition'; readonly type: string; readonly status: ConditionStatus }
  | { readonly kind: 'field'; readonly path: string; readonly comparison: Comparison; readonly operand: Operand };
export const Check = {
  /** `status.conditions[]` has an entry of this type with this status, e.g.
   * `Check.condition('Available', 'True')`. */
  condition(type: string, status: ConditionStatus): Check {
    expectOneOf(status, ConditionStatus, "a condition check's status");
    return { kind: 'condition', type, status };
  },
  /** A field (dotted path from the object's root; a numeric segment indexes an array)
   * compared with an operand, e.g. `Check.field('status.readyReplicas', 'AtLeast',
   * Operand.field('spec.replicas'))`. */
  field(path: string, comparison: Comparison, operand: Operand): Check {
    expectOneOf(comparison, Comparison, "a field check's comparison");
    if (operand?.kind !== 'value' && operand?.kind !== 'field') {
      throw new TypeError(`a field check's operand is made by Operand.value or Operand.field, not ${String(operand)}`);
    }
    return { kind: 'field', path, comparison, operand };
  },
  /** The field equals a JSON value, e.g. `Check.equals('status.phase', 'Running')`. */
  equals(path: string, value: Json): Check {
    return Check.field(path, 'Equal', Operand.value(value));
  },
};

/** How the existing children of one kind are changed:
 * `new UpdateStrategy('RollingInPlace').statusCheck(Check.condition('Available', 'True'))`. */
export class UpdateStrategy {
  /** For the rolling methods: what makes an up-to-date child ready. Ignored by the others. */
  readonly statusChecks: Check[] = [];

  constructor(readonly method: UpdateMethod = 'InPlace') {
    expectOneOf(method, UpdateMethod, "an update strategy's method");
  }

  /** Adds a status check (for the rolling methods). */
  statusCheck(check: Check): this {
    expectCheck(check, 'a status check');
    this.statusChecks.push(check);
    return this;
  }
}

/** A child kind the plugin creates, with how its existing children are changed. */
export interface ChildKind {
  kind: KindRef;
  strategy: UpdateStrategy;
}

/** What a plugin declares about itself; the host reads it once and enforces it on every call. */
export interface Info {
  /** Short name, a DNS label; the host's field manager for children is `reconhost/<name>`. */
  name: string;
  /** The kind it reconciles. */
  parent: KindRef;
  /** The kinds of children it creates; any other kind is refused. A kind alone is changed in
   * place; `{ kind, strategy }` names its update strategy. */
  children?: (KindRef | ChildKind)[];
  /** The kinds it reads with `host.get` and `host.list`. */
  reads?: KindRef[];
  /** Its own version (shown in the ReconcilePlugin's status); default `0.1.0`. */
  version?: string;
  /** Keep a finalizer on parents, so a deleted parent is seen once more with `finalizing`. */
  finalizer?: boolean;
  /** Do not call the plugin again for a change that touches only the parent's `status`: for
   * plugins whose answer does not depend on the parent's status. */
  ignoreStatusChanges?: boolean;
}

/** Why a reconcile failed: the message ends up in a Warning event and a condition. */
export abstract class PluginError extends Error {}

/** Something that may work later (a dependency is not ready): retried with backoff. */
export class TransientError extends PluginError {
  override name = 'TransientError';
}

/** Something that will not work until the parent changes (an invalid spec): not retried until
 * the parent's generation changes. */
export class PermanentError extends PluginError {
  override name = 'PermanentError';
}

/** Everything the host observed about one parent. */
export class Request {
  constructor(
    /** The parent object, as the API server serves it (without managedFields). */
    readonly parent: KubeObject,
    /** The observed children: objects of the declared child kinds controlled by the parent. */
    readonly children: KubeObject[] = [],
    /** The plugin's configuration from its ReconcilePlugin, `{}` if none. */
    readonly config: KubeObject = {},
    /** The parent is being deleted: clean up and answer `finalized()`. */
    readonly finalizing = false,
  ) {}

  /** The parent's `metadata`. */
  get metadata(): KubeObject {
    const meta = this.parent['metadata'];
    return meta !== null && typeof meta === 'object' ? meta : {};
  }

  /** The parent's name. */
  get name(): string {
    return String(this.metadata['name'] ?? '');
  }

  /** The parent's namespace (empty for a cluster-scoped parent). */
  get namespace(): string {
    return String(this.metadata['namespace'] ?? '');
  }

  /** The parent's `metadata.generation`. */
  get generation(): number {
    const g = this.metadata['generation'];
    return Number.isInteger(g) ? g : 0;
  }

  /** The parent's `spec` (`{}` if it has none); a spec that is not an object is a
   * {@link PermanentError}, since retrying cannot fix it. */
  spec(): KubeObject {
    const spec = this.parent['spec'];
    if (spec === undefined || spec === null) return {};
    if (typeof spec !== 'object' || Array.isArray(spec)) {
      throw new PermanentError('invalid spec: spec must be an object');
    }
    return spec;
  }

  /** The observed child of this kind and name, if any. */
  child(apiVersion: string, kind: string, name: string): KubeObject | undefined {
    return this.children.find(
      (c) => c['apiVersion'] === apiVersion && c['kind'] === kind && c['metadata']?.['name'] === name,
    );
  }
}

/** A condition on the parent (`status.conditions`), merged by type. The host sets
 * `lastTransitionTime` and `observedGeneration`. */
export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
}

/** An Event about the parent. */
export interface Event {
  type: EventType;
  reason: string;
  message: string;
}

/** One desired child, with its wave and what makes it ready (see {@link Response.childInWave}). */
export interface Child {
  /** The child: a partial object for server-side apply, with `apiVersion`, `kind` (a declared
   * child kind) and `metadata.name`. */
  object: Json;
  /** The host creates or changes children of wave n+1 only once every child of waves up to n
   * exists as desired and is ready. 0 for children with no order. */
  wave: number;
  /** What makes this child ready, for the waves after its own. */
  readyWhen: Check[];
}

/** Labels and annotations the plugin sets on the parent (for a decorator, the object it
 * decorates), applied under the plugin's own field manager: only these keys are the plugin's;
 * a key it stops setting is removed, and nothing else of the parent changes. Keys under
 * `reconhost.dev/` are the host's and refused. */
export interface ParentMetadata {
  labels: Map<string, string>;
  annotations: Map<string, string>;
}

const U32 = 2 ** 32;

/** The desired state of one parent. Build it with the chained methods. */
export class Response {
  /** Desired children; an observed child missing from this list is deleted. */
  readonly children: Child[] = [];
  /** Desired `status` of the parent, or undefined to leave it unchanged. */
  status: KubeObject | undefined = undefined;
  readonly conditions: Condition[] = [];
  readonly events: Event[] = [];
  /** Reconcile again after this many milliseconds even if nothing changes (set it with
   * {@link requeueAfterMs}). */
  requeueMs: number | undefined = undefined;
  /** Cleanup is done; the host may remove its finalizer. */
  isFinalized = false;
  /** Labels and annotations to set on the parent, or undefined to set none (any the plugin
   * set before are removed then); see {@link parentLabel}. */
  parentMetadata: ParentMetadata | undefined = undefined;

  /** Adds a desired child (an object with apiVersion, kind and metadata.name) in wave 0. */
  child(child: Json): this {
    this.children.push({ object: child, wave: 0, readyWhen: [] });
    return this;
  }

  /** Adds a desired child in `wave`: the host creates or changes it only once every child of
   * the earlier waves exists as desired and is ready. `readyWhen` is what makes this child
   * ready, for the waves after its own. */
  childInWave(wave: number, child: Json, readyWhen: Iterable<Check> = []): this {
    if (!Number.isInteger(wave) || wave < 0 || wave >= U32) {
      throw new RangeError(`a wave is an integer from 0 to 2^32-1, not ${String(wave)}`);
    }
    const checks = [...readyWhen];
    checks.forEach((c) => expectCheck(c, 'a ready check'));
    this.children.push({ object: child, wave, readyWhen: checks });
    return this;
  }

  /** Sets the desired status (the host adds observedGeneration and conditions). */
  withStatus(status: KubeObject): this {
    this.status = status;
    return this;
  }

  /** Adds a condition, e.g. `condition('Degraded', 'Unknown', 'NoData', 'no metrics yet')`. */
  condition(type: string, status: ConditionStatus, reason: string, message: string): this {
    expectOneOf(status, ConditionStatus, "a condition's status");
    this.conditions.push({ type, status, reason, message });
    return this;
  }

  /** Adds the `Ready` condition, True or False. */
  ready(ready: boolean, reason: string, message: string): this {
    return this.condition('Ready', ready ? 'True' : 'False', reason, message);
  }

  /** Adds a Normal event. */
  event(reason: string, message: string): this {
    this.events.push({ type: 'Normal', reason, message });
    return this;
  }

  /** Adds a Warning event. */
  warning(reason: string, message: string): this {
    this.events.push({ type: 'Warning', reason, message });
    return this;
  }

  /** Asks to be called again after `ms` milliseconds, even if nothing changes. */
  requeueAfterMs(ms: number): this {
    if (!Number.isSafeInteger(ms) || ms < 0) {
      throw new RangeError(`requeueAfterMs takes whole milliseconds (an integer >= 0), not ${String(ms)}`);
    }
    this.requeueMs = ms;
    return this;
  }

  /** Reports that cleanup is done (the answer to `request.finalizing`). */
  finalized(): this {
    this.isFinalized = true;
    return this;
  }

  /** Sets a label on the parent (see {@link ParentMetadata}). Keys under `reconhost.dev/` are
   * refused by the host. */
  parentLabel(key: string, value: string): this {
    this.metadata().labels.set(key, value);
    return this;
  }

  /** Sets an annotation on the parent (see {@link ParentMetadata}). Keys under
   * `reconhost.dev/` are refused by the host. */
  parentAnnotation(key: string, value: string): this {
    this.metadata().annotations.set(key, value);
    return this;
  }

  private metadata(): ParentMetadata {
    return (this.parentMetadata ??= { labels: new Map(), annotations: new Map() });
  }
}

function expectOneOf(value: unknown, values: Record<string, string>, what: string): void {
  if (typeof value !== 'string' || !Object.values(values).includes(value)) {
    throw new TypeError(`${what} is one of ${Object.values(values).join(', ')}, not ${JSON.stringify(value)}`);
  }
}

function expectCheck(check: Check, what: string): void {
  if (check?.kind !== 'condition' && check?.kind !== 'field') {
    throw new TypeError(`${what} is made by Check.condition, Check.field or Check.equals, not ${JSON.stringify(check)}`);
  }
}

/** The component's exports, as the WIT world names them. */
export interface Exports {
  info(): PluginInfo;
  reconcile(request: WitRequest): WitResponse;
}

/** Makes the component's exports from `info` and a reconcile function:
 * `export const { info, reconcile } = reconciler(INFO, fn)`. */
export function reconciler(info: Info, fn: (request: Request) => Response): Exports {
  // Converted once, here: a mistake in it fails the build, and the host's call is free.
  const declared = toWitInfo(info);
  warm();
  return {
    info: () => declared,
    reconcile: (request: WitRequest): WitResponse => {
      let parsed: Request;
      try {
        parsed = new Request(
          JSON.parse(request.parent),
          request.children.map((c) => JSON.parse(c)),
          JSON.parse(request.config),
          request.finalizing,
        );
      } catch (e) {
        throw { tag: 'permanent', val: `the host sent invalid JSON: ${String(e)}` };
      }
      try {
        // Converted inside: a child that is not JSON is a bug like any other.
        return toWitResponse(fn(parsed));
      } catch (e) {
        if (e instanceof TransientError) throw { tag: 'transient', val: e.message };
        if (e instanceof PermanentError) throw { tag: 'permanent', val: e.message };
        // A bug, as a Rust panic is: rethrown, it is not an error variant, so the call traps.
        // The host puts the last lines of stderr in the error, and componentize-js prints four
        // of its own after ours: the stack first, the message last, so that it is among them.
        if (e instanceof Error && e.stack) console.error(e.stack.trimEnd());
        console.error(`Uncaught ${String(e)}`);
        throw e;
      }
    },
  };
}

let warmed = false;

/** componentize-js snapshots the engine (Wizer) after the module is evaluated, and every call
 * starts from that snapshot: running the SDK's own paths here leaves the engine's inline
 * caches for them in it. The plugin's function is not run: it could do anything. */
function warm(): void {
  if (warmed) return;
  warmed = true;
  const sample = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'n', labels: { a: 'b' } },
    spec: { list: [{ k: 1, v: true, x: null, f: 1.5 }] },
  };
  const text = JSON.stringify(sample);
  for (let i = 0; i < 32; i++) {
    const r = new Request(JSON.parse(text), [JSON.parse(text)], JSON.parse('{}'), false);
    r.spec();
    toWitResponse(new Response().child(r.parent).withStatus({ n: 1 }).ready(true, 'R', 'm').warning('R', 'm'));
  }
  // The rest of the contract once, so that a mistake in its conversion fails the build.
  const checks = [Check.condition('A', 'Unknown'), Check.equals('a', 1), Check.field('b', 'AtLeast', Operand.field('c'))];
  toWitResponse(
    new Response()
      .childInWave(1, sample, checks)
      .event('R', 'm')
      .requeueAfterMs(1)
      .parentLabel('a', 'b')
      .parentAnnotation('c', 'd')
      .finalized(),
  );
}
