#!/usr/bin/env bash
# The admission webhook's certificate without cert-manager (components/admission-selfsigned):
#
#   deploy/kind/admission-certs.sh --context kind-seed-lab     # make, then install in the cluster
#   deploy/kind/admission-certs.sh --out DIR                   # only make the files (ca.crt, tls.crt, tls.key)
#
# A CA (ECDSA P-256, ten years) made once and kept in DIR (default: .admission-certs, mode 700; its
# key never leaves your machine), and a serving certificate signed by it for the webhook's Service
# (365 days, a new key at each run). With --context: the Secret placement-auditor-admission-tls
# (created or replaced; the pods see the new files in place and the server reloads them) and the
# CA as caBundle of both webhooks of the ValidatingWebhookConfiguration placement-auditor-admission.
# Needs openssl (1.1.1 or later, for -addext); kubectl with --context.
set -euo pipefail
out=.admission-certs
context=""
namespace=placement-auditor
service=placement-auditor-admission
days=365
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --days) days="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "admission-certs.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "admission-certs.sh: openssl is required" >&2; exit 2; }
case "$days" in ''|*[!0-9]*) echo "admission-certs.sh: --days must be a number of days" >&2; exit 2 ;; esac

umask 077
mkdir -p "$out"
chmod 700 "$out"
if [ ! -s "$out/ca.key" ] || [ ! -s "$out/ca.crt" ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -sha256 -days 3650 -subj "/CN=$service-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.crt"
  echo "made a new CA in $out (keep it: the caBundle in the cluster trusts it)"
fi
dns="DNS:$service.$namespace.svc,DNS:$service.$namespace.svc.cluster.local"
openssl ecparam -name prime256v1 -genkey -noout -out "$out/tls.key.new"
openssl req -new -key "$out/tls.key.new" -subj "/CN=$service.$namespace.svc" -out "$out/tls.csr"
printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' \
  "$dns" > "$out/tls.ext"
openssl x509 -req -in "$out/tls.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
  -days "$days" -sha256 -extfile "$out/tls.ext" -out "$out/tls.crt.new" 2>/dev/null
openssl verify -CAfile "$out/ca.crt" "$out/tls.crt.new" >/dev/null
mv "$out/tls.key.new" "$out/tls.key"
mv "$out/tls.crt.new" "$out/tls.crt"
rm -f "$out/tls.csr" "$out/tls.ext"
echo "certificate for $service.$namespace.svc in $out (valid $days days)"

[ -n "$context" ] || exit 0
command -v kubectl >/dev/null || { echo "admission-certs.sh: kubectl is required with --context" >&2; exit 2; }
kubectl --context "$context" -n "$namespace" create secret tls "$service-tls" \
  --cert "$out/tls.crt" --key "$out/tls.key" --dry-run=client -o yaml | kubectl --context "$context" apply -f -
bundle="$(base64 < "$out/ca.crt" | tr -d '\n')"
kubectl --context "$context" patch validatingwebhookconfiguration "$service" --type json -p \
  "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$bundle\"},{\"op\":\"add\",\"path\":\"/webhooks/1/clientConfig/caBundle\",\"value\":\"$bundle\"}]"
echo "Secret $namespace/$service-tls and the caBundle of ValidatingWebhookConfiguration $service are set"
