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
 * What the host guarantees and enforces (the WIT contract `reconhost:plugin@0.1.0`):
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

/** What a plugin declares about itself; the host reads it once and enforces it on every call. */
export interface Info {
  /** Short name, a DNS label; the host's field manager for children is `reconhost/<name>`. */
  name: string;
  /** The kind it reconciles. */
  parent: KindRef;
  /** The kinds of children it creates; any other kind is refused. */
  children?: KindRef[];
  /** The kinds it reads with `host.get` and `host.list`. */
  reads?: KindRef[];
  /** Its own version (shown in the ReconcilePlugin's status); default `0.1.0`. */
  version?: string;
  /** Keep a finalizer on parents, so a deleted parent is seen once more with `finalizing`. */
  finalizer?: boolean;
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

/** A condition on the parent (`status.conditions`), merged by type; `status` undefined is
 * Unknown. The host sets `lastTransitionTime` and `observedGeneration`. */
export interface Condition {
  type: string;
  status: boolean | undefined;
  reason: string;
  message: string;
}

/** An Event about the parent. */
export interface Event {
  warning: boolean;
  reason: string;
  message: string;
}

/** The desired state of one parent. Build it with the chained methods. */
export class Response {
  /** Desired children: partial objects for server-side apply. */
  readonly children: Json[] = [];
  /** Desired `status` of the parent, or undefined to leave it unchanged. */
  status: KubeObject | undefined = undefined;
  readonly conditions: Condition[] = [];
  readonly events: Event[] = [];
  /** Reconcile again after this many milliseconds even if nothing changes. */
  requeueAfterMs: number | undefined = undefined;
  /** Cleanup is done; the host may remove its finalizer. */
  isFinalized = false;

  /** Adds a desired child (an object with apiVersion, kind and metadata.name). */
  child(child: Json): this {
    this.children.push(child);
    return this;
  }

  /** Sets the desired status (the host adds observedGeneration and conditions). */
  withStatus(status: KubeObject): this {
    this.status = status;
    return this;
  }

  /** Adds a condition: status true, false or undefined (Unknown). */
  condition(type: string, status: boolean | undefined, reason: string, message: string): this {
    this.conditions.push({ type, status, reason, message });
    return this;
  }

  /** Adds the `Ready` condition. */
  ready(ready: boolean, reason: string, message: string): this {
    return this.condition('Ready', ready, reason, message);
  }

  /** Adds a Normal event. */
  event(reason: string, message: string): this {
    this.events.push({ warning: false, reason, message });
    return this;
  }

  /** Adds a Warning event. */
  warning(reason: string, message: string): this {
    this.events.push({ warning: true, reason, message });
    return this;
  }

  /** Asks to be called again after `ms` milliseconds, even if nothing changes. */
  requeueAfter(ms: number): this {
    this.requeueAfterMs = Math.max(0, Math.floor(ms));
    return this;
  }

  /** Reports that cleanup is done (the answer to `request.finalizing`). */
  finalized(): this {
    this.isFinalized = true;
    return this;
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
  warm();
  const kind = (k: KindRef): KindRef => ({ apiVersion: k.apiVersion, kind: k.kind });
  return {
    info: () => ({
      name: info.name,
      version: info.version ?? '0.1.0',
      parent: kind(info.parent),
      children: (info.children ?? []).map(kind),
      reads: (info.reads ?? []).map(kind),
      finalizer: info.finalizer ?? false,
    }),
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
      let response: Response;
      try {
        response = fn(parsed);
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
      return wire(response);
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
    wire(new Response().child(r.parent).withStatus({ n: 1 }).ready(true, 'R', 'm').warning('R', 'm'));
  }
}

function wire(response: Response): WitResponse {
  const status = (s: boolean | undefined) => (s === true ? 'true' : s === false ? 'false' : 'unknown');
  return {
    children: response.children.map((c) => JSON.stringify(c)),
    status: response.status === undefined ? undefined : JSON.stringify(response.status),
    conditions: response.conditions.map((c) => ({
      type: c.type,
      status: status(c.status),
      reason: c.reason,
      message: c.message,
    })),
    events: response.events.map((e) => ({
      type: e.warning ? 'warning' : 'normal',
      reason: e.reason,
      message: e.message,
    })),
    requeueAfterMs: response.requeueAfterMs === undefined ? undefined : BigInt(response.requeueAfterMs),
    finalized: response.isFinalized,
  };
}
