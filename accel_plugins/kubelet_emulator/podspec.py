"""Pod manifests for the emulator's admission: what the device manager reads of a Pod.

A file holds one Pod (``apiVersion: v1``, ``kind: Pod``) or several YAML
documents of them. Read are ``metadata.name`` and ``metadata.namespace``, and
for each of ``spec.initContainers`` and ``spec.containers``: ``name``,
``restartPolicy`` (an init container with ``Always`` is a sidecar) and
``resources.limits`` / ``resources.requests`` and ``resources.claims``
(``name``, ``request``); ``spec.resourceClaims`` (``name``, and one of
``resourceClaimName`` and ``resourceClaimTemplateName``); ``metadata.uid``; and
``status.resourceClaimStatuses`` (``name``, ``resourceClaimName``). Every other
field is ignored.

A claim from a template is found as the kubelet finds it (dynamic-resource-allocation
``resourceclaim.Name``): the ResourceClaim controller of kube-controller-manager
creates it and records its name in the pod's ``status.resourceClaimStatuses``,
so a manifest as the API server returns it (``kubectl get pod -o yaml``) names
it there. An entry without a claim name means no claim was needed (skipped); no
entry means the claim is not there yet, and admission fails saying so. Such a
claim must be owned by the pod (``resourceclaim.IsForPod``), which is checked
when the manifest has the pod's ``metadata.uid``.

Two kinds of problem are told apart:

- A file that is not a Pod manifest (not YAML, a field of the wrong type, a
  container without a name, a quantity that is no quantity) raises
  :class:`~accel_plugins.errors.ConfigError` naming the file, the field and
  the reason: the command exits 2 before anything starts.
- A well-formed Pod that the API server would refuse (an extended resource
  that is not an integer, a request that differs from its limit, a request
  without a limit, a negative quantity) parses, and :meth:`PodSpec.invalid`
  lists the API server's validation errors; admission refuses such a pod with
  them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from accel_plugins.errors import ConfigError
from accel_plugins.util import yamlfile
from accel_plugins.util.k8snames import DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_RE, NAME_MAX
from accel_plugins.util.quantity import parse_quantity

DEFAULT_NAMESPACE = "default"

_DNS1123_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_extended_resource(name: str) -> bool:
    """Whether ``name`` is an extended resource (``domain/name`` outside ``kubernetes.io``),
    the kind a device plugin advertises; cpu, memory, hugepages-* are native."""
    return "/" in name and "kubernetes.io/" not in name


@dataclass(frozen=True, slots=True)
class Quantity:
    """A quantity as written in the manifest, and its value."""

    text: str
    value: Fraction

    def __str__(self) -> str:
        return self.text


def _empty() -> Mapping[str, Quantity]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodClaim:
    """``spec.resourceClaims[]``: the pod's name for a claim, and the ResourceClaim's name.

    For a claim from a template, ``template`` names it and ``claim_name`` comes from the
    pod's status: ``None`` with ``generated`` true when the controller created no claim
    (none was needed), ``None`` with ``generated`` false when it has not recorded one yet.
    """

    name: str
    claim_name: str | None
    template: str = ""
    generated: bool = True


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """``resources.claims[]``: a pod claim a container uses; ``request`` "" means all of it."""

    name: str
    request: str = ""


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """One container of the pod; ``path`` is its field path (``spec.containers[0]``)."""

    name: str
    path: str
    init: bool = False
    restartable: bool = False
    limits: Mapping[str, Quantity] = field(default_factory=_empty, hash=False)
    requests: Mapping[str, Quantity] = field(default_factory=_empty, hash=False)
    claims: tuple[ContainerClaim, ...] = ()

    @property
    def kind(self) -> str:
        if not self.init:
            return "container"
        return "init container (sidecar)" if self.restartable else "init container"

    @property
    def devices(self) -> dict[str, int]:
        """Extended resources this container asks for, from ``resources.limits`` (the device
        manager reads limits: for extended resources requests must equal them); zero counts
        and non-integer values left out."""
        counts = {}
        for name, quantity in sorted(self.limits.items()):
            value = quantity.value
            if is_extended_resource(name) and value.denominator == 1 and value > 0:
                counts[name] = int(value)
        return counts

    def invalid(self) -> list[str]:
        """The API server's validation errors for this container's extended resources."""
        problems = []
        where = f"{self.path}.resources"
        for kind, values in (("limits", self.limits), ("requests", self.requests)):
            for name, quantity in sorted(values.items()):
                path = f"{where}.{kind}[{name}]"
                if quantity.value < 0:
                    problems.append(
                        f'{path}: Invalid value: "{quantity}": must be greater than or equal to 0'
                    )
                elif is_extended_resource(name) and quantity.value.denominator != 1:
                    problems.append(f'{path}: Invalid value: "{quantity}": must be an integer')
        for name, request in sorted(self.requests.items()):
            if not is_extended_resource(name):
                continue
            limit = self.limits.get(name)
            if limit is None:
                problems.append(
                    f"{where}.limits: Required value: "
                    "Limit must be set for non overcommitable resources"
                )
            elif request.value != limit.value:
                problems.append(
                    f'{where}.requests[{name}]: Invalid value: "{request}": '
                    f"must be equal to {name} limit of {limit}"
                )
        return problems


@dataclass(frozen=True, slots=True)
class PodSpec:
    """A pod as admission sees it; ``source`` names where it came from."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    init_containers: tuple[ContainerSpec, ...] = ()
    containers: tuple[ContainerSpec, ...] = ()
    source: str = ""
    resource_claims: tuple[PodClaim, ...] = ()
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def all_containers(self) -> tuple[ContainerSpec, ...]:
        """Init containers first, then app containers: the order the kubelet admits them."""
        return self.init_containers + self.containers

    def invalid(self) -> list[str]:
        """The API server's validation errors (empty for a pod it would accept)."""
        return [p for c in self.all_containers for p in c.invalid()]

    @property
    def resources(self) -> list[str]:
        """Every extended resource a container of the pod asks for, sorted."""
        return sorted({r for c in self.all_containers for r in c.devices})

    def device_request(self) -> dict[str, int]:
        """The pod's effective request of each extended resource: the larger of the app
        containers' sum and the largest init container (init containers run one at a time,
        before the app containers)."""
        totals: dict[str, int] = {}
        for resource in self.resources:
            apps = sum(c.devices.get(resource, 0) for c in self.containers)
            inits = max((c.devices.get(resource, 0) for c in self.init_containers), default=0)
            totals[resource] = max(apps, inits)
        return totals


class _Fields:
    """Typed reads of one YAML document; every error names the source and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, reason: str) -> ConfigError:
        return ConfigError(self.source, path, reason)

    def mapping(self, value: object, path: str, *, optional: bool = False) -> dict[str, Any]:
        if value is None and optional:
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(path, f"keys must be strings, got {key!r}")
        return value

    def items(self, value: object, path: str, *, optional: bool = False) -> list[Any]:
        if value is None and optional:
            return []
        if not isinstance(value, list):
            raise self.error(path, f"expected a list, got {_kind(value)}")
        return value

    def text(self, value: object, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(path, f"expected a non-empty string, got {_kind(value)}")
        return value


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), f"{type(value).__name__} {value!r}"
    )


def _quantities(fields: _Fields, value: object, path: str) -> dict[str, Quantity]:
    result = {}
    for name, raw in fields.mapping(value, path, optional=True).items():
        try:
            result[name] = Quantity(str(raw), parse_quantity(raw))
        except ValueError as e:
            raise fields.error(f"{path}[{name}]", str(e)) from None
    return result


def _container_claims(fields: _Fields, value: object, path: str) -> tuple[ContainerClaim, ...]:
    claims = []
    for i, raw in enumerate(fields.items(value, path, optional=True)):
        doc = fields.mapping(raw, f"{path}[{i}]")
        name = fields.text(doc.get("name"), f"{path}[{i}].name")
        request = doc.get("request") or ""
        if not isinstance(request, str):
            raise fields.error(f"{path}[{i}].request", f"expected a string, got {_kind(request)}")
        claims.append(ContainerClaim(name, request))
    return tuple(claims)


def _pod_claims(
    fields: _Fields, value: object, statuses: Mapping[str, str | None]
) -> tuple[PodClaim, ...]:
    claims: list[PodClaim] = []
    for i, raw in enumerate(fields.items(value, "spec.resourceClaims", optional=True)):
        path = f"spec.resourceClaims[{i}]"
        doc = fields.mapping(raw, path)
        name = fields.text(doc.get("name"), f"{path}.name")
        if len(name) > NAME_MAX or not _DNS1123_LABEL_RE.fullmatch(name):
            raise fields.error(f"{path}.name", f"{name!r} is not a DNS-1123 label")
        if name in {c.name for c in claims}:
            raise fields.error(f"{path}.name", f"duplicate pod claim name {name!r}")
        named, template = doc.get("resourceClaimName"), doc.get("resourceClaimTemplateName")
        if (named is None) == (template is None):
            # The API server's rule (ValidatePodResourceClaim).
            raise fields.error(
                path, "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
            )
        if template is not None:
            template = _subdomain(fields, template, f"{path}.resourceClaimTemplateName")
            generated = name in statuses
            claims.append(PodClaim(name, statuses.get(name), template, generated))
            continue
        claims.append(PodClaim(name, _subdomain(fields, named, f"{path}.resourceClaimName")))
    return tuple(claims)


def _subdomain(fields: _Fields, value: object, path: str) -> str:
    text = fields.text(value, path)
    if len(text) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN_RE.fullmatch(text):
        raise fields.error(path, f"{text!r} is not a DNS-1123 subdomain")
    return text


def _claim_statuses(fields: _Fields, value: object) -> dict[str, str | None]:
    """``status.resourceClaimStatuses``: pod claim name -> the generated claim's name."""
    statuses: dict[str, str | None] = {}
    path = "status.resourceClaimStatuses"
    for i, raw in enumerate(fields.items(value, path, optional=True)):
        doc = fields.mapping(raw, f"{path}[{i}]")
        name = fields.text(doc.get("name"), f"{path}[{i}].name")
        claim = doc.get("resourceClaimName")
        statuses[name] = (
            None if claim is None else _subdomain(fields, claim, f"{path}[{i}].resourceClaimName")
        )
    return statuses


def _container(fields: _Fields, raw: object, path: str, *, init: bool) -> ContainerSpec:
    doc = fields.mapping(raw, path)
    name = fields.text(doc.get("name"), f"{path}.name")
    if len(name) > NAME_MAX or not _DNS1123_LABEL_RE.fullmatch(name):
        raise fields.error(
            f"{path}.name", f"{name!r} is not a DNS-1123 label (lowercase alphanumerics and '-')"
        )
    policy = doc.get("restartPolicy")
    if policy is not None and (not init or policy != "Always"):
        allowed = "only Always, on an init container"
        raise fields.error(f"{path}.restartPolicy", f"{policy!r} is not supported ({allowed})")
    resources = fields.mapping(doc.get("resources"), f"{path}.resources", optional=True)
    return ContainerSpec(
        name=name,
        path=path,
        init=init,
        restartable=policy == "Always",
        limits=MappingProxyType(
            _quantities(fields, resources.get("limits"), f"{path}.resources.limits")
        ),
        requests=MappingProxyType(
            _quantities(fields, resources.get("requests"), f"{path}.resources.requests")
        ),
        claims=_container_claims(fields, resources.get("claims"), f"{path}.resources.claims"),
    )


def pod_from_document(doc: object, source: str) -> PodSpec:
    """The pod in one parsed YAML document; ConfigError names ``source`` and the field."""
    fields = _Fields(source)
    top = fields.mapping(doc, "(top level)")
    if top.get("kind", "Pod") != "Pod":
        raise fields.error("kind", f"expected Pod, got {top['kind']!r}")
    if top.get("apiVersion", "v1") != "v1":
        raise fields.error("apiVersion", f"expected v1, got {top['apiVersion']!r}")
    metadata = fields.mapping(top.get("metadata"), "metadata")
    name = fields.text(metadata.get("name"), "metadata.name")
    if len(name) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN_RE.fullmatch(name):
        raise fields.error("metadata.name", f"{name!r} is not a DNS-1123 subdomain")
    namespace = metadata.get("namespace", DEFAULT_NAMESPACE)
    namespace = fields.text(namespace, "metadata.namespace")
    if len(namespace) > NAME_MAX or not _DNS1123_LABEL_RE.fullmatch(namespace):
        raise fields.error("metadata.namespace", f"{namespace!r} is not a DNS-1123 label")
    uid = metadata.get("uid") or ""
    uid = fields.text(uid, "metadata.uid") if uid else ""
    spec = fields.mapping(top.get("spec"), "spec")
    inits = [
        _container(fields, raw, f"spec.initContainers[{i}]", init=True)
        for i, raw in enumerate(
            fields.items(spec.get("initContainers"), "spec.initContainers", optional=True)
        )
    ]
    apps = [
        _container(fields, raw, f"spec.containers[{i}]", init=False)
        for i, raw in enumerate(fields.items(spec.get("containers"), "spec.containers"))
    ]
    if not apps:
        raise fields.error("spec.containers", "a pod needs at least one container")
    seen: dict[str, str] = {}
    for container in inits + apps:
        if container.name in seen:
            raise fields.error(
                f"{container.path}.name",
                f"duplicate container name {container.name!r} (also {seen[container.name]})",
            )
        seen[container.name] = container.path
    status = fields.mapping(top.get("status"), "status", optional=True)
    statuses = _claim_statuses(fields, status.get("resourceClaimStatuses"))
    pod_claims = _pod_claims(fields, spec.get("resourceClaims"), statuses)
    known = {c.name for c in pod_claims}
    for container in inits + apps:
        for i, claim in enumerate(container.claims):
            if claim.name not in known:
                # The API server's own message for this (ValidatePod).
                raise fields.error(
                    f"{container.path}.resources.claims[{i}].name",
                    f"Not found: {claim.name!r}: must be one of the pod's spec.resourceClaims",
                )
    return PodSpec(
        name=name,
        namespace=namespace,
        init_containers=tuple(inits),
        containers=tuple(apps),
        source=source,
        resource_claims=pod_claims,
        uid=uid,
    )


def _documents(text: str) -> list[Any]:
    """Every YAML document in ``text``, by the strict safe loader (duplicate keys refused)."""
    loader = yamlfile.StrictLoader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]  # untyped in the stubs
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def parse_pods(text: str, source: str) -> list[PodSpec]:
    """Every pod in ``text`` (one per YAML document; empty documents skipped)."""
    try:
        docs = _documents(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, "", f"not valid YAML: {yamlfile.reason(e)}") from None
    except RecursionError:
        raise ConfigError(source, "", "not valid YAML: nested too deeply") from None
    present = [(i, doc) for i, doc in enumerate(docs) if doc is not None]
    if not present:
        raise ConfigError(source, "", "no pod in the file")
    many = len(present) > 1
    return [
        pod_from_document(doc, f"{source} (document {i + 1})" if many else source)
        for i, doc in present
    ]


def load_pods(path: Path | str) -> list[PodSpec]:
    """Read the pods in the manifest at ``path``."""
    return parse_pods(yamlfile.read_text(path, "the pod manifest"), str(path))
