"""The DRA driver's API side: ResourceSlices and ResourceClaims through lightkube.

Why lightkube: it is async-native (one ``AsyncClient`` on the event loop the
kubelet side already runs), ships typed models for ``resource.k8s.io/v1``
(``lightkube-models`` >= 1.34: ResourceSlice, ResourceClaim, DeviceClass) and
a ``py.typed`` marker, so ``mypy --strict`` checks our use of it; it is small
(httpx, msgspec, PyYAML) where kubernetes-asyncio brings aiohttp and a large
generated client. Everything here is imported only in DRA mode (extra
``[dra]``), never by ``accel_plugins.plugin`` or the device-plugin path.
"""

from accel_plugins.dra.kube.api import ApiVersions
from accel_plugins.dra.kube.claim_status import KubeClaimStatus
from accel_plugins.dra.kube.claims import KubeClaimSource
from accel_plugins.dra.kube.client import KUBECONFIG_ENV, make_client
from accel_plugins.dra.kube.publisher import KubeSlicePublisher
from accel_plugins.dra.kube.rolling import rolling_settings
from accel_plugins.dra.kube.withdraw import withdraw_on_switch

__all__ = [
    "KUBECONFIG_ENV",
    "ApiVersions",
    "KubeClaimSource",
    "KubeClaimStatus",
    "KubeSlicePublisher",
    "make_client",
    "rolling_settings",
    "withdraw_on_switch",
]
