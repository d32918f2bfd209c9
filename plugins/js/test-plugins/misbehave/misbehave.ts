/**
 * `js-misbehave`: a JavaScript plugin that misbehaves on request, for the host's sandbox tests
 * (host/tests/all/languages/sandbox.rs). Never deploy it. `spec.mode` of the `Widget` picks:
 * `ok` (one ConfigMap, Ready), `loop` (spins for ever), `alloc` (allocates without bound),
 * `raise` (an unexpected exception, which traps), `invalid-json` (a child that is not JSON,
 * through the wire format), `transient` / `permanent` (the SDK's errors), `read` (reads through
 * the host as `runtime-reads` does: a ConfigMap by name, ConfigMaps by label, and a Secret it did
 * not declare, and reports what it got).
 */

import { Kind, PermanentError, Response, TransientError, host, reconciler, type KubeObject, type Request, type WitRequest, type WitResponse } from '../../sdk/index.js';

const sdk = reconciler(
  {
    name: 'js-misbehave',
    parent: new Kind('test.reconhost.dev/v1', 'Widget'),
    children: [new Kind('v1', 'ConfigMap')],
    reads: [new Kind('v1', 'ConfigMap')],
  },
  (request: Request): Response => {
    const mode = request.spec()['mode'] ?? 'ok';
    if (mode === 'loop') {
      let n = 0;
      for (;;) n++;
    }
    if (mode === 'alloc') {
      // Buffers, not arrays filled element by element: the cap is reached in a few allocations,
      // not after seconds of interpreted filling on a busy machine.
      const hoard: ArrayBuffer[] = [];
      for (;;) hoard.push(new ArrayBuffer(1 << 22));
    }
    if (mode === 'raise') throw new Error(`misbehave gave up on ${request.name}`);
    if (mode === 'transient') throw new TransientError('asked to fail');
    if (mode === 'permanent') throw new PermanentError('asked to fail');
    if (mode === 'read') {
      const configMap = new Kind('v1', 'ConfigMap');
      const got = host.get(configMap, request.namespace, 'settings') as KubeObject | undefined;
      const listed = host.list(configMap, request.namespace, 'tier=web') as KubeObject[];
      let denied = 'nothing';
      try {
        host.get(new Kind('v1', 'Secret'), request.namespace, 'token');
      } catch (e) {
        denied = e instanceof host.ReadError ? e.message : `not a ReadError: ${String(e)}`;
      }
      host.info(`read ${listed.length}`);
      return new Response().withStatus({
        got: got === undefined ? null : got['data'],
        listed: listed.map((o) => o['metadata']['name']),
        denied,
      });
    }
    return new Response()
      .child({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: request.name }, data: { mode: 'ok' } })
      .withStatus({ mode: 'ok' })
      .ready(true, 'Fine', 'fine');
  },
);

export const info = sdk.info;

export function reconcile(request: WitRequest): WitResponse {
  if (JSON.parse(request.parent)?.spec?.mode === 'invalid-json') {
    // Past the SDK's serializer, as a plugin written against the raw contract could answer.
    return {
      children: [{ object: '{not json', wave: 0, readyWhen: [] }],
      status: undefined,
      conditions: [],
      events: [],
      requeueAfterMs: undefined,
      finalized: false,
      parentMetadata: undefined,
    };
  }
  return sdk.reconcile(request);
}
