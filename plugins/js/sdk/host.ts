/**
 * What the host offers a plugin during a call: its log, and reads from its cache.
 *
 * Reads are served from the host's cache, never the network, and only for the kinds declared
 * in `Info.reads`; the host remembers what each reconcile read, so a later change to any object
 * read (or to what a list would return) reconciles the parent again.
 *
 * In a component the build connects these to the WIT imports. Outside one (unit tests) there is
 * no host: `get` and `list` throw {@link ReadError} and `log` writes to stderr, unless a test
 * installs a stand-in with {@link use}.
 */

import type { KindRef, Level, WitHost, WitReadError } from './wit.js';

export type { Level } from './wit.js';

/** A read the host refused: `not-allowed` (the kind is not declared in `reads`), `invalid`
 * (for example a bad label selector) or `other`. */
export class ReadError extends Error {
  override name = 'ReadError';
  constructor(
    readonly reason: WitReadError['tag'],
    message: string,
  ) {
    super(`${reason}: ${message}`);
  }
}

/** A host with JSON as values, for {@link use}. */
export interface Host {
  log(level: Level, message: string): void;
  get(kind: KindRef, namespace: string, name: string): object | undefined;
  list(kind: KindRef, namespace: string, labelSelector: string): object[];
}

let stand: Host | undefined;
let wit: WitHost | undefined;

/** Installs a stand-in for the host (for unit tests); `undefined` removes it. */
export function use(host: Host | undefined): void {
  stand = host;
}

/** Connects the WIT imports (done by the component's entry module, which the build writes). */
export function connect(imports: WitHost): void {
  wit = imports;
}

function readError(e: unknown): ReadError {
  // componentize-js throws an import's `err` as the variant, possibly wrapped in `payload`.
  const v = ((e as { payload?: unknown })?.payload ?? e) as Partial<WitReadError>;
  if (v && typeof v.tag === 'string') return new ReadError(v.tag as WitReadError['tag'], String(v.val));
  return new ReadError('other', String(e));
}

const absent = () => new ReadError('other', 'no host outside a component: install a stand-in with host.use');

const kindRef = (k: KindRef): KindRef => ({ apiVersion: k.apiVersion, kind: k.kind });

/** Writes a line to the host's log, tagged with the plugin and the parent. Volume is capped per
 * call: a plugin that logs past the cap fails the call. */
export function log(level: Level, message: string): void {
  if (stand) stand.log(level, message);
  else if (wit) wit.log(level, message);
  else console.error(`[${level}] ${message}`);
}

/** Logs at info level. */
export function info(message: string): void {
  log('info', message);
}

/** One object of a declared `reads` kind (namespace empty for cluster-scoped kinds), or
 * undefined if it does not exist. */
export function get(kind: KindRef, namespace: string, name: string): object | undefined {
  if (stand) return stand.get(kind, namespace, name);
  if (!wit) throw absent();
  let text: string | undefined;
  try {
    text = wit.get(kindRef(kind), namespace, name);
  } catch (e) {
    throw readError(e);
  }
  return text === undefined ? undefined : JSON.parse(text);
}

/** The objects of a declared `reads` kind in a namespace (empty: all) matching a label
 * selector (Kubernetes syntax, e.g. `app=web,tier!=db`; empty: everything). */
export function list(kind: KindRef, namespace = '', labelSelector = ''): object[] {
  if (stand) return stand.list(kind, namespace, labelSelector);
  if (!wit) throw absent();
  let texts: string[];
  try {
    texts = wit.list(kindRef(kind), namespace, labelSelector);
  } catch (e) {
    throw readError(e);
  }
  return texts.map((t) => JSON.parse(t));
}
