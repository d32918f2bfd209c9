#!/usr/bin/env bash
# `make run`: the local control plane (with a registry and a fake node, so Deployments progress),
# the example plugins installed the way a platform team would install them (webapp through a
# ConfigMap, the others through the OCI registry), the demo parents, and the host in the
# foreground reconciling them. Environment: RECONHOST (the host binary), CLUSTER
# (reconhost-cluster), PLUGIN_DIR (built plugins).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=$(bash tools/k8s/build.sh)
kubeconfig=$("$CLUSTER" up | sed -n 's/^KUBECONFIG=//p')
registry=$(cat "$(dirname "$kubeconfig")/registry")
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
export KUBECONFIG=$kubeconfig

# The control plane installs the CRDs (the host's and the examples') when it starts; applying
# them again picks up edits made since.
for crd in deploy/crds/*.yaml plugins/examples/*/crd.yaml; do
  kubectl apply --server-side -f "$crd" >/dev/null
done
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null

# Each plugin acts as its own ServiceAccount in the plugins' namespace; --rbac creates it and
# grants what the plugin declares it needs (reconhost plugin rbac shows that).
kubectl create namespace reconhost-plugins --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply --server-side -f deploy/policies/ >/dev/null
# The demo's parents live in namespace default, so that is where each grant is bound; webapp
# makes Deployments (workloads: a dangerous grant, said and allowed here), and namespace-defaults
# writes quotas into every namespace it selects (so its grant is cluster-wide).
"$RECONHOST" plugin install "$PLUGIN_DIR/webapp.wasm" --rbac --parent-namespace default \
  --allow-dangerous --configmap reconhost-plugins/webapp \
  --service-account reconhost-plugins/webapp
for plugin in configmap-generator merged-config archiver namespace-defaults; do
  scope=(--parent-namespace default)
  [ "$plugin" = namespace-defaults ] && scope=(--cluster-wide)
  "$RECONHOST" plugin install "$PLUGIN_DIR/$plugin.wasm" --rbac "${scope[@]}" \
    --oci "$registry/plugins/$plugin:0.1.0" --insecure-registry "$registry" \
    --service-account "reconhost-plugins/$plugin"
done
kubectl apply --server-side -f deploy/examples/demo.yaml

cat >&2 <<TEXT
control plane: export KUBECONFIG=$kubeconfig
kubectl is $bin/kubectl; the registry is $registry (make cluster-down stops both)
TEXT
exec "$RECONHOST" run --kubeconfig "$kubeconfig" --insecure-registry "$registry"
