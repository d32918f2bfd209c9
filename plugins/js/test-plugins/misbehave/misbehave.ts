/**
 * `js-misbehave`: a JavaScript plugin that misbehaves on request, for the host's sandbox tests
 * (host/tests/languages/sandbox.rs). Never deploy it. `spec.mode` of the `Widget` picks:
 * `ok` (one ConfigMap, Ready), `loop` (spins for ever), `alloc` (allocates without bound),
 * `raise` (an unexpected exception, which traps), `invalid-json` (a child that is not JSON,
 * through the wire format), `transient` / `permanent` (the SDK's errors).
 */

import { Kind, PermanentError, Response, TransientError, reconciler, type Request, type WitRequest, type WitResponse } from '../../sdk/index.js';

const sdk = reconciler(
  { name: 'js-misbehave', parent: new Kind('test.reconhost.dev/v1', 'Widget'), children: [new Kind('v1', 'ConfigMap')] },
  (request: Request): Response => {
    const mode = request.spec()['mode'] ?? 'ok';
    if (mode === 'loop') {
      let n = 0;
      for (;;) n++;
    }
    if (mode === 'alloc') {
      const hoard: number[][] = [];
      for (;;) hoard.push(new Array(1 << 17).fill(1));
    }
    if (mode === 'raise') throw new Error(`misbehave gave up on ${request.name}`);
    if (mode === 'transient') throw new TransientError('asked to fail');
    if (mode === 'permanent') throw new PermanentError('asked to fail');
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
    return { children: ['{not json'], status: undefined, conditions: [], events: [], requeueAfterMs: undefined, finalized: false };
  }
  return sdk.reconcile(request);
}
