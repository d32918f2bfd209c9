/**
 * `webapp` in TypeScript: a `WebApp` (examples.reconhost.dev/v1alpha1) becomes a Deployment and
 * a Service, exactly as the Rust example (plugins/examples/webapp) makes them.
 *
 * The Deployment runs one container named `app` with the image and port of the spec; the
 * Service maps port 80 to it. Status reports the Deployment's ready replicas and a `Ready`
 * condition that is True once they reach `spec.replicas`.
 */

import { Kind, PermanentError, Response, reconciler, type Info, type KubeObject, type Request } from '../../sdk/index.js';

export const INFO: Info = {
  name: 'webapp',
  version: '0.1.0',
  parent: new Kind('examples.reconhost.dev/v1alpha1', 'WebApp'),
  children: [new Kind('apps/v1', 'Deployment'), new Kind('v1', 'Service')],
};

const FIELDS = ['image', 'replicas', 'port'];

function integer(spec: KubeObject, field: string, fallback: number): number {
  const value = spec[field] ?? fallback;
  if (!Number.isInteger(value)) throw new PermanentError(`invalid spec: spec.${field} must be an integer`);
  return value;
}

/** The plugin's logic, a plain function: unit tests call it directly. */
export function webapp(request: Request): Response {
  const spec = request.spec();
  for (const key of Object.keys(spec)) {
    if (!FIELDS.includes(key)) {
      const expected = FIELDS.map((f) => `\`${f}\``).join(', ');
      throw new PermanentError(`invalid spec: unknown field \`${key}\`, expected one of ${expected}`);
    }
  }
  const image = spec['image'] ?? '';
  if (typeof image !== 'string') throw new PermanentError('invalid spec: spec.image must be a string');
  const replicas = integer(spec, 'replicas', 1);
  const port = integer(spec, 'port', 8080);
  if (image.trim() === '') throw new PermanentError('spec.image must not be empty');
  if (port < 1 || port > 65535) throw new PermanentError(`spec.port must be between 1 and 65535, not ${port}`);
  if (replicas < 0) throw new PermanentError(`spec.replicas must not be negative, not ${replicas}`);

  const name = request.name;
  const labels = { 'app.kubernetes.io/name': name, 'app.kubernetes.io/managed-by': 'reconhost' };
  const selector = { 'app.kubernetes.io/name': name };
  const deployment = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, labels },
    spec: {
      replicas,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels },
        spec: { containers: [{ name: 'app', image, ports: [{ containerPort: port, name: 'http' }] }] },
      },
    },
  };
  const service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, labels },
    spec: { selector, ports: [{ name: 'http', port: 80, targetPort: port }] },
  };

  const observed = request.child('apps/v1', 'Deployment', name);
  const counted = observed?.['status']?.['readyReplicas'];
  const readyReplicas = Number.isInteger(counted) ? (counted as number) : 0;
  const ready = readyReplicas >= replicas;
  return new Response()
    .child(deployment)
    .child(service)
    .withStatus({ readyReplicas })
    .ready(ready, ready ? 'ReplicasReady' : 'ReplicasNotReady', `${readyReplicas} of ${replicas} replicas ready`);
}

export const { info, reconcile } = reconciler(INFO, webapp);
