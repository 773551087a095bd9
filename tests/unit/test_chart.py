"""helm/mcm-tasks rendered with Go's text/template + sprig (tools/chart-render, Helm's engine) for the
default values and every value set in helm/mcm-tasks/ci/: valid against the Kubernetes schemas,
least privilege, hardened pods, every MCM flag settable, bad values refused at install."""

from __future__ import annotations

import filecmp
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from mcm_tasks.api.crds import all_crds
from mcm_tasks.queue.messages import broker_prefix
from mcm_tasks.settings import QUEUES, Settings, load_settings
from tests.chart_support import CHART, ROOT, VALUE_SETS, RenderError, by_kind, named, render, render_file

KUBE_VERSION = "1.30.0"
#: kinds of add-ons whose schemas ship with them (KEDA, prometheus-operator): checked for shape only
ADDON_KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}
CONTROLLERS = ("informer", "worker", "beat")


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in by_kind(docs, "Deployment")}


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


@pytest.mark.parametrize("values", [None, *VALUE_SETS], ids=lambda v: v.name if v else "default")
def test_renders_valid_kubernetes_objects(values: Path | None) -> None:
    docs = render_file(values, "--include-crds") if values else render(None, "--include-crds")
    assert docs
    for doc in docs:
        if doc["kind"] in ADDON_KINDS:
            assert doc["apiVersion"] and doc["metadata"]["name"] and doc["spec"]
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_default_install_has_every_part(default: list[dict[str, Any]]) -> None:
    pods = _pods(default)
    assert set(pods) == {f"mcm-tasks-{c}" for c in (*CONTROLLERS, "redis")}
    replicas = {d["metadata"]["name"]: d["spec"].get("replicas") for d in by_kind(default, "Deployment")}
    assert replicas["mcm-tasks-informer"] == 2 and replicas["mcm-tasks-beat"] == 2
    assert {p["metadata"]["name"] for p in by_kind(default, "PodDisruptionBudget")} == {
        f"mcm-tasks-{c}" for c in CONTROLLERS
    }
    assert {r["kind"] for r in default} >= {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_beat_in_the_informer_deploys_no_beat_pods(tmp_path: Path) -> None:
    """Issue 28's smallest installation: ``beat.inInformer`` runs beat as a thread of each informer
    pod (``informer --beat``, same Redis lock), with no beat Deployment or PodDisruptionBudget."""
    docs = render({"beat": {"inInformer": True}}, tmp=tmp_path)
    pods = _pods(docs)
    assert set(pods) == {"mcm-tasks-informer", "mcm-tasks-worker", "mcm-tasks-redis"}
    assert "--beat" in pods["mcm-tasks-informer"]["containers"][0]["args"]
    assert "mcm-tasks-beat" not in {p["metadata"]["name"] for p in by_kind(docs, "PodDisruptionBudget")}
    assert "--beat" not in _pods(render())["mcm-tasks-informer"]["containers"][0]["args"]


def test_the_bundled_redis_runs_its_timer_once_a_second(default: list[dict[str, Any]]) -> None:
    """Issue 19: Redis's default hz 10 woke an idle install's Redis ten times a second."""
    args = _pods(default)["mcm-tasks-redis"]["containers"][0]["args"]
    assert args[args.index("--hz") + 1] == "1"


def test_pods_are_hardened_and_probed(default: list[dict[str, Any]]) -> None:
    full = render_file(CHART / "ci" / "full-values.yaml")
    for name, pod in {**_pods(default), **_pods(full)}.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["requests"] and container["resources"]["limits"], name
            assert container["livenessProbe"] and container["readinessProbe"], name
    for component in CONTROLLERS:
        container = _pods(default)[f"mcm-tasks-{component}"]["containers"][0]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_only_the_processes_that_talk_to_kubernetes_get_a_token(default: list[dict[str, Any]]) -> None:
    pods = _pods(default)
    for name in ("mcm-tasks-beat", "mcm-tasks-redis"):
        assert pods[name]["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in pods[name]
    for component in ("informer", "worker"):
        assert pods[f"mcm-tasks-{component}"]["serviceAccountName"] == f"mcm-tasks-{component}"


def _rules(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["kind"], rule) for d in docs if d["kind"] in ("Role", "ClusterRole") for rule in d["rules"]]


@pytest.mark.parametrize("values", [None, *VALUE_SETS], ids=lambda v: v.name if v else "default")
def test_rbac_has_no_wildcards_and_control_grants_are_namespaced(values: Path | None) -> None:
    docs = render_file(values) if values else render()
    seed = values is not None and values.name.startswith("seed")  # tests/unit/test_chart_seed.py
    for _, rule in _rules(docs):
        for key in ("verbs", "resources", "apiGroups"):
            assert "*" not in rule[key], rule
    for role in by_kind(docs, "ClusterRole"):
        groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
        assert "machine.sapcloud.io" not in groups, "machine objects are granted per namespace only"
        assert role["metadata"]["name"].endswith("-seed-discovery" if seed else "-target")
    informer_verbs = {v for d in docs if d["metadata"]["name"].startswith("mcm-tasks-informer")
                      and d["kind"] in ("Role", "ClusterRole") for r in d["rules"]
                      if "leases" not in r["resources"] for v in r["verbs"]}  # fmt: skip
    # in seed mode it also reads a namespace's target kubeconfig Secrets one by one
    assert informer_verbs <= {"list", "watch", *(["get"] if seed else [])}, "the informer only reads"


def test_control_and_target_render_apart() -> None:
    control = render_file(CHART / "ci" / "control-values.yaml")
    assert not by_kind(control, "ClusterRole") and not by_kind(control, "ClusterRoleBinding")
    worker = _pods(control)["mcm-tasks-worker"]
    env = {e["name"]: e.get("value") for e in worker["containers"][0]["env"]}
    assert env["MCM_TARGET_KUBECONFIG"] == "/etc/mcm/target/kubeconfig"
    assert env["MCM_CONTROL_KUBECONFIG"] == "inClusterConfig"
    assert env["MCM_REDIS_URL"] == "rediss://redis.infra.svc:6380/0", "no credentials in the URL"
    assert env["MCM_REDIS_TLS_CA_FILE"] == "/etc/mcm/redis-ca/ca.crt"
    assert env["MCM_REDIS_TLS_CERT_FILE"] == "/etc/mcm/redis-client/tls.crt"
    password = next(e for e in worker["containers"][0]["env"] if e["name"] == "MCM_REDIS_PASSWORD")
    assert password["valueFrom"]["secretKeyRef"] == {"name": "redis-credentials", "key": "password"}
    target = render_file(CHART / "ci" / "target-values.yaml")
    assert {d["kind"] for d in target} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret", "Role", "RoleBinding"
    }  # fmt: skip
    # the only namespaced grant in the target cluster: bootstrap-token Secrets in kube-system
    assert {r["metadata"]["namespace"] for r in by_kind(target, "Role")} == {"kube-system"}
    tokens = by_kind(target, "Secret")
    assert {t["type"] for t in tokens} == {"kubernetes.io/service-account-token"}


def test_keda_reads_the_queues_where_kombu_stores_them() -> None:
    docs = render_file(CHART / "ci" / "full-values.yaml")
    scaled = named(docs, "ScaledObject", "-worker")
    prefix = "mcm-dev"  # full-values sets key-prefix
    settings = Settings(key_prefix=prefix)
    expected = {broker_prefix(settings) + settings.queue_name(kind) for kind in QUEUES}
    assert {t["metadata"]["listName"] for t in scaled["spec"]["triggers"]} == expected
    assert named(docs, "Deployment", "-worker")["spec"].get("replicas") is None, "KEDA owns the replicas"


def _configmap_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(named(docs, "ConfigMap", "-settings")["data"])


def test_every_mcm_flag_is_settable_and_reaches_the_processes(tmp_path: Path) -> None:
    """Each setting, by its flag name, becomes the MCM_* variable Settings reads back unchanged."""
    sys.path.insert(0, str(ROOT / "tools"))
    from chart_schema import CHART_MANAGED

    defaults = Settings()
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        if name in CHART_MANAGED:
            continue
        value = getattr(defaults, name)
        values[name.replace("_", "-")] = value
    docs = render({"settings": values}, tmp=tmp_path)
    env = _configmap_env(docs)
    for name in Settings.model_fields:
        assert name in CHART_MANAGED or f"MCM_{name.upper()}" in env, name
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        loaded = load_settings()
    for name in values:
        field = name.replace("-", "_")
        assert getattr(loaded, field) == getattr(defaults, field), name


def test_schema_is_generated_from_settings() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "chart_schema.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"settings": {"machine-helth-timeout": "5m"}}, "machine-helth-timeout"),
        ({"settings": {"machine-health-timeout": "five minutes"}}, "machine-health-timeout"),
        ({"informer": {"replicas": "two"}}, "replicas"),
        ({"scope": "everything"}, "scope"),
        ({"worker": {"autoscaling": {"enabled": True}, "keda": {"enabled": True}}}, "enable one"),
        ({"flower": {"enabled": True}}, "basic auth"),
        ({"redis": {"bundled": False}}, "redis.url is required"),
        ({"redis": {"tls": {"caSecret": "ca"}}}, "external Redis"),
        (
            {
                "redis": {"bundled": False, "url": "sentinel://s1:26379/0"},
                "worker": {"keda": {"enabled": True}},
            },
            "Sentinel",
        ),
        ({"scope": "control"}, "targetCluster.kubeconfigSecrets"),
    ],
)
def test_bad_values_fail_at_install(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(values, tmp=tmp_path)


def test_chart_crds_are_the_generated_ones() -> None:
    chart_crds = sorted((CHART / "crds").glob("*.yaml"))
    assert [p.name for p in chart_crds] == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for path in chart_crds:
        assert filecmp.cmp(path, ROOT / "crds" / path.name, shallow=False), path.name
    assert len(chart_crds) == len(all_crds())


def test_notes_render_for_each_scope(tmp_path: Path) -> None:
    from tests.chart_support import render_text

    notes = render_text(None, "--notes").split("\nNOTES:\n")[1]
    assert "kubectl -n default get mcd,mcs,mc" in notes
    target = render_text({"scope": "target"}, "--notes", tmp=tmp_path).split("\nNOTES:\n")[1]
    assert "create token mcm-tasks-worker" in target


def _runbook_anchors() -> set[str]:
    """The ids MkDocs gives docs/operate/runbooks.md's sections (toc's slugify: lower case, words)."""
    text = (ROOT / "docs" / "operate" / "runbooks.md").read_text()
    titles = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("## ")]
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", t.lower())).strip("-") for t in titles}


def _alerts(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for d in by_kind(docs, "PrometheusRule") for g in d["spec"]["groups"] for rule in g["rules"]]


def test_every_alert_links_to_a_runbook_section_that_exists() -> None:
    alerts = _alerts(render_file(CHART / "ci" / "full-values.yaml"))
    assert alerts, "full-values.yaml enables the PrometheusRule"
    anchors = _runbook_anchors()
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == "https://docs.example.com/operate/runbooks/", url
        assert anchor in anchors, f"{alert['alert']}: no section #{anchor} in docs/operate/runbooks.md"
    assert {a["alert"].lower() for a in alerts} == anchors, "a runbook section without its alert, or back"


def test_alerts_use_only_metrics_the_code_exports(tmp_path: Path) -> None:
    from mcm_tasks.controllers.machinedeployment.metrics import machine_deployment_metrics

    code = "\n".join(
        p.read_text() for base in ("mcm_tasks", "informers", "providers") for p in (ROOT / base).rglob("*.py")
    )
    code += "".join(
        f'"{family.name}"' for family in machine_deployment_metrics([])
    )  # names built from a prefix
    for alert in _alerts(render({"metrics": {"prometheusRule": {"enabled": True}}}, tmp=tmp_path)):
        for metric in re.findall(r"\b(mcm_[a-z_]+)\{", alert["expr"]):
            assert f'"{metric}"' in code, f"{alert['alert']}: {metric} is not exported"
        assert 'namespace="default"' in alert["expr"], "alerts are scoped to the release's namespace"
    assert not _alerts(render()), "the PrometheusRule is off by default"
