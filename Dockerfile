# syntax=docker/dockerfile:1
# One image per vendor: docker build --target nvidia|generic (hack/build-images does both);
# each installs the wheel with its own extra (accel-plugins[nvidia] or [generic]) and [dra]
# (lightkube, for --kubelet-api dra).
#
# BASE_IMAGE is pinned by exact tag (Debian 12 with CPython 3.11, the version pyproject.toml
# targets). Pin it by digest where your registry is reachable:
#   hack/build-images --base docker.io/library/python:3.11.13-slim-bookworm@sha256:<digest>
# Offline, hack/build-images --make-base builds an equivalent base with mmdebstrap
# (Debian bookworm: python3, python3-venv, ca-certificates) and imports it with buildah.
ARG BASE_IMAGE=docker.io/library/python:3.11.13-slim-bookworm

# --- build: the package's wheel from this checkout ---
FROM ${BASE_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY accel_plugins ./accel_plugins
# An optional CA bundle (secret ca-cert, hack/build-images --ca-cert) for TLS-intercepting proxies.
RUN --mount=type=secret,id=ca-cert \
    if [ -s /run/secrets/ca-cert ]; then export PIP_CERT=/run/secrets/ca-cert; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- install: the wheel with one vendor's extra (its library) into a venv the image copies ---
# Bytecode is compiled here, since the runtime sets PYTHONDONTWRITEBYTECODE: the modules'
# (compileall) and the methods their dataclasses generate (accel_plugins.util.codecache).
FROM ${BASE_IMAGE} AS venv
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/accel-plugins

FROM venv AS venv-nvidia
RUN --mount=type=secret,id=ca-cert \
    if [ -s /run/secrets/ca-cert ]; then export PIP_CERT=/run/secrets/ca-cert; fi \
 && set -- /wheels/*.whl \
 && /opt/accel-plugins/bin/pip install --no-cache-dir --no-compile "$1[nvidia,dra]" \
 && /opt/accel-plugins/bin/pip uninstall --yes pip \
 && /opt/accel-plugins/bin/python -m compileall -q /opt/accel-plugins/lib \
 && /opt/accel-plugins/bin/python -m accel_plugins.util.codecache

FROM venv AS venv-generic
RUN --mount=type=secret,id=ca-cert \
    if [ -s /run/secrets/ca-cert ]; then export PIP_CERT=/run/secrets/ca-cert; fi \
 && set -- /wheels/*.whl \
 && /opt/accel-plugins/bin/pip install --no-cache-dir --no-compile "$1[generic,dra]" \
 && /opt/accel-plugins/bin/pip uninstall --yes pip \
 && /opt/accel-plugins/bin/python -m compileall -q /opt/accel-plugins/lib \
 && /opt/accel-plugins/bin/python -m accel_plugins.util.codecache

# --- runtime: shared by both vendors (each adds its own venv) ---
FROM ${BASE_IMAGE} AS runtime
# Set by hack/build-images: the package version, the full git commit, the build time
# (RFC 3339; SOURCE_DATE_EPOCH when set) and the source repository.
ARG VERSION=0.0.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/accel-plugins/accel-plugins
LABEL org.opencontainers.image.title="accel-plugins" \
      org.opencontainers.image.description="Kubernetes device plugins on one Python framework" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.vendor="accel-plugins"
ENV PATH=/opt/accel-plugins/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# No USER: on a node both plugins run as uid 0, and the chart drops every capability.
# Root is needed only as the owner of root-owned kubelet files: creating our socket in
# /var/lib/kubelet/device-plugins (root, 0750/0755), connecting to kubelet.sock and to
# pod-resources/kubelet.sock (root-owned sockets; connect() needs write permission), and, for
# generic with CDI, writing specs in /var/run/cdi. No capability (not even CAP_DAC_OVERRIDE)
# is used. --help, --version and --simulate work under any uid (docker run --user 65532).
EXPOSE 9478

FROM runtime AS nvidia
LABEL org.opencontainers.image.title="accel-plugins-nvidia" \
      org.opencontainers.image.description="accel-plugins nvidia: nvidia.com/gpu and MIG devices through NVML"
COPY --from=venv-nvidia /opt/accel-plugins /opt/accel-plugins
# Asks the NVIDIA container runtime to inject the driver's NVML library and device nodes.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
ENTRYPOINT ["accel-plugins", "nvidia"]

FROM runtime AS generic
LABEL org.opencontainers.image.title="accel-plugins-generic" \
      org.opencontainers.image.description="accel-plugins generic: /dev nodes from udev or path globs"
# pyudev loads libudev.so.1 at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libudev1=252.* \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY --from=venv-generic /opt/accel-plugins /opt/accel-plugins
ENTRYPOINT ["accel-plugins", "generic"]
