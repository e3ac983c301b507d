# otelctx container image: the otelcol-otelctx distribution alone, on an
# empty base (no shell, no package manager, no C library).
#
# Build it with `make image`: a manifest list of linux/amd64 and
# linux/arm64. It copies one static binary per architecture (make build's
# for amd64, the same generated sources cross-compiled for arm64; no cgo)
# and the shipped configuration into the build context _build/image/ and
# runs `podman build --platform linux/amd64,linux/arm64 --manifest` (or
# buildah) there. No registry and no emulation are needed: the image starts
# FROM scratch and only copies (owners 0:0 and modes set here, not inherited
# from the build host; one stage, so no intermediate image is left behind).
#
# Run it on a host (docs/deploy.md): host PID namespace, the capabilities
# of docs/requirements.md (root-equivalent: docs/security.md):
#
#   podman run --rm --pid=host \
#     --cap-drop=all --cap-add=SYS_PTRACE,BPF,PERFMON,SYS_ADMIN,SYSLOG,DAC_READ_SEARCH \
#     localhost/otelctx:VERSION
FROM scratch
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=
COPY --chown=0:0 --chmod=0555 otelcol-otelctx-${TARGETARCH} /usr/bin/otelcol-otelctx
COPY --chown=0:0 --chmod=0444 otelctx.yaml /etc/otelctx/otelctx.yaml
LABEL org.opencontainers.image.title="otelctx" \
      org.opencontainers.image.description="OpenTelemetry Collector distribution that reads process and thread contexts (OTEP 4719, OTEP 4947) and joins them onto profiles" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/otelctx/otelctx" \
      org.opencontainers.image.documentation="https://github.com/otelctx/otelctx/blob/main/docs/deploy.md" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 0:0
ENTRYPOINT ["/usr/bin/otelcol-otelctx"]
CMD ["--config", "/etc/otelctx/otelctx.yaml", "--feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus"]
