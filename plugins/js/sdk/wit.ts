/**
 * The contract's types as componentize-js lifts and lowers them (`reconhost:plugin@0.2.0`):
 * records with camelCase fields, enums as strings, `option` as `undefined`, `u64` as `bigint`,
 * and a `result` error thrown as `{ tag, val }`.
 */

/** `kind-ref`. */
export interface KindRef {
  apiVersion: string;
  kind: string;
}

/** `condition-status`. */
export type WitConditionStatus = 'true' | 'false' | 'unknown';

/** `comparison`. */
export type WitComparison = 'equal' | 'not-equal' | 'at-least' | 'at-most';

/** `operand`: a JSON value as text, or a dotted path. */
export type WitOperand = { tag: 'value'; val: string } | { tag: 'field'; val: string };

/** `ready-check`. */
export type WitReadyCheck =
  | { tag: 'condition'; val: { type: string; status: WitConditionStatus } }
  | { tag: 'field'; val: { path: string; comparison: WitComparison; operand: WitOperand } };

/** `update-method`. */
export type WitUpdateMethod = 'in-place' | 'on-delete' | 'recreate' | 'rolling-in-place' | 'rolling-recreate';

/** `update-strategy`. */
export interface WitUpdateStrategy {
  method: WitUpdateMethod;
  statusChecks: WitReadyCheck[];
}

/** `child-kind`. */
export interface WitChildKind {
  kind: KindRef;
  updateStrategy: WitUpdateStrategy;
}

/** `plugin-info`. */
export interface PluginInfo {
  name: string;
  version: string;
  parent: KindRef;
  children: WitChildKind[];
  reads: KindRef[];
  finalizer: boolean;
  ignoreStatusChanges: boolean;
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
  status: WitConditionStatus;
  reason: string;
  message: string;
}

/** `event`. */
export interface WitEvent {
  type: 'normal' | 'warning';
  reason: string;
  message: string;
}

/** `desired-child`: the object as JSON text. */
export interface WitDesiredChild {
  object: string;
  wave: number;
  readyWhen: WitReadyCheck[];
}

/** `metadata-patch`: key-value tuples. */
export interface WitMetadataPatch {
  labels: [string, string][];
  annotations: [string, string][];
}

/** `response`. */
export interface WitResponse {
  children: WitDesiredChild[];
  status: string | undefined;
  conditions: WitCondition[];
  events: WitEvent[];
  requeueAfterMs: bigint | undefined;
  finalized: boolean;
  parentMetadata: WitMetadataPatch | undefined;
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
