"""Generated invalid and hostile MCM objects (and mcm-tasks's MachineDrainRules), for the fuzz test
(``tests/e2e/test_hostile_e2e.py``).

Every object is wrong in at least one way a controller must notice: wrong types where the schema
lets them through, unknown selector operators and enum values, huge and deeply nested values,
unicode, and references to what does not exist (class, secret, owner). None of them is a valid
request for a VM, so a system that answers them correctly creates no machine for them.

Deterministic: the same seed gives the same objects. Each carries ``why`` (what is wrong with it),
so a failing test can say which kind of hostility was not answered.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcm_tasks import kinds
from mcm_tasks.api import API_VERSION
from mcm_tasks.kube import resources as kres

Obj = dict[str, Any]

#: the label every generated object carries (to list or delete them all)
FUZZ_LABEL = "mcm-tasks.io/fuzz"
SNOWMAN = "\u2603"
UNICODE = "h\u00e9llo-\u4e16\u754c-\U0001f600-\u202e-\u0000-end"


@dataclass(frozen=True)
class Hostile:
    resource: kres.Resource
    body: Obj
    why: str

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def nested(depth: int, leaf: Any = "bottom") -> Any:
    value = leaf
    for i in range(depth):
        value = {f"l{i % 7}": value} if i % 2 else [value]
    return {"deep": value}


def huge(rnd: random.Random, size: int) -> str:
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(size))


class Generator:
    """Builds ``count`` hostile objects; ``secret`` names an existing secret with userData, so that
    some classes fail on their own content rather than on a missing secret."""

    def __init__(self, seed: int, namespace: str, secret: str, prefix: str = "fz") -> None:
        self.rnd = random.Random(seed)
        self.namespace = namespace
        self.secret = secret
        self.prefix = prefix
        self.n = 0

    def generate(self, count: int) -> list[Hostile]:
        makers: list[Callable[[], Hostile]] = [
            *[
                getattr(self, name)
                for name in dir(self)
                if name.startswith(("class_", "machine_", "set_", "md_", "rule_"))
            ]
        ]
        makers.sort(key=lambda f: f.__name__)
        out = []
        for i in range(count):
            out.append(makers[i % len(makers)]())
        self.rnd.shuffle(out)
        return out

    # --- bases ---------------------------------------------------------------------------------------

    def _name(self, short: str) -> str:
        self.n += 1
        return f"{self.prefix}-{short}-{self.n:04d}"

    def _meta(self, short: str) -> Obj:
        return {"name": self._name(short), "namespace": self.namespace, "labels": {FUZZ_LABEL: "true"}}

    def _missing_class(self) -> str:
        return f"{self.prefix}-no-such-class-{self.rnd.randrange(10**6)}"

    def _class(self, why: str, **fields: Any) -> Hostile:
        body: Obj = {
            "apiVersion": API_VERSION,
            "kind": "MachineClass",
            "metadata": self._meta("mcc"),
            "provider": "local",
            "providerSpec": {},
            "secretRef": {"name": self.secret, "namespace": self.namespace},
        }
        body.update(fields)
        return Hostile(kinds.MACHINE_CLASS.resource, body, why)

    def _machine(self, why: str, spec: Obj | None = None, **meta: Any) -> Hostile:
        body: Obj = {
            "apiVersion": API_VERSION,
            "kind": "Machine",
            "metadata": {**self._meta("m"), **meta},
            "spec": {"class": {"kind": "MachineClass", "name": self._missing_class()}, **(spec or {})},
        }
        return Hostile(kinds.MACHINE.resource, body, why)

    def _template(self, labels: dict[str, str], spec: Obj | None = None) -> Obj:
        return {
            "metadata": {"labels": labels},
            "spec": {"class": {"kind": "MachineClass", "name": self._missing_class()}, **(spec or {})},
        }

    def _owner(
        self,
        resource: kres.Resource,
        short: str,
        why: str,
        selector: Obj | None,
        template_spec: Obj | None,
        spec: Obj,
    ) -> Hostile:
        """A MachineSet or MachineDeployment selecting its own template's labels unless told otherwise."""
        meta = self._meta(short)
        labels = {f"fuzz-{short}": meta["name"]}
        body: Obj = {
            "apiVersion": API_VERSION,
            "kind": resource.kind,
            "metadata": meta,
            "spec": {
                "replicas": self.rnd.randrange(0, 3),
                "selector": selector if selector is not None else {"matchLabels": labels},
                "template": self._template(labels, template_spec),
                **spec,
            },
        }
        return Hostile(resource, body, why)

    def _set(
        self, why: str, selector: Obj | None = None, template_spec: Obj | None = None, **spec: Any
    ) -> Hostile:
        return self._owner(kinds.MACHINE_SET.resource, "ms", why, selector, template_spec, spec)

    def _md(self, why: str, selector: Obj | None = None, strategy: Obj | None = None, **spec: Any) -> Hostile:
        rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        spec = {"strategy": strategy if strategy is not None else rolling, **spec}
        return self._owner(kinds.MACHINE_DEPLOYMENT.resource, "md", why, selector, None, spec)

    def _operator(self) -> str:
        return self.rnd.choice(["Near", "in", "Like", "", SNOWMAN, "GreaterThan", "DoesExist"])

    # --- MachineClasses --------------------------------------------------------------------------------

    def class_list_where_map(self) -> Hostile:
        field = self.rnd.choice(["labels", "failCreates", "zone"])
        return self._class(f"providerSpec.{field} is a list", providerSpec={field: ["a", {"b": 1}]})

    def class_aws_wrong_shapes(self) -> Hostile:
        """The issue's case: an AWS class whose providerSpec holds a list where a map belongs (its
        driver refuses it before any call to the cloud: the secret has no credentials either)."""
        spec: Obj = self.rnd.choice(
            [
                {"tags": ["a", "b"]},
                {"blockDevices": {"ebs": 1}},
                {"networkInterfaces": "eth0"},
                {"iam": ["x"]},
            ]
        )
        return self._class(
            f"AWS providerSpec of the wrong shape: {sorted(spec)}", provider="AWS", providerSpec=spec
        )

    def class_deeply_nested(self) -> Hostile:
        depth = self.rnd.choice([90, 300, 400])  # orjson stops at 255 levels, the API server does not
        return self._class(f"providerSpec nested {depth} deep", providerSpec=nested(depth))

    def class_huge_value(self) -> Hostile:
        field = self.rnd.choice(["hugeField", "bootDelaySeconds", "failCreates"])
        return self._class(
            f"providerSpec.{field} is a 300 KB string", providerSpec={field: huge(self.rnd, 300_000)}
        )

    def class_unknown_provider(self) -> Hostile:
        provider = self.rnd.choice(["nimbus", UNICODE, "AWS ", "x" * 2000])
        return self._class("unknown provider", provider=provider)

    def class_missing_secret(self) -> Hostile:
        return self._class(
            "secretRef names no secret",
            secretRef={"name": f"{self.prefix}-no-such-secret-{self.n}", "namespace": self.namespace},
        )

    def class_bad_capacity(self) -> Hostile:
        value = self.rnd.choice(["lots", "-", SNOWMAN, "1ee5", "12.5.6Gi"])
        return self._class(
            "nodeTemplate capacity is not a quantity",
            nodeTemplate={"capacity": {"cpu": value, "memory": "1Gi", "gpu": "0"}, "instanceType": "t",
                          "region": "r", "zone": "z"},
        )  # fmt: skip

    def class_bad_spec_types(self) -> Hostile:
        spec: Obj = self.rnd.choice(
            [
                {"bootDelaySeconds": "soon"},
                {"bootDelaySeconds": -5},
                {"failCreates": {"count": "many"}},
                {"failCreates": {"count": 1, "code": "Teapot"}},
                {"neverJoin": "yes"},
                {"unknownField": True},
                {"labels": {"a": {"b": "c"}}},
            ]
        )
        return self._class(f"providerSpec has wrong types: {sorted(spec)}", providerSpec=spec)

    # --- Machines --------------------------------------------------------------------------------------

    def machine_missing_class(self) -> Hostile:
        return self._machine("class does not exist")

    def machine_huge_class_name(self) -> Hostile:
        name = self.rnd.choice(["c" * 100_000, UNICODE * 50])
        return self._machine(
            "class name no object can have", {"class": {"kind": "MachineClass", "name": name}}
        )

    def machine_empty_class(self) -> Hostile:
        cls = self.rnd.choice([{"kind": "MachineClass", "name": ""}, {"kind": "", "name": "x"}, {}])
        return self._machine("class reference incomplete", {"class": cls})

    def machine_bad_durations(self) -> Hostile:
        field = self.rnd.choice(
            ["drainTimeout", "healthTimeout", "creationTimeout", "machinePreserveTimeout"]
        )
        value = self.rnd.choice(["soon", "-5m", "1e400h", UNICODE, "9" * 400 + "h", ""])
        return self._machine(f"{field} is {value[:20]!r}", {field: value})

    def machine_unicode_provider_id(self) -> Hostile:
        return self._machine(
            "unicode providerID, missing class", {"providerID": f"local:///{UNICODE}/{SNOWMAN}"}
        )

    def machine_huge_annotation(self) -> Hostile:
        return self._machine(
            "200 KB annotation, missing class", annotations={"fuzz/huge": huge(self.rnd, 200_000)}
        )

    def machine_missing_owner(self) -> Hostile:
        owner = {
            "apiVersion": API_VERSION,
            "kind": "MachineSet",
            "name": f"{self.prefix}-no-such-set",
            "uid": f"00000000-0000-0000-0000-{self.rnd.randrange(10**12):012d}",
            "controller": True,
        }
        return self._machine("owned by a MachineSet that does not exist", ownerReferences=[owner])

    def machine_bad_node_template(self) -> Hostile:
        template = self.rnd.choice(
            [
                {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
                {"metadata": {"labels": {"a": SNOWMAN * 100}}},
                {"spec": {"weird": nested(self.rnd.choice([40, 400]))}},
            ]
        )
        return self._machine("odd nodeTemplate, missing class", {"nodeTemplate": template})

    # --- MachineSets -----------------------------------------------------------------------------------

    def set_unknown_operator(self) -> Hostile:
        op = self._operator()
        selector = {"matchExpressions": [{"key": "fuzz", "operator": op, "values": ["x"]}]}
        return self._set(f"selector operator {op!r}", selector)

    def set_operator_values(self) -> Hostile:
        selector = self.rnd.choice(
            [
                {"matchExpressions": [{"key": "fuzz", "operator": "In", "values": []}]},
                {"matchExpressions": [{"key": "fuzz", "operator": "Exists", "values": ["x"]}]},
            ]
        )
        return self._set("selector values do not fit the operator", selector)

    def set_selector_mismatch(self) -> Hostile:
        return self._set("selector does not match the template", {"matchLabels": {"fuzz-set": UNICODE[:5]}})

    def set_negative_replicas(self) -> Hostile:
        return self._set("negative replicas", replicas=-self.rnd.randrange(1, 2**31))

    def set_bad_template(self) -> Hostile:
        spec: Obj = self.rnd.choice([{"class": {"kind": "", "name": ""}}, {"drainTimeout": "forever"}])
        return self._set("invalid machine template", template_spec=spec, replicas=2**31 - 1)

    def set_missing_class(self) -> Hostile:
        return self._set("template class does not exist", replicas=1)

    # --- MachineDeployments ----------------------------------------------------------------------------

    def md_unknown_strategy(self) -> Hostile:
        kind = self.rnd.choice(["Sideways", "", UNICODE, "rollingupdate"])
        return self._md(f"strategy type {kind!r}", strategy={"type": kind})

    def md_bad_surge(self) -> Hostile:
        surge, unavailable = self.rnd.choice(
            [("abc%", 0), ("1.5%", 1), ("5", 1), (1, "x" * 5000), ("x" * 5000, 1)]
        )
        return self._md(
            "bad maxSurge/maxUnavailable",
            strategy={
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
        )

    def md_unknown_operator(self) -> Hostile:
        op = self._operator()
        selector = {"matchExpressions": [{"key": "fuzz", "operator": op, "values": ["x"]}]}
        return self._md(f"selector operator {op!r}", selector)

    def md_missing_rolling_update(self) -> Hostile:
        return self._md("RollingUpdate without rollingUpdate", strategy={"type": "RollingUpdate"})

    def md_in_place(self) -> Hostile:
        return self._md(
            "unknown orchestrationType",
            strategy={"type": "InPlaceUpdate", "inPlaceUpdate": {"orchestrationType": "Whenever",
                                                                 "maxSurge": 1, "maxUnavailable": 0}},
        )  # fmt: skip

    def md_wrong_types(self) -> Hostile:
        """Wrong types where the schema types the field: the API server refuses these (422)."""
        hostile = self._md("replicas is a string")
        hostile.body["spec"]["replicas"] = self.rnd.choice(["three", [3], {"n": 3}])
        return hostile

    def machine_wrong_types(self) -> Hostile:
        field, value = self.rnd.choice([("providerID", 5), ("maxEvictRetries", 2**40), ("class", "name")])
        return self._machine(f"{field} has the wrong type", {field: value})

    def md_negative_replicas(self) -> Hostile:
        return self._md("negative replicas", replicas=-1)

    # --- MachineDrainRules (mcm-tasks.io) --------------------------------------------------------------

    def _rule(self, why: str, drain: Obj, **spec: Any) -> Hostile:
        body: Obj = {
            "apiVersion": kinds.MACHINE_DRAIN_RULE.resource.api_version,
            "kind": "MachineDrainRule",
            "metadata": self._meta("mdr"),
            "spec": {"drain": drain, **spec},
        }
        return Hostile(kinds.MACHINE_DRAIN_RULE.resource, body, why)

    def rule_unknown_behavior(self) -> Hostile:
        behavior = self.rnd.choice(["Evict", "drain", "", UNICODE, huge(self.rnd, 5000)])
        return self._rule("drain behavior not one of Drain, Skip, WaitCompleted", {"behavior": behavior})

    def rule_huge_order(self) -> Hostile:
        order = self.rnd.choice([2**31, -(2**31) - 1, 2**62, -(2**62)])
        return self._rule("drain order outside int32", {"behavior": "Drain", "order": order})

    def rule_order_without_drain(self) -> Hostile:
        return self._rule(
            "an order on a Skip rule", {"behavior": "Skip", "order": self.rnd.randrange(1, 100)}
        )

    def rule_bad_pod_selector(self) -> Hostile:
        pods = [
            {"selector": {"matchExpressions": [{"key": "app", "operator": self._operator(), "values": []}]}}
        ]
        return self._rule("pod selector with a bad operator", {"behavior": "Skip"}, pods=pods)

    def rule_bad_namespace_selector(self) -> Hostile:
        req = {"key": UNICODE, "operator": "In", "values": []}
        pods = [{"namespaceSelector": {"matchExpressions": [req]}}]
        return self._rule("namespace selector In without values", {"behavior": "Drain"}, pods=pods)

    def rule_bad_machine_selector(self) -> Hostile:
        machines = [{"selector": {"matchExpressions": [{"key": "pool", "operator": self._operator()}]}}]
        return self._rule("machine selector with a bad operator", {"behavior": "Drain"}, machines=machines)

    def rule_wrong_types(self) -> Hostile:
        choices: list[Obj] = [
            {"behavior": ["Drain"]},
            {"behavior": "Drain", "order": "first"},
            {"order": 1.5},
        ]
        drain = self.rnd.choice(choices)
        return self._rule("wrong types in spec.drain (the schema refuses them)", drain)
