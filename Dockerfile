# otelctx container image: the otelcol-otelctx distribution alone, on an
# empty base (no shell, no package manager, no C library).
#
# Build it with `make image`: it copies the static binary that `make build`
# produced (the collector builder's Go build; no cgo) and the shipped
# configuration into the build context _build/image/ and runs
# `podman build` (or buildah) there. No registry is needed: both stages
# start FROM scratch. The first stage assembles the file system (owners and
# modes fixed here, not inherited from the build host); the final stage
# takes only that.
#
# Run it on a host (docs/deploy.md): host PID namespace, the capabilities
# of docs/requirements.md, /sys/kernel/btf read-only for the eBPF sampler:
#
#   podman run --rm --pid=host \
#     --cap-drop=all --cap-add=SYS_PTRACE,BPF,PERFMON,SYS_ADMIN,SYSLOG,DAC_READ_SEARCH \
#     -v /sys/kernel/btf:/sys/kernel/btf:ro \
#     localhost/otelctx:VERSION
FROM scratch AS rootfs
COPY --chmod=0555 otelcol-otelctx /usr/bin/otelcol-otelctx
COPY --chmod=0444 otelctx.yaml /etc/otelctx/otelctx.yaml

FROM scratch
COPY --from=rootfs / /
USER 0:0
ENTRYPOINT ["/usr/bin/otelcol-otelctx"]
CMD ["--config", "/etc/otelctx/otelctx.yaml", "--feature-gates=service.profilesSupport"]
