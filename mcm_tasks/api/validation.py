"""MCM's validation of its objects: every problem at once, each naming the field it is about.

A controller skips an object that has problems (and says why in an event); it never half-acts on it.
Beyond upstream, durations that do not parse are reported here: upstream's decoder would refuse the
whole object, we read it and let validation say what is wrong.
"""

from __future__ import annotations

from enum import StrEnum

from kubernetes.utils import parse_quantity
from pydantic import BaseModel, ValidationError

from mcm_tasks.api.enums import MachineDeploymentStrategyType, OrchestrationType
from mcm_tasks.api.intstr import INT32_MAX, INT32_MIN, resolve_int_or_percent
from mcm_tasks.api.machine import ClassSpec, Machine, MachineConfiguration, MachineTemplateSpec
from mcm_tasks.api.machineclass import MachineClass
from mcm_tasks.api.machinedeployment import MachineDeployment
from mcm_tasks.api.machineset import MachineSet
from mcm_tasks.api.meta import LabelSelector
from mcm_tasks.durations import parse_duration

__all__ = [
    "ErrorType",
    "FieldError",
    "parse_problem",
    "validate_label_selector",
    "validate_machine",
    "validate_machine_class",
    "validate_machine_deployment",
    "validate_machine_set",
]


class ErrorType(StrEnum):
    REQUIRED = "Required"
    INVALID = "Invalid"
    NOT_SUPPORTED = "NotSupported"
    FORBIDDEN = "Forbidden"


class FieldError(BaseModel):
    """One problem, as Kubernetes' ``field.Error`` reports it."""

    field: str
    type: ErrorType
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.type}: {self.message}"


def _required(field: str, message: str) -> FieldError:
    return FieldError(field=field, type=ErrorType.REQUIRED, message=message)


def _invalid(field: str, message: str) -> FieldError:
    return FieldError(field=field, type=ErrorType.INVALID, message=message)


# --- pieces shared by the kinds ---

#: the longest name of a Kubernetes object (a DNS subdomain)
MAX_NAME_LENGTH = 253


def _class_reference(spec: ClassSpec, path: str) -> list[FieldError]:
    errors = []
    if not spec.kind:
        errors.append(_required(f"{path}.kind", "Kind is required"))
    if not spec.name:
        errors.append(_required(f"{path}.name", "Name is required"))
    elif len(spec.name) > MAX_NAME_LENGTH:
        # not in upstream: no object has such a name, and quoting it would put it in every message
        errors.append(_invalid(f"{path}.name", f"must be no more than {MAX_NAME_LENGTH} characters"))
    return errors


def _configuration(config: MachineConfiguration, path: str) -> list[FieldError]:
    errors = []
    for name in MachineConfiguration.DURATION_FIELDS:
        value = getattr(config, name)
        if value is None:
            continue
        alias = MachineConfiguration.model_fields[name].alias or name
        try:
            seconds = parse_duration(value)
        except ValueError:
            errors.append(_invalid(f"{path}.{alias}", f"{_short(value)} is not a duration (e.g. 10m, 1h30m)"))
            continue
        if seconds < 0:
            errors.append(_invalid(f"{path}.{alias}", f"{_short(value)} must not be negative"))
    return errors


def _replicas(replicas: int, path: str) -> list[FieldError]:
    # upstream reports a negative count as Required, not Invalid
    return [_required(path, "Replicas has to be a whole number")] if replicas < 0 else []


def validate_label_selector(selector: LabelSelector | None, path: str = "spec.selector") -> list[FieldError]:
    """``metav1validation.ValidateLabelSelector``'s operator rules. Not in MCM's own validation, but
    its controllers convert every selector with ``LabelSelectorAsSelector``, which fails on these;
    here they are reported on the object rather than failing each match of the selector."""
    if selector is None:
        return []
    errors = []
    for i, req in enumerate(selector.match_expressions):
        at = f"{path}.matchExpressions[{i}]"
        if req.operator in ("In", "NotIn"):
            if not req.values:
                message = "must be specified when `operator` is 'In' or 'NotIn'"
                errors.append(_required(f"{at}.values", message))
        elif req.operator in ("Exists", "DoesNotExist"):
            if req.values:
                errors.append(
                    FieldError(
                        field=f"{at}.values",
                        type=ErrorType.FORBIDDEN,
                        message="may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            message = f"{_short(req.operator)} is not a valid selector operator"
            errors.append(_invalid(f"{at}.operator", message))
    return errors


def _short(value: object, limit: int = 64) -> str:
    """A user's value quoted in a message, cut short: a status message must not carry a megabyte."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _selector_in_template(selector: LabelSelector | None, template: MachineTemplateSpec) -> list[FieldError]:
    """Upstream's check, type and path included: one Required error on ``spec.selector.matchLabels``
    at the first selector label the template lacks (Go's map order; ours is the selector's)."""
    if selector is None:
        return []
    labels = template.metadata.labels
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return [
                _required(
                    "spec.selector.matchLabels",
                    f"is not matching with spec.template.metadata.labels (label {_short(key)})",
                )
            ]
    return []


def _template(template: MachineTemplateSpec) -> list[FieldError]:
    return _class_reference(template.spec.class_, "spec.template.spec.class") + _configuration(
        template.spec, "spec.template.spec"
    )


def _scaled_int32(value: int | str | None, replicas: int, round_up: bool, path: str) -> list[FieldError]:
    """Upstream's ``canConvertIntOrStringToInt32``: any value that does not give an int32 is a
    Required error ("unable to convert … to int32"), with what was wrong after it."""
    name = path.rsplit(".", 1)[-1]
    try:
        resolved = resolve_int_or_percent(value, replicas, round_up)
    except ValueError as err:
        reason = "must be set (an integer or a percentage)" if value is None else _cut(str(err))
        return [_required(path, f"unable to convert {name} to int32: {reason}")]
    if not INT32_MIN <= resolved <= INT32_MAX:
        return [_required(path, f"unable to convert {name} to int32: {_short(value)} does not fit")]
    return []


# --- the kinds ---


def validate_machine(machine: Machine) -> list[FieldError]:
    """Upstream: ``validateMachine``, ``validateMachineClass``."""
    return _class_reference(machine.spec.class_, "spec.class") + _configuration(machine.spec, "spec")


def validate_machine_set(machine_set: MachineSet) -> list[FieldError]:
    spec = machine_set.spec
    return (
        _replicas(spec.replicas, "spec.replicas")
        + validate_label_selector(spec.selector)
        + _selector_in_template(spec.selector, spec.template)
        + _template(spec.template)
    )


def validate_machine_deployment(deployment: MachineDeployment) -> list[FieldError]:
    spec = deployment.spec
    errors = _replicas(spec.replicas, "spec.replicas")
    strategy = spec.strategy
    supported = [t.value for t in MachineDeploymentStrategyType]
    if strategy.type not in supported:  # upstream: Invalid, an empty type included
        errors.append(_invalid("spec.strategy.type", f"strategy type must be one of {', '.join(supported)}"))
    elif strategy.type == MachineDeploymentStrategyType.ROLLING_UPDATE:
        path = "spec.strategy.rollingUpdate"
        if strategy.rolling_update is None:
            errors.append(_required(path, "is required for the RollingUpdate strategy"))
        else:
            update = strategy.rolling_update
            errors += _scaled_int32(update.max_surge, spec.replicas, True, f"{path}.maxSurge")
            errors += _scaled_int32(update.max_unavailable, spec.replicas, False, f"{path}.maxUnavailable")
    elif strategy.type == MachineDeploymentStrategyType.IN_PLACE_UPDATE:
        path = "spec.strategy.inPlaceUpdate"
        if strategy.in_place_update is None:
            errors.append(_required(path, "is required for the InPlaceUpdate strategy"))
        else:
            in_place = strategy.in_place_update
            errors += _scaled_int32(in_place.max_surge, spec.replicas, True, f"{path}.maxSurge")
            errors += _scaled_int32(in_place.max_unavailable, spec.replicas, False, f"{path}.maxUnavailable")
            orchestrations = [o.value for o in OrchestrationType]
            if not in_place.orchestration_type:
                errors.append(
                    _required(f"{path}.orchestrationType", f"must be one of {', '.join(orchestrations)}")
                )
            elif in_place.orchestration_type not in orchestrations:
                errors.append(
                    _invalid(
                        f"{path}.orchestrationType",
                        f"{_short(in_place.orchestration_type)} is not one of {', '.join(orchestrations)}",
                    )
                )
    return (
        errors
        + validate_label_selector(spec.selector)
        + _selector_in_template(spec.selector, spec.template)
        + _template(spec.template)
    )


#: capacity entries the autoscaler needs to scale a node group from zero
NODE_TEMPLATE_CAPACITY_KEYS = ("cpu", "gpu", "memory")


def validate_machine_class(machine_class: MachineClass) -> list[FieldError]:
    template = machine_class.node_template
    if template is None:
        return []
    errors = [
        _required(f"nodeTemplate.capacity.{key}", f"{key} is required in the node template's capacity")
        for key in NODE_TEMPLATE_CAPACITY_KEYS
        if key not in template.capacity
    ]
    for field_name, quantities in (
        ("capacity", template.capacity),
        ("virtualCapacity", template.virtual_capacity),
    ):
        for name, quantity in quantities.items():
            if not _is_quantity(quantity):
                errors.append(
                    _invalid(f"nodeTemplate.{field_name}.{name}", f"{_short(quantity)} is not a quantity")
                )
    for alias, value in (
        ("instanceType", template.instance_type),
        ("region", template.region),
        ("zone", template.zone),
    ):
        if not value:
            errors.append(_required(f"nodeTemplate.{alias}", f"{alias} is required"))
    return errors


def _is_quantity(value: object) -> bool:
    """Whether ``resource.Quantity`` would decode it (upstream's decoder refuses the whole object)."""
    if isinstance(value, bool):
        return False
    try:
        parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return False
    return True


def parse_problem(err: Exception, limit: int = 600) -> str:
    """What is wrong with an object that does not even parse into its model, field by field, without
    the values (they may be huge, or hold what does not belong in an Event)."""
    if not isinstance(err, ValidationError):
        return _cut(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", limit)
    parts = []
    for e in err.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in e["loc"])
        parts.append(f"{loc}: {e['msg']}" if loc else str(e["msg"]))
    return _cut("; ".join(parts), limit)
