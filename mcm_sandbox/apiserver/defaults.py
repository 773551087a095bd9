"""Defaulting for built-in kinds, the sandbox's counterpart of the ``SetDefaults_*`` functions in
k8s.io/kubernetes ``pkg/apis/*/v1/defaults.go`` and the strategies' ``PrepareForCreate``.

kube-apiserver defaults every decoded object, on create and on update alike, so a client that
omits a defaulted field reads it back filled in and an update that drops it does not change it.
``default(kind, obj)`` does the same here; ``initial_status`` is what a strategy resets status to
on create (workload controllers are not emulated, so status stays as created until a client writes
it through ``/status``).
"""

from __future__ import annotations

import base64
import ipaddress
import itertools
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]

# What PrepareForCreate leaves in status, by kind (fields without ``omitempty`` serialize as 0).
INITIAL_STATUS: dict[str, Obj] = {
    "Pod": {"phase": "Pending"},
    "PersistentVolume": {"phase": "Pending"},
    "PersistentVolumeClaim": {"phase": "Pending"},
    "PodDisruptionBudget": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                            "expectedPods": 0},
    "VolumeAttachment": {"attached": False},
    "Namespace": {"phase": "Active"},
    "Service": {"loadBalancer": {}},
    "Ingress": {"loadBalancer": {}},
    "Deployment": {},
    "ReplicaSet": {"replicas": 0},
    "ReplicationController": {"replicas": 0},
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "DaemonSet": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                  "numberReady": 0},
    "Job": {},
    "CronJob": {},
    "HorizontalPodAutoscaler": {"desiredReplicas": 0},
    "ResourceQuota": {},
}  # fmt: skip


def _setdefault_path(obj: Obj, *path_and_value: Any) -> None:
    *path, value = path_and_value
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            obj[key] = nxt
        obj = nxt
    if obj.get(path[-1]) is None:
        obj[path[-1]] = value


def _dict(obj: Obj, key: str) -> Obj:
    value = obj.get(key)
    if not isinstance(value, dict):
        value = {}
        obj[key] = value
    return value


# --- pods and pod templates ------------------------------------------------------------------


def _image_pull_policy(image: Any) -> str:
    """``Always`` for ``:latest`` or an untagged image, else ``IfNotPresent`` (SetDefaults_Container)."""
    if not isinstance(image, str):
        return "IfNotPresent"
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    return "Always" if "@" not in image and tag in ("", "latest") else "IfNotPresent"


def _container(c: Any) -> None:
    if not isinstance(c, dict):
        return
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(c.get("image")))
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            for c in containers:
                _container(c)


def _template(obj: Obj, *path: str) -> None:
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        pod_spec(node.setdefault("spec", {}))


# --- per kind --------------------------------------------------------------------------------


def _pod(obj: Obj) -> None:
    pod_spec(_dict(obj, "spec"))


def _deployment(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    spec.setdefault("replicas", 1)
    strategy = _dict(spec, "strategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = _dict(strategy, "rollingUpdate")
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template(obj, "spec", "template")


def _replicaset(obj: Obj) -> None:
    _dict(obj, "spec").setdefault("replicas", 1)
    _template(obj, "spec", "template")


def _replication_controller(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    spec.setdefault("replicas", 1)
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if not spec.get("selector") and labels:
        spec["selector"] = dict(labels)
    if not (obj.get("metadata") or {}).get("labels") and labels:
        obj["metadata"]["labels"] = dict(labels)
    _template(obj, "spec", "template")


def _statefulset(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = _dict(spec, "updateStrategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        _dict(strategy, "rollingUpdate").setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    retention = _dict(spec, "persistentVolumeClaimRetentionPolicy")
    retention.setdefault("whenDeleted", "Retain")
    retention.setdefault("whenScaled", "Retain")
    _template(obj, "spec", "template")


def _daemonset(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    strategy = _dict(spec, "updateStrategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = _dict(strategy, "rollingUpdate")
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _template(obj, "spec", "template")


def _job_spec(spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podFailurePolicy") is None:
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    tpl = spec.get("template")
    if isinstance(tpl, dict):
        pod_spec(tpl.setdefault("spec", {}))


def _job(obj: Obj) -> None:
    _job_spec(_dict(obj, "spec"))


def job_selector(obj: Obj) -> None:
    """Job's PrepareForCreate: a selector on the job's uid, and the labels that match it."""
    spec = _dict(obj, "spec")
    if spec.get("manualSelector"):
        return
    meta = obj["metadata"]
    uid, name = meta.get("uid", ""), meta.get("name", "")
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = _dict(_dict(_dict(spec, "template"), "metadata"), "labels")
    labels.setdefault("batch.kubernetes.io/controller-uid", uid)
    labels.setdefault("batch.kubernetes.io/job-name", name)
    labels.setdefault("controller-uid", uid)
    labels.setdefault("job-name", name)


def _cronjob(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    _job_spec(_dict(_dict(spec, "jobTemplate"), "spec"))


def _hpa(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    spec.setdefault("minReplicas", 1)
    if spec.get("metrics") is None:
        spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            }
        ]


def _network_policy(obj: Obj) -> None:
    spec = _dict(obj, "spec")
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress"] + (["Egress"] if spec.get("egress") else [])


def _secret(obj: Obj) -> None:
    """``stringData`` is write-only: folded into ``data`` (it wins on conflicts), then dropped."""
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = obj.get("data")
        if not isinstance(data, dict):
            data = {}
            obj["data"] = data
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def _priority_class(obj: Obj) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _storage_class(obj: Obj) -> None:
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


DEFAULTERS: dict[str, Callable[[Obj], None]] = {
    "Pod": _pod,
    "PodTemplate": lambda o: _template(o, "template"),
    "Deployment": _deployment,
    "ReplicaSet": _replicaset,
    "ReplicationController": _replication_controller,
    "StatefulSet": _statefulset,
    "DaemonSet": _daemonset,
    "Job": _job,
    "CronJob": _cronjob,
    "HorizontalPodAutoscaler": _hpa,
    "NetworkPolicy": _network_policy,
    "Secret": _secret,
    "PriorityClass": _priority_class,
    "StorageClass": _storage_class,
}


def default(kind: str, obj: Obj) -> None:
    """Fill defaults in place (a no-op for kinds without defaults and for custom resources)."""
    defaulter = DEFAULTERS.get(kind)
    if defaulter is not None:
        defaulter(obj)


# --- Service: defaults and allocation --------------------------------------------------------

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)


def service_spec(obj: Obj, old: Obj | None, used_ips: set[str], used_ports: set[int]) -> None:
    """Defaults a Service gets, and the cluster IP and node ports the registry allocates.

    On update, values allocated before carry over when the client left them out (kubectl apply
    of a manifest without ``clusterIP`` must not fail the immutability check).
    """
    spec = _dict(obj, "spec")
    old_spec = (old or {}).get("spec") or {}
    svc_type = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if port.get("targetPort") is None and port.get("port") is not None:
                port["targetPort"] = port["port"]
    if svc_type == "ExternalName":
        return
    if not spec.get("clusterIP") and old_spec.get("clusterIP"):
        spec["clusterIP"] = old_spec["clusterIP"]
        spec.setdefault("clusterIPs", old_spec.get("clusterIPs") or [old_spec["clusterIP"]])
    if not spec.get("clusterIP"):
        spec["clusterIP"] = _free_ip(used_ips)
    if spec["clusterIP"] != "None" and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]
    elif spec["clusterIP"] == "None":
        spec["clusterIPs"] = ["None"]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if svc_type in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
        old_ports = {
            (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in old_spec.get("ports") or []
        }
        for port in spec.get("ports") or []:
            if isinstance(port, dict) and not port.get("nodePort"):
                port["nodePort"] = old_ports.get((port.get("port"), port.get("protocol"))) or _free_port(
                    used_ports
                )
    if svc_type == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)


def _free_ip(used: set[str]) -> str:
    for host in itertools.islice(SERVICE_CIDR.hosts(), 10, None):
        ip = str(host)
        if ip not in used:
            used.add(ip)
            return ip
    raise ValueError("the service cluster IP range is full")


def _free_port(used: set[int]) -> int:
    for port in NODE_PORTS:
        if port not in used:
            used.add(port)
            return port
    raise ValueError("the node port range is full")
