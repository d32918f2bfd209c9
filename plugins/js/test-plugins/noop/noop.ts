/**
 * `js-noop`: the floor of a JavaScript plugin, for `make bench-languages`: the raw contract, no
 * SDK, no parsing, an empty answer. What a call of it costs, every JavaScript plugin pays before
 * its first line runs. Never deploy it (it would delete every child of its parents).
 */

import type { PluginInfo, WitRequest, WitResponse } from '../../sdk/wit.js';

export function info(): PluginInfo {
  return {
    name: 'js-noop',
    version: '0.1.0',
    parent: { apiVersion: 'examples.reconhost.dev/v1alpha1', kind: 'WebApp' },
    children: [],
    reads: [],
    finalizer: false,
    ignoreStatusChanges: false,
  };
}

export function reconcile(_request: WitRequest): WitResponse {
  return {
    children: [],
    status: undefined,
    conditions: [],
    events: [],
    requeueAfterMs: undefined,
    finalized: false,
    parentMetadata: undefined,
  };
}
