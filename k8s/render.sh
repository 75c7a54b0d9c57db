#!/usr/bin/env bash
# Render overlays into k8s/rendered/<overlay>.yaml (or $RENDER_DIR/<overlay>.yaml).
#   k8s/render.sh                 # every overlay
#   k8s/render.sh gpu-prod        # one
# Step 1 writes the overlay's Serve config from deployments/<profile>.yaml (serve_config.py);
# step 2 is plain `kubectl kustomize`, which copies it into the RayService's serveConfigV2.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
KUBECTL="${KUBECTL:-kubectl}"
out_dir="${RENDER_DIR:-$here/rendered}"
command -v "$KUBECTL" >/dev/null || { echo "render.sh: $KUBECTL not found (kubectl >= 1.27 with kustomize v5 needed)" >&2; exit 127; }
if [ "$#" -eq 0 ]; then
  set -- $(cd "$here/overlays" && ls -d */ | tr -d /)
fi
mkdir -p "$out_dir"
for overlay in "$@"; do
  dir="$here/overlays/$overlay"
  [ -f "$dir/kustomization.yaml" ] || { echo "render.sh: no overlay $overlay in $here/overlays" >&2; exit 2; }
  "$PYTHON" "$here/serve_config.py" "$dir"
  "$KUBECTL" kustomize --load-restrictor LoadRestrictionsNone "$dir" > "$out_dir/$overlay.yaml.tmp"
  mv "$out_dir/$overlay.yaml.tmp" "$out_dir/$overlay.yaml"
  echo "rendered $out_dir/$overlay.yaml"
done
