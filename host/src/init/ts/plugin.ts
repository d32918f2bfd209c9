/** `{{name}}`: a `{{kind}}` ({{group}}/{{version}}) becomes a ConfigMap named after it, holding `spec.message`. */

import { Kind, PermanentError, Response, reconciler, type Info, type Request } from '../sdk/index.js';

export const INFO: Info = {
  name: '{{name}}',
  version: '0.1.0',
  parent: new Kind('{{group}}/{{version}}', '{{kind}}'),
  children: [new Kind('v1', 'ConfigMap')],
};

/** The plugin's logic, a plain function: unit tests call it directly. */
export function plugin(request: Request): Response {
  const message = request.spec()['message'] ?? '';
  if (typeof message !== 'string' || message === '') throw new PermanentError('spec.message must not be empty');
  return new Response()
    .child({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: request.name }, data: { message } })
    .withStatus({ message })
    .ready(true, 'ConfigMapWritten', 'the ConfigMap holds the message');
}

export const { info, reconcile } = reconciler(INFO, plugin);
