"""Hostile checks of who can reach what in the k8s/ overlays, read from the rendered NetworkPolicies:

- from outside the namespace (another namespace, or outside the cluster) only the gateway's port answers;
  the KubeRay operator reaches the Ray dashboards and Prometheus the metrics ports, nothing more;
- Ray Serve LLM's engines are not on the public service: Ray's Serve port is closed to everyone but the
  Ray pods and the gateway proxy, and the proxy forwards no path of the engines app, however encoded.

NetworkPolicies are evaluated as the Kubernetes API defines them (a pod no policy selects takes all
traffic; otherwise a connection needs a rule whose peers and ports both match). The gateway proxy's
routes are evaluated as Envoy's HTTP connection manager does: refuse escaped slashes, normalize the path
(RFC 3986, merged slashes), then take the first route that matches; the normalized path goes upstream.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from specagent_ray.launch.deployment_profiles import OURS
from specagent_ray.testing.k8s import (
    OVERLAYS,
    all_pod_templates,
    cluster_of,
    one,
    serve_config,
)

pytestmark = pytest.mark.security

Doc = dict[str, Any]
GATEWAY = "Deployment/specagent-gateway/pod"
OTHER_PORT = ("", 23456)  # a port no container declares: Ray's workers, raylet and object manager use many


@dataclass(frozen=True)
class Peer:
    """Where a connection comes from: a pod with ``labels`` in the namespace called ``namespace`` (None: the
    overlay's own), or, when ``labels`` is None, an address outside the cluster."""

    labels: dict[str, str] | None
    namespace: str | None = None


OUTSIDE = Peer(None)
STRANGER_HERE = Peer({"app": "anything"})
STRANGER_ELSEWHERE = Peer({"app": "anything"}, "elsewhere")
IMPOSTORS = (Peer({"app.kubernetes.io/name": "kuberay-operator"}, "elsewhere"),
             Peer({"app.kubernetes.io/name": "prometheus"}, "elsewhere"),
             Peer({"app.kubernetes.io/name": "specagent-gateway"}, "elsewhere"))
OPERATOR = Peer({"app.kubernetes.io/name": "kuberay-operator"}, "kuberay-system")
PROMETHEUS = Peer({"app.kubernetes.io/name": "prometheus"}, "monitoring")


# ---------------------------------------------------------------------------------------------- policies

def selects(selector: Doc | None, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector; ``{}`` selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]
        if not ok:
            return False
    return True


def peer_matches(peers: list[Doc] | None, peer: Peer, namespace: str) -> bool:
    if not peers:  # no `from`: every source
        return True
    ns_labels = {"kubernetes.io/metadata.name": peer.namespace or namespace}  # set by Kubernetes itself
    for p in peers:
        if "ipBlock" in p:
            return True  # an address range: treat it as admitting anything, pods and the outside alike
        if peer.labels is None:
            continue
        ns_ok = selects(p["namespaceSelector"], ns_labels) if "namespaceSelector" in p else peer.namespace is None
        if ns_ok and selects(p.get("podSelector"), peer.labels):
            return True
    return False


def port_matches(ports: list[Doc] | None, name: str, number: int) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        want = p.get("port")
        if want is None or want == name or (isinstance(want, int) and want <= number <= p.get("endPort", want)):
            return True
    return False


def allowed(policies: list[Doc], labels: dict[str, str], port: tuple[str, int], peer: Peer, namespace: str) -> bool:
    """Whether ``peer`` may open a TCP connection to ``port`` (name, number) of a pod with ``labels``."""
    selecting = [p for p in policies if selects(p["spec"].get("podSelector"), labels)
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not selecting:
        return True
    return any(peer_matches(rule.get("from"), peer, namespace) and port_matches(rule.get("ports"), *port)
               for p in selecting for rule in p["spec"].get("ingress") or [])


def reachable(docs: list[Doc], peer: Peer) -> set[tuple[str, int]]:
    """Every (pod, port number) ``peer`` can connect to: declared container ports plus one undeclared."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    out = set()
    for where, doc, template in all_pod_templates(docs):
        labels = template.get("metadata", {}).get("labels", {})
        ports = [(p.get("name", ""), p["containerPort"])
                 for c in template["spec"]["containers"] for p in c.get("ports", [])]
        for port in [*ports, OTHER_PORT]:
            if allowed(policies, labels, port, peer, doc["metadata"]["namespace"]):
                out.add((where, port[1]))
    return out


# ---------------------------------------------------------------------------------------------- the proxy

def proxy_config(docs: list[Doc]) -> Doc:
    """The gateway proxy's Envoy config, from the ConfigMap its Deployment mounts."""
    pod = one(docs, "Deployment", "specagent-gateway")["spec"]["template"]["spec"]
    name = next(v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v)
    data = one(docs, "ConfigMap", name)["data"]
    return yaml.safe_load(next(iter(data.values())))


def connection_manager(config: Doc) -> Doc:
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (hcm,) = [f["typed_config"] for f in chain["filters"]
              if f["name"] == "envoy.filters.network.http_connection_manager"]
    return hcm


def normalize(path: str) -> str:
    """RFC 3986 normalization as Envoy's ``normalize_path`` does: decode unreserved characters, remove dot
    segments."""
    decoded = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16))
                     if re.fullmatch(r"[A-Za-z0-9\-._~]", chr(int(m.group(1), 16))) else m.group(0).upper(), path)
    segments = decoded.split("/")[1:]
    out: list[str] = []
    for i, seg in enumerate(segments):
        if seg in (".", ".."):
            out = out[:-1] if seg == ".." else out
            if i == len(segments) - 1:
                out.append("")  # "/a/b/.." is "/a/", a folder
        else:
            out.append(seg)
    return "/" + "/".join(out)


def forwards(config: Doc, raw: str) -> str | None:
    """The path the proxy sends upstream for a request to ``raw``, or None if it answers itself."""
    hcm = connection_manager(config)
    path = raw.partition("?")[0]  # the request target as sent: "//x" is a path here, not an authority
    if hcm.get("path_with_escaped_slashes_action") == "REJECT_REQUEST" and re.search(r"%2f|%5c", path, re.IGNORECASE):
        return None
    if hcm.get("normalize_path"):
        path = normalize(path)
    if hcm.get("merge_slashes"):
        path = re.sub(r"/+", "/", path)
    (host,) = hcm["route_config"]["virtual_hosts"]
    for route in host["routes"]:
        m = route["match"]
        if path == m.get("path") or ("prefix" in m and path.startswith(m["prefix"])):
            return path if "route" in route else None
    return None


def hostile_paths(prefix: str) -> list[str]:
    p = prefix.rstrip("/")
    first, rest = p[1], p[2:]
    return [f"{p}/v1/models", f"{p}/v1/chat/completions", f"/{p}/v1/models", f"/v1/..{p}/v1/models",
            f"/v1/%2e%2e{p}/v1/models", f"/%{ord(first):02X}{rest}/v1/models", f"{p}%2Fv1/models",
            f"/v1/sessions/../../..{p}/v1/models", f"/./{p[1:]}/v1/models", f"{p}/v1/models?x=/v1/"]


# ---------------------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_default_deny_policy_and_every_pod_selected(rendered, overlay):
    docs = rendered[overlay]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert any(p["spec"]["podSelector"] == {} and not p["spec"].get("ingress") and "Ingress" in p["spec"]["policyTypes"]
               for p in policies), "no default-deny ingress policy"
    for where, _, template in all_pod_templates(docs):
        labels = template["metadata"]["labels"]
        assert any(selects(p["spec"]["podSelector"], labels) and p["spec"]["podSelector"] for p in policies), where


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("peer", [OUTSIDE, STRANGER_ELSEWHERE, STRANGER_HERE, *IMPOSTORS],
                         ids=["outside", "elsewhere", "here", "operator-impostor", "prometheus-impostor",
                              "proxy-impostor"])
def test_strangers_reach_only_the_gateway_port(rendered, overlay, peer):
    assert reachable(rendered[overlay], peer) == {(GATEWAY, 8000)}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_operator_and_prometheus_reach_only_their_ports(rendered, overlay):
    docs = rendered[overlay]
    heads = {"RayService/specagent/head", "RayJob/specagent-loadtest/head"}
    assert reachable(docs, OPERATOR) == {(GATEWAY, 8000)} | {(h, 8265) for h in heads}  # the dashboard API
    ray = {w for w, d, _ in all_pod_templates(docs)
           if d["kind"] in ("RayService", "RayJob") and not w.endswith("submitter")}
    metrics = {(w, 8080) for w in ray} | {("Deployment/specagent-otel-collector/pod", 8889)}
    assert reachable(docs, PROMETHEUS) == {(GATEWAY, 8000)} | metrics


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_pods_reach_their_own_cluster_and_only_the_public_side_of_the_service(rendered, overlay):
    docs = rendered[overlay]
    pods = {w: t["metadata"]["labels"] for w, _, t in all_pod_templates(docs)}
    service = {w for w in pods if w.startswith("RayService/")}
    job = {w for w in pods if w.startswith("RayJob/")}
    for source, own in ((service, service), (job, job)):
        for w in source:
            got = {pod for pod, _ in reachable(docs, Peer(pods[w]))}
            assert own <= got, (w, own - got)
            assert got - own <= {GATEWAY, "Deployment/specagent-otel-collector/pod"}, (w, got - own)
    loadtest = reachable(docs, Peer(pods["RayJob/specagent-loadtest/head"]))
    assert {(p, n) for p, n in loadtest if p in service} == set()  # not even the Serve port: only the gateway


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_engines_are_not_on_the_public_service(rendered, overlay):
    docs = rendered[overlay]
    config = serve_config(docs)
    serve_port = config["http_options"]["port"]
    service = one(docs, "RayService")
    # 1. Ray's Serve port (every app, engines included) answers the Ray pods and the gateway proxy only.
    for peer in (OUTSIDE, STRANGER_HERE, STRANGER_ELSEWHERE, *IMPOSTORS, OPERATOR, PROMETHEUS):
        open_ = {(p, n) for p, n in reachable(docs, peer) if n == serve_port and not p.startswith("Deployment/")}
        assert not open_, f"Ray's Serve port, engines included, is open to {peer}: {sorted(open_)}"
    proxy = Peer(one(docs, "Deployment", "specagent-gateway")["spec"]["template"]["metadata"]["labels"])
    assert {(p, n) for p, n in reachable(docs, proxy) if n == serve_port and p.startswith("RayService/")}
    # 2. The proxy sends upstream only the gateway's routes, to KubeRay's Serve Service of this RayService.
    proxied = proxy_config(docs)
    (cluster,) = proxied["static_resources"]["clusters"]
    (endpoint,) = [e["endpoint"]["address"]["socket_address"] for le in cluster["load_assignment"]["endpoints"]
                   for e in le["lb_endpoints"]]
    assert endpoint == {"address": f"{service['metadata']['name']}-serve-svc", "port_value": serve_port}
    head = cluster_of(service)["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in head["ports"]}["serve"] == serve_port  # KubeRay's Service port
    for path in ("/healthz", "/v1/sessions", "/v1/sessions/s-1/events?after=3", "/v1/stats"):
        assert forwards(proxied, path) == path.partition("?")[0], path
    ours = next(a for a in config["applications"] if a["import_path"] == OURS)
    internal = [a["route_prefix"] for a in config["applications"] if a is not ours and a.get("route_prefix")]
    assert overlay != "gpu-prod" or internal == ["/engines"]
    for prefix in [*internal, "/-/routes", "/docs", "/openapi.json", "/redoc"]:
        leaks = {p: forwards(proxied, p) for p in hostile_paths(prefix) if forwards(proxied, p) is not None}
        assert leaks == {}, f"the public proxy forwards {prefix} paths: {leaks}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_public_service_is_the_proxy_and_the_load_test_uses_it(rendered, overlay):
    docs = rendered[overlay]
    public = one(docs, "Service", "specagent-gateway")
    pod = one(docs, "Deployment", "specagent-gateway")["spec"]["template"]
    assert public["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert public["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    assert {"name": "http", "containerPort": 8000} in pod["spec"]["containers"][0]["ports"]
    head = one(docs, "RayJob")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in head["env"]}["SPECAGENT_URL"] == "http://specagent-gateway:8000"


# ---------------------------------------------------------------------------------------------- negative

def test_an_open_rule_or_a_missing_policy_is_caught(rendered):
    docs = copy.deepcopy(rendered["gpu-prod"])
    assert reachable(docs, STRANGER_ELSEWHERE) == {(GATEWAY, 8000)}
    ray = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "specagent-ray")
    ray["spec"]["ingress"].append({"from": [{"namespaceSelector": {}}]})  # "any namespace", all ports
    assert ("RayService/specagent/cpu", 8000) in reachable(docs, STRANGER_ELSEWHERE)
    only = [d for d in rendered["gpu-prod"] if d["kind"] != "NetworkPolicy" or d["spec"]["podSelector"] == {}]
    assert reachable(only, OUTSIDE) == set()  # default deny alone: nothing, not even the gateway
    none = [d for d in rendered["gpu-prod"] if d["kind"] != "NetworkPolicy"]
    assert ("RayService/specagent/head", 8265) in reachable(none, OUTSIDE)


def test_a_proxy_route_to_the_engines_is_caught(rendered):
    config = proxy_config(rendered["gpu-prod"])
    assert forwards(config, "/engines/v1/models") is None
    routes = connection_manager(config)["route_config"]["virtual_hosts"][0]["routes"]
    routes.insert(0, {"match": {"prefix": "/"}, "route": {"cluster": "serve"}})
    assert forwards(config, "/engines/v1/models") == "/engines/v1/models"
    routes.pop(0)
    connection_manager(config)["normalize_path"] = False
    assert forwards(config, "/v1/../engines/v1/models") == "/v1/../engines/v1/models"  # Serve would not resolve it


def test_path_normalization_matches_rfc_3986():
    assert normalize("/v1/%2e%2e/engines/./v1") == "/engines/v1"
    assert normalize("/%65ngines/v1/%7Euser/%2f") == "/engines/v1/~user/%2F"
    assert normalize("/a/b/../../../c/..") == "/"
