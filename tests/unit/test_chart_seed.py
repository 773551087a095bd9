"""helm/mcm-tasks in seed mode (issue 33): one installation serving many namespaces of a seed's
control cluster. Its grants are the per-shoot Role's in every served namespace (a Role each with
seed.namespaces, a ClusterRole with seed.namespaceSelector), Secrets read in those namespaces only,
the Lease in the release namespace, Namespaces and Gardener's Cluster objects read cluster-wide, and
nothing in any target cluster; every process gets the namespaces as the runtime reads them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from mcm_tasks.settings import load_settings
from tests.chart_support import CHART, RenderError, by_kind, helm_command, named, render, require_engine

RELEASE_NS = "mcm-system"
SHOOTS = ["shoot--dev--alpha", "shoot--dev--beta", "shoot--prod--gamma"]
SELECTOR = "gardener.cloud/role=shoot"
SEED_VARS = {"MCM_NAMESPACES", "MCM_NAMESPACE_SELECTOR", "MCM_TARGET_KUBECONFIG_SECRET"}
Docs = list[dict[str, Any]]


def _seed(tmp: Path, **seed: Any) -> Docs:
    extra = seed.pop("values", {})
    return render({"seed": {"enabled": True, **seed}, **extra}, "--namespace", RELEASE_NS, tmp=tmp)


@pytest.fixture
def listed(tmp_path: Path) -> Docs:
    return _seed(tmp_path, namespaces=SHOOTS)


@pytest.fixture
def selected(tmp_path: Path) -> Docs:
    return _seed(tmp_path, namespaceSelector=SELECTOR)


def _roles(docs: Docs, kind: str = "Role") -> dict[tuple[str | None, str], list[dict[str, Any]]]:
    return {(d["metadata"].get("namespace"), d["metadata"]["name"]): d["rules"] for d in by_kind(docs, kind)}


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _env(docs: Docs, deployment: str) -> dict[str, str]:
    container = named(docs, "Deployment", f"-{deployment}")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


@pytest.mark.parametrize("how", ["namespaces", "namespaceSelector"])
def test_seed_mode_renders_valid_kubernetes_objects(tmp_path: Path, how: str) -> None:
    docs = _seed(tmp_path, **{how: SHOOTS if how == "namespaces" else SELECTOR})
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_each_listed_namespace_gets_a_role_per_process(listed: Docs) -> None:
    roles = _roles(listed)
    assert set(roles) == {(ns, f"mcm-tasks-{c}") for ns in SHOOTS for c in ("informer", "worker")} | {
        (RELEASE_NS, "mcm-tasks-informer-leases")
    }
    bindings = {
        (b["metadata"]["namespace"], b["metadata"]["name"]): b for b in by_kind(listed, "RoleBinding")
    }
    assert set(bindings) == set(roles)
    for (ns, name), binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        component = name.removeprefix("mcm-tasks-").removesuffix("-leases")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"mcm-tasks-{component}", "namespace": RELEASE_NS}
        ], ns
    for ns in SHOOTS:
        informer = _grants(roles[(ns, "mcm-tasks-informer")])
        assert {("", "secrets", v) for v in ("get", "list", "watch")} <= informer
        assert {v for _, _, v in informer} <= {"get", "list", "watch"}, "the informer only reads"
        worker = _grants(roles[(ns, "mcm-tasks-worker")])
        assert {("", "secrets", v) for v in ("get", "list", "watch", "patch")} <= worker
        assert not {g for g in informer | worker if g[1] == "leases"}, "Leases only in the release namespace"
    assert _grants(roles[(RELEASE_NS, "mcm-tasks-informer-leases")]) == {
        ("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")
    }


def test_seed_roles_grant_what_the_per_shoot_role_does(tmp_path: Path, listed: Docs) -> None:
    """The same machine objects, drain rules and Events; Secrets also got and watched (a namespace's
    target kubeconfig and token); the Lease moved out to the release namespace."""
    shoot = _roles(render(None, "--namespace", RELEASE_NS, tmp=tmp_path))
    seed = _roles(listed)
    for component in ("informer", "worker"):
        before = _grants(shoot[(RELEASE_NS, f"mcm-tasks-{component}")])
        after = _grants(seed[(SHOOTS[0], f"mcm-tasks-{component}")])
        assert {g for g in before if g[1] not in ("secrets", "leases")} == {
            g for g in after if g[1] != "secrets"
        }
        assert {g for g in before if g[1] == "secrets"} | {
            ("", "secrets", v) for v in ("get", "list", "watch")
        } == {g for g in after if g[1] == "secrets"}


def test_a_list_grants_no_secrets_cluster_wide(listed: Docs) -> None:
    """With a list, the only cluster-wide grants are the reads that find the namespaces and their
    target clusters: Namespaces and Gardener's Cluster objects, nothing that holds a credential."""
    cluster_roles = _roles(listed, "ClusterRole")
    assert set(cluster_roles) == {(None, "mcm-tasks-seed-discovery")}
    assert _grants(cluster_roles[(None, "mcm-tasks-seed-discovery")]) == {
        (group, resource, verb)
        for group, resource in (("", "namespaces"), ("extensions.gardener.cloud", "clusters"))
        for verb in ("get", "list", "watch")
    }
    binding = named(listed, "ClusterRoleBinding", "-seed-discovery")
    assert binding["roleRef"]["name"] == "mcm-tasks-seed-discovery"
    assert {s["name"] for s in binding["subjects"]} == {"mcm-tasks-informer", "mcm-tasks-worker"}
    assert {s["namespace"] for s in binding["subjects"]} == {RELEASE_NS}


def test_a_selector_binds_the_namespace_grants_cluster_wide(selected: Docs) -> None:
    cluster_roles = _roles(selected, "ClusterRole")
    assert set(cluster_roles) == {
        (None, f"mcm-tasks-{n}") for n in ("informer-seed", "worker-seed", "seed-discovery")
    }
    assert ("", "secrets", "get") in _grants(cluster_roles[(None, "mcm-tasks-informer-seed")])
    for component in ("informer", "worker"):
        binding = named(selected, "ClusterRoleBinding", f"-{component}-seed")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"mcm-tasks-{component}-seed",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"mcm-tasks-{component}", "namespace": RELEASE_NS}
        ]
    assert set(_roles(selected)) == {(RELEASE_NS, "mcm-tasks-informer-leases")}


@pytest.mark.parametrize("scope", ["all", "control"])
def test_seed_mode_renders_no_target_rbac(tmp_path: Path, scope: str) -> None:
    for how in ({"namespaces": SHOOTS}, {"namespaceSelector": SELECTOR}):
        docs = _seed(tmp_path, **how, values={"scope": scope})
        names = [d["metadata"]["name"] for d in docs if d["kind"].endswith(("Role", "RoleBinding"))]
        assert names and not [n for n in names if n.endswith("-target") or "bootstrap" in n], names
        assert "kube-system" not in {d["metadata"].get("namespace") for d in docs}
        for _, rules in {**_roles(docs), **_roles(docs, "ClusterRole")}.items():
            resources = {r for _, r, _ in _grants(rules)}
            assert not resources & {"nodes", "pods", "pods/eviction", "volumeattachments"}, resources


@pytest.mark.parametrize("how", ["namespaces", "namespaceSelector"])
def test_every_process_gets_the_seed_settings(tmp_path: Path, how: str) -> None:
    value = SHOOTS if how == "namespaces" else SELECTOR
    docs = _seed(
        tmp_path,
        **{how: value},
        targetKubeconfigSecret="my-kubeconfig",
        values={"flower": {"enabled": True, "auth": {"password": "p"}}},
    )
    for deployment in ("informer", "worker", "beat", "flower"):
        env = _env(docs, deployment)
        if how == "namespaces":
            assert env["MCM_NAMESPACES"] == ",".join(SHOOTS) and "MCM_NAMESPACE_SELECTOR" not in env
        else:
            assert env["MCM_NAMESPACE_SELECTOR"] == SELECTOR and "MCM_NAMESPACES" not in env
        assert env["MCM_TARGET_KUBECONFIG_SECRET"] == "my-kubeconfig"
        assert "MCM_TARGET_KUBECONFIG" not in env, "the target clusters come from each namespace's Secrets"
        assert env["MCM_NAMESPACE"] == RELEASE_NS
    for deployment in ("informer", "worker"):
        pod = named(docs, "Deployment", f"-{deployment}")["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is True
        assert not [v for v in pod["volumes"] if "kubeconfig" in v["name"]]


def test_an_empty_secret_name_means_gardeners_layout(listed: Docs) -> None:
    assert _env(listed, "worker")["MCM_TARGET_KUBECONFIG_SECRET"] == ""


def test_per_shoot_mode_gets_no_seed_settings(tmp_path: Path) -> None:
    docs = render(None, tmp=tmp_path)
    for deployment in ("informer", "worker", "beat"):
        env = _env(docs, deployment)
        assert not SEED_VARS & set(env) and "MCM_TARGET_KUBECONFIG" in env


def test_out_of_cluster_processes_get_no_grants_or_token(tmp_path: Path) -> None:
    """controlCluster.kubeconfigSecrets: that process reaches the control cluster with its own
    kubeconfig, so the chart grants its ServiceAccount nothing (and, for both, mounts no token)."""
    one = _seed(
        tmp_path, namespaces=SHOOTS, values={"controlCluster": {"kubeconfigSecrets": {"worker": "w"}}}
    )
    assert {name for _, name in _roles(one)} == {"mcm-tasks-informer", "mcm-tasks-informer-leases"}
    subjects = named(one, "ClusterRoleBinding", "-seed-discovery")["subjects"]
    assert [s["name"] for s in subjects] == ["mcm-tasks-informer"]
    both = _seed(
        tmp_path,
        namespaces=SHOOTS,
        values={"controlCluster": {"kubeconfigSecrets": {"worker": "w", "informer": "i"}}},
    )
    assert not [d for d in both if d["kind"].endswith(("Role", "RoleBinding", "ServiceAccount"))]
    for deployment in ("informer", "worker"):
        assert (
            named(both, "Deployment", f"-{deployment}")["spec"]["template"]["spec"][
                "automountServiceAccountToken"
            ]
            is False
        )


def test_notes_name_the_served_namespaces(tmp_path: Path) -> None:
    from tests.chart_support import render_text

    notes = render_text({"seed": {"enabled": True, "namespaces": SHOOTS}}, "--notes", tmp=tmp_path)
    notes = notes.split("\nNOTES:\n")[1]
    assert "seed mode" in notes and ", ".join(SHOOTS) in notes and "--all-namespaces" in notes
    notes = render_text({"seed": {"enabled": True, "namespaceSelector": SELECTOR}}, "--notes", tmp=tmp_path)
    assert f"labelled {SELECTOR}" in notes.split("\nNOTES:\n")[1]


BAD_SEED_VALUES = [
    (
        {"seed": {"enabled": True, "namespaces": ["a"], "namespaceSelector": SELECTOR}},
        "seed.namespaceSelector",
    ),
    ({"seed": {"enabled": True}}, "seed.namespaces"),
    ({"seed": {"enabled": True, "namespaces": ["Shoot_A"]}}, "seed.namespaces"),
    ({"seed": {"enabled": True, "namespaces": ["a", "a"]}}, "seed.namespaces"),
    (
        {"seed": {"enabled": True, "namespaces": ["a"], "targetKubeconfigSecret": "No!"}},
        "targetKubeconfigSecret",
    ),
    ({"seed": {"namespaces": ["a"]}}, "set seed.enabled=true"),
    ({"seed": {"enabled": True, "namespaces": ["a"]}, "scope": "target"}, "scope=target"),
    ({"seed": {"enabled": True, "namespaces": ["a"]}, "controlNamespace": "m"}, "unset controlNamespace"),
    (
        {
            "seed": {"enabled": True, "namespaces": ["a"]},
            "targetCluster": {"kubeconfigSecrets": {"worker": "w"}},
        },
        "targetCluster.kubeconfigSecrets",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_SEED_VALUES)
def test_bad_seed_values_fail_at_install(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(values, tmp=tmp_path)


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        ({"enabled": True, "namespaces": ["a"], "namespaceSelector": SELECTOR}, "both choose the namespaces"),
        ({"enabled": True}, "seed.enabled needs the namespaces to serve"),
    ],
)
def test_validate_says_it_in_words_without_the_schema(
    tmp_path: Path, seed: dict[str, Any], message: str
) -> None:
    """The schema refuses these first, naming only the value it points at; the chart's own check says
    what to do, and still holds where the schema is not checked (helm --skip-schema-validation)."""
    import yaml

    engine = require_engine()
    assert engine.path is not None
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "values.schema.json").unlink()
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"seed": seed}))
    args = ["-f", str(values)]
    cmd = (
        helm_command(str(engine.path), args, chart)
        if engine.name == "helm"
        else [str(engine.path), *args, str(chart)]
    )
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr, result.stderr


SEED_FIELDS = ("namespaces", "namespace_selector", "target_kubeconfig_secret")


def test_the_seed_variables_are_settings(tmp_path: Path) -> None:
    """The chart's seed variables are the runtime's settings, read back as given."""
    docs = _seed(tmp_path, namespaces=SHOOTS, targetKubeconfigSecret="kc")
    env = {k: v for k, v in _env(docs, "worker").items() if k in SEED_VARS}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        loaded = load_settings()
    assert loaded.namespace_list == SHOOTS and loaded.seed_mode
    assert loaded.target_kubeconfig_secret == "kc"
    selector = _env(_seed(tmp_path, namespaceSelector=SELECTOR), "worker")["MCM_NAMESPACE_SELECTOR"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MCM_NAMESPACE_SELECTOR", selector)
        assert load_settings().namespace_selector == SELECTOR
