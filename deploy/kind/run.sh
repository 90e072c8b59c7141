#!/usr/bin/env bash
# Build the seed-scenario cluster on a machine with Docker (kind, Cilium, two zones), deploy the
# broken training group, and audit it live:
#
#   deploy/kind/run.sh            # create, deploy before/, audit (expects one cross-zone-blocked, observed)
#   deploy/kind/run.sh after      # deploy the fixed state instead (expects no finding)
#   deploy/kind/run.sh clean      # delete the cluster
#
# Needs: docker, kind (>= 0.20, node labels), kubectl, helm; the auditor installed (`pip install -e .`).
# Not run in CI (no Docker there); the same scenario is served by a local API server in tests/cluster.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
example="$root/auditor/examples/seed-lab"
cluster=seed-lab
context="kind-$cluster"
state="${1:-before}"

if [ "$state" = clean ]; then
  kind delete cluster --name "$cluster"
  exit 0
fi
for tool in docker kind kubectl helm auditor; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done

if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --config "$here/kind-config.yaml"
  # The zone-a nodes are the (simulated) GPU nodes: only pods that tolerate the taint land there.
  for node in $(kubectl --context "$context" get nodes -l gpu=true -o name); do
    kubectl --context "$context" taint --overwrite "$node" gpu=present:NoSchedule
  done
  helm repo add cilium https://helm.cilium.io >/dev/null
  helm repo update cilium >/dev/null
  api_server="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$cluster-control-plane")"
  helm upgrade --install cilium cilium/cilium --kube-context "$context" --namespace kube-system \
    --set kubeProxyReplacement=true --set k8sServiceHost="$api_server" --set k8sServicePort=6443 \
    --set ipam.mode=kubernetes --set hubble.enabled=true --wait
fi

kubectl --context "$context" create namespace ml-demo --dry-run=client -o yaml | kubectl --context "$context" apply -f -
kubectl --context "$context" apply -f "$example/policies.yaml"
kubectl --context "$context" delete -n ml-demo deployment/trainer-coordinator job/trainer-workers --ignore-not-found
kubectl --context "$context" apply -f "$example/$state/workload.yaml"
kubectl --context "$context" -n ml-demo rollout status deployment/trainer-coordinator --timeout=180s
kubectl --context "$context" -n ml-demo wait --for=jsonpath='{.status.active}'=4 job/trainer-workers --timeout=180s || true
kubectl --context "$context" -n ml-demo get pods -o wide

set +e
auditor cluster --context "$context"
code=$?
echo "auditor cluster exited $code (1: a finding at or above high, 0: none, 3: the read was incomplete)"
exit "$code"
