"""The kubernetes-client/python e2e suite's ``test_utils.py``, ported: ``kubernetes.utils``'
create_from_yaml / create_from_dict / create_from_directory against the sandbox.

Each upstream test -> ours (same order as upstream's file):

    test_create_apps_deployment_from_yaml                      -> test_deployment_from_yaml
    test_create_apps_deployment_from_yaml_with_apply_is_idempotent -> test_deployment_apply_after_create
    test_create_apps_deployment_from_yaml_object               -> test_deployment_from_yaml_objects
    test_create_apps_deployment_from_yaml_obj                  -> test_deployment_from_dict
    test_create_pod_from_yaml                                  -> test_pod_from_yaml
    test_create_service_from_yaml                              -> test_service_from_yaml
    test_create_namespace_from_yaml                            -> test_namespace_from_yaml
    test_create_rbac_role_from_yaml                            -> test_role_from_yaml[quiet]
    test_create_rbac_role_from_yaml_with_verbose_enabled       -> test_role_from_yaml[verbose]
    test_create_deployment_non_default_namespace_from_yaml     -> test_namespace_then_deployment_in_it
    test_create_apiservice_from_yaml_with_conflict             -> test_apiservice_conflict_body
    test_create_general_list_from_yaml                         -> test_kind_list
    test_create_namespace_list_from_yaml                       -> test_namespace_list
    test_create_implicit_service_list_from_yaml_with_conflict  -> test_implicit_service_list_with_duplicate
    test_create_multi_resource_from_directory                  -> test_directory_of_manifests
    test_create_from_multi_resource_yaml                       -> test_multi_document_service_and_rc
    test_create_from_list_in_multi_resource_yaml               -> test_pod_list_and_deployment[default]
    test_create_from_multi_resource_yaml_with_conflict         -> test_conflict_mid_file_keeps_going
    test_create_from_multi_resource_yaml_with_multi_conflicts  -> test_two_conflicts_in_one_file
    test_create_namespaced_apps_deployment_from_yaml           -> test_deployment_into_given_namespace
    test_create_from_list_in_multi_resource_yaml_namespaced    -> test_pod_list_and_deployment[namespaced]
    test_metrics_utilities_integration                         -> skipped: needs running containers
                                                                  and metrics-server (not an API server part)
    TestUtilsUnitTests.test_parse_quantity / test_format_quantity -> not ported: client-only, no request
    (fixtures without a test upstream: job-non-existent-namespace.yaml, crd/*.yml)
                                                               -> test_job_into_missing_namespace,
                                                                  test_crd_then_custom_object
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.dynamic import DynamicClient

from mcm_sandbox.procs import wait_until
from tests.sandbox.client_suite import manifest, wait_gone

pytestmark = pytest.mark.integration

DEFAULT = "default"


@pytest.fixture(scope="module", name="utils_ns")
def utils_ns_fixture(suite_api: client.ApiClient) -> Any:
    """The suite's own namespace, made once as upstream's setUpClass does."""
    core = client.CoreV1Api(suite_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="e2e-test-utils")))
    yield "e2e-test-utils"
    core.delete_namespace("e2e-test-utils")


def conflict_body(message: str, name: str, kind: str, group: str = "") -> str:
    """kube-apiserver's AlreadyExists Status, byte for byte as it writes it (compact, newline)."""
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
              "reason": "AlreadyExists", "details": details, "code": 409}  # fmt: skip
    return "Error from server (Conflict): " + json.dumps(status, separators=(",", ":")) + "\n"


def check_nginx_app(dep: client.V1Deployment, name: str = "nginx-app") -> None:
    container = dep.spec.template.spec.containers[0]
    assert dep.metadata.name == name and dep.spec.replicas == 3
    assert (container.name, container.image) == ("nginx", "nginx:1.15.4")
    assert container.ports[0].container_port == 80
    assert dep.spec.template.metadata.labels["app"] == "nginx"


def test_deployment_from_yaml(suite_api: client.ApiClient) -> None:
    created = utils.create_from_yaml(suite_api, manifest("apps-deployment.yaml"))
    assert isinstance(created[0][0], client.V1Deployment)
    apps = client.AppsV1Api(suite_api)
    check_nginx_app(apps.read_namespaced_deployment("nginx-app", DEFAULT))
    apps.delete_namespaced_deployment("nginx-app", DEFAULT, body={})
    wait_gone(apps.read_namespaced_deployment, "nginx-app", DEFAULT)


def test_deployment_apply_after_create(suite_api: client.ApiClient) -> None:
    """A server-side apply of what create made changes nothing and does not conflict."""
    apps = client.AppsV1Api(suite_api)
    utils.create_from_yaml(suite_api, manifest("apps-deployment.yaml"))
    before = apps.read_namespaced_deployment("nginx-app", DEFAULT)
    check_nginx_app(before)
    utils.create_from_yaml(suite_api, manifest("apps-deployment.yaml"), apply=True)
    after = apps.read_namespaced_deployment("nginx-app", DEFAULT)
    check_nginx_app(after)
    assert after.metadata.generation == before.metadata.generation
    assert "python-client" in {m.manager for m in after.metadata.managed_fields}
    apps.delete_namespaced_deployment("nginx-app", DEFAULT, body={})
    wait_gone(apps.read_namespaced_deployment, "nginx-app", DEFAULT)


def test_deployment_from_yaml_objects(suite_api: client.ApiClient) -> None:
    with open(manifest("apps-deployment.yaml")) as f:
        utils.create_from_yaml(suite_api, yaml_objects=yaml.safe_load_all(f))
    apps = client.AppsV1Api(suite_api)
    check_nginx_app(apps.read_namespaced_deployment("nginx-app", DEFAULT))
    apps.delete_namespaced_deployment("nginx-app", DEFAULT, body={})
    wait_gone(apps.read_namespaced_deployment, "nginx-app", DEFAULT)


def test_deployment_from_dict(suite_api: client.ApiClient) -> None:
    with open(manifest("apps-deployment.yaml")) as f:
        body = yaml.safe_load(f)
    body["metadata"]["name"] = "nginx-app-3"
    utils.create_from_dict(suite_api, body)
    apps = client.AppsV1Api(suite_api)
    check_nginx_app(apps.read_namespaced_deployment("nginx-app-3", DEFAULT), "nginx-app-3")
    apps.delete_namespaced_deployment("nginx-app-3", DEFAULT, body={})


def test_pod_from_yaml(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("core-pod.yaml"))
    core = client.CoreV1Api(suite_api)
    pod = core.read_namespaced_pod("myapp-pod", DEFAULT)
    assert (pod.spec.containers[0].name, pod.spec.containers[0].image) == ("myapp-container", "busybox")
    assert pod.status.phase == "Pending"
    core.delete_namespaced_pod("myapp-pod", DEFAULT, body={})


def test_service_from_yaml(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("core-service.yaml"))
    core = client.CoreV1Api(suite_api)
    svc = core.read_namespaced_service("my-service", DEFAULT)
    assert svc.spec.selector == {"app": "MyApp"} and svc.spec.ports[0].target_port == 9376
    deleted = core.delete_namespaced_service("my-service", DEFAULT, body={})
    assert isinstance(deleted, client.V1Service) and deleted.metadata.name == "my-service"


def test_namespace_from_yaml(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("core-namespace.yaml"))
    core = client.CoreV1Api(suite_api)
    assert core.read_namespace("development").metadata.name == "development"
    core.delete_namespace("development", body={})
    wait_gone(core.read_namespace, "development")


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_role_from_yaml(
    suite_api: client.ApiClient, verbose: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    utils.create_from_yaml(suite_api, manifest("rbac-role.yaml"), verbose=verbose)
    rbac = client.RbacAuthorizationV1Api(suite_api)
    role = rbac.read_namespaced_role("pod-reader", DEFAULT)
    assert role.rules[0].resources == ["pods"] and role.rules[0].verbs == ["get", "watch", "list"]
    assert ("role created." in capsys.readouterr().out) is verbose
    rbac.delete_namespaced_role("pod-reader", DEFAULT, body={})


def test_namespace_then_deployment_in_it(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("dep-namespace.yaml"))
    utils.create_from_yaml(suite_api, manifest("dep-deployment.yaml"))
    core, apps = client.CoreV1Api(suite_api), client.AppsV1Api(suite_api)
    assert core.read_namespace("dep").status.phase == "Active"
    assert apps.read_namespaced_deployment("nginx-deployment", "dep").metadata.namespace == "dep"
    apps.delete_namespaced_deployment("nginx-deployment", "dep", body={})
    core.delete_namespace("dep", body={})
    wait_gone(core.read_namespace, "dep")


def test_apiservice_conflict_body(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("api-service.yaml"))
    reg = client.ApiregistrationV1Api(suite_api)
    svc = reg.read_api_service("v1alpha1.wardle.k8s.io")
    assert (svc.spec.group, svc.spec.version) == ("wardle.k8s.io", "v1alpha1")
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(suite_api, manifest("api-service.yaml"))
    expected = conflict_body('apiservices.apiregistration.k8s.io "v1alpha1.wardle.k8s.io" already exists',
                             "v1alpha1.wardle.k8s.io", "apiservices", "apiregistration.k8s.io")  # fmt: skip
    assert str(failed.value) == expected
    reg.delete_api_service("v1alpha1.wardle.k8s.io", body={})


def test_kind_list(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("list.yaml"))
    core, apps = client.CoreV1Api(suite_api), client.AppsV1Api(suite_api)
    svc = core.read_namespaced_service("list-service-test", DEFAULT)
    assert svc.spec.selector == {"app": "list-deployment-test"}
    dep = apps.read_namespaced_deployment("list-deployment-test", DEFAULT)
    assert dep.spec.replicas == 1 and dep.spec.template.spec.containers[0].image == "nginx:1.15.4"
    core.delete_namespaced_service("list-service-test", DEFAULT, body={})
    apps.delete_namespaced_deployment("list-deployment-test", DEFAULT, body={})


def test_namespace_list(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("namespace-list.yaml"))
    core = client.CoreV1Api(suite_api)
    for name in ("mock-1", "mock-2"):
        assert core.read_namespace(name).metadata.labels["name"] == name
    for name in ("mock-1", "mock-2"):
        core.delete_namespace(name, body={})
        wait_gone(core.read_namespace, name)


def test_implicit_service_list_with_duplicate(suite_api: client.ApiClient) -> None:
    """Items of a ServiceList carry no kind; the duplicate fails, the others are made."""
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(suite_api, manifest("implicit-svclist.json"))
    assert [e.status for e in failed.value.api_exceptions] == [409]
    core = client.CoreV1Api(suite_api)
    for name in ("mock-3", "mock-4"):
        assert core.read_namespaced_service(name, DEFAULT).metadata.labels["app"] == name
        core.delete_namespaced_service(name, DEFAULT, body={})


def check_mock_pair(core: client.CoreV1Api, name: str) -> None:
    svc = core.read_namespaced_service(name, DEFAULT)
    assert svc.metadata.labels["app"] == name and svc.spec.selector["app"] == name
    assert svc.spec.ports[0].port == 99
    rc = core.read_namespaced_replication_controller(name, DEFAULT)
    assert rc.spec.selector == {"app": name} and rc.spec.replicas == 1
    assert rc.spec.template.metadata.labels["app"] == name
    container = rc.spec.template.spec.containers[0]
    assert (container.name, container.image) == ("mock-container", "registry.k8s.io/pause:3.9")


def drop_mock_pair(core: client.CoreV1Api, name: str) -> None:
    core.delete_namespaced_replication_controller(name, DEFAULT, propagation_policy="Background")
    core.delete_namespaced_service(name, DEFAULT, body={})
    wait_gone(core.read_namespaced_replication_controller, name, DEFAULT)


def test_directory_of_manifests(suite_api: client.ApiClient) -> None:
    utils.create_from_directory(suite_api, manifest("multi-resource"))
    core = client.CoreV1Api(suite_api)
    check_mock_pair(core, "mock")
    drop_mock_pair(core, "mock")


def test_multi_document_service_and_rc(suite_api: client.ApiClient) -> None:
    utils.create_from_yaml(suite_api, manifest("multi-resource.yaml"))
    core = client.CoreV1Api(suite_api)
    check_mock_pair(core, "mock")
    drop_mock_pair(core, "mock")


@pytest.mark.parametrize("where", ["default", "namespaced"])
def test_pod_list_and_deployment(suite_api: client.ApiClient, utils_ns: str, where: str) -> None:
    ns = DEFAULT if where == "default" else utils_ns
    kwargs = {} if where == "default" else {"namespace": ns}
    utils.create_from_yaml(suite_api, manifest("multi-resource-with-list.yaml"), **kwargs)
    core, apps = client.CoreV1Api(suite_api), client.AppsV1Api(suite_api)
    for name in ("mock-pod-0", "mock-pod-1"):
        pod = core.read_namespaced_pod(name, ns)
        assert pod.metadata.labels["app"] == name
        assert (pod.spec.containers[0].name, pod.spec.containers[0].image) == (name, "busybox")
    dep = apps.read_namespaced_deployment("mock", ns)
    assert dep.spec.replicas == 3 and dep.spec.template.metadata.labels["app"] == "mock"
    for name in ("mock-pod-0", "mock-pod-1"):
        core.delete_namespaced_pod(name, ns, body={})
    apps.delete_namespaced_deployment("mock", ns, body={})


def test_conflict_mid_file_keeps_going(suite_api: client.ApiClient) -> None:
    """The Service already exists: its create fails with kube's exact body, the RC after it is made."""
    utils.create_from_yaml(suite_api, manifest("yaml-conflict-first.yaml"))
    core = client.CoreV1Api(suite_api)
    assert core.read_namespaced_service("mock-2", DEFAULT).spec.ports[0].port == 99
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(suite_api, manifest("yaml-conflict-multi.yaml"))
    assert str(failed.value) == conflict_body('services "mock-2" already exists', "mock-2", "services")
    check_mock_pair(core, "mock-2")
    drop_mock_pair(core, "mock-2")


def test_two_conflicts_in_one_file(suite_api: client.ApiClient) -> None:
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(suite_api, manifest("triple-nginx.yaml"))
    one = conflict_body(
        'deployments.apps "triple-nginx" already exists', "triple-nginx", "deployments", "apps"
    )
    assert str(failed.value) == one + one
    apps = client.AppsV1Api(suite_api)
    assert apps.read_namespaced_deployment("triple-nginx", DEFAULT).spec.replicas == 3
    apps.delete_namespaced_deployment("triple-nginx", DEFAULT, body={})


def test_deployment_into_given_namespace(suite_api: client.ApiClient, utils_ns: str) -> None:
    utils.create_from_yaml(suite_api, manifest("apps-deployment.yaml"), namespace=utils_ns)
    apps = client.AppsV1Api(suite_api)
    check_nginx_app(apps.read_namespaced_deployment("nginx-app", utils_ns))
    with pytest.raises(client.ApiException) as err:
        apps.read_namespaced_deployment("nginx-app", DEFAULT)
    assert err.value.status == 404
    apps.delete_namespaced_deployment("nginx-app", utils_ns, body={})


def test_job_into_missing_namespace(suite_api: client.ApiClient) -> None:
    """The manifest's own namespace wins over the argument; it does not exist: 404 NotFound."""
    with pytest.raises(utils.FailToCreateError) as failed:
        utils.create_from_yaml(suite_api, manifest("job-non-existent-namespace.yaml"))
    (exc,) = failed.value.api_exceptions
    status = json.loads(exc.body)
    assert exc.status == 404 and status["reason"] == "NotFound"
    assert status["message"] == 'namespaces "non-existent-namespace" not found'
    assert status["details"] == {"name": "non-existent-namespace", "kind": "namespaces"}


def test_crd_then_custom_object(suite_api: client.ApiClient) -> None:
    """A CRD from YAML, then an object of it through the dynamic client once it is Established."""
    utils.create_from_yaml(suite_api, manifest("foo-crd.yaml"))
    ext = client.ApiextensionsV1Api(suite_api)

    def established() -> bool:
        conditions = ext.read_custom_resource_definition("foos.samplecontroller.x-k8s.io").status.conditions
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    wait_until(established, 15, what="CRD Established")
    foos = DynamicClient(suite_api).resources.get(
        api_version="samplecontroller.x-k8s.io/v1alpha1", kind="Foo"
    )
    with open(manifest("foo.yaml")) as f:
        made = foos.create(body=yaml.safe_load(f), namespace=DEFAULT)
    assert made.spec.replicas == 1 and made.metadata.namespace == DEFAULT
    with pytest.raises(client.ApiException) as err:
        foos.patch(name="example-foo", namespace=DEFAULT, body={"spec": {"replicas": 11}},
                   content_type="application/merge-patch+json")  # fmt: skip
    assert err.value.status == 422  # the schema's maximum
    ext.delete_custom_resource_definition("foos.samplecontroller.x-k8s.io")
