/**
 * The contract's types as componentize-js lifts and lowers them (`reconhost:plugin@0.1.0`):
 * records with camelCase fields, enums as strings, `option` as `undefined`, `u64` as `bigint`,
 * and a `result` error thrown as `{ tag, val }`.
 */

/** `kind-ref`. */
export interface KindRef {
  apiVersion: string;
  kind: string;
}

/** `plugin-info`. */
export interface PluginInfo {
  name: string;
  version: string;
  parent: KindRef;
  children: KindRef[];
  reads: KindRef[];
  finalizer: boolean;
}

/** `request`: JSON text, one object per string. */
export interface WitRequest {
  parent: string;
  children: string[];
  config: string;
  finalizing: boolean;
}

/** `condition`. */
export interface WitCondition {
  type: string;
  status: 'true' | 'false' | 'unknown';
  reason: string;
  message: string;
}

/** `event`. */
export interface WitEvent {
  type: 'normal' | 'warning';
  reason: string;
  message: string;
}

/** `response`. */
export interface WitResponse {
  children: string[];
  status: string | undefined;
  conditions: WitCondition[];
  events: WitEvent[];
  requeueAfterMs: bigint | undefined;
  finalized: boolean;
}

/** `error`, as thrown by `reconcile`. */
export type WitError = { tag: 'transient'; val: string } | { tag: 'permanent'; val: string };

/** `read-error`. */
export type WitReadError =
  | { tag: 'not-allowed'; val: string }
  | { tag: 'invalid'; val: string }
  | { tag: 'other'; val: string };

/** `level`. */
export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** The `host` interface the component imports. */
export interface WitHost {
  log(level: Level, message: string): void;
  get(kind: KindRef, namespace: string, name: string): string | undefined;
  list(kind: KindRef, namespace: string, labelSelector: string): string[];
}
