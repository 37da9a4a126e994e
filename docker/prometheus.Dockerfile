# Prometheus from Debian's package, for machines that cannot pull prom/prometheus
# (docker/check.sh builds it on the local base image; compose.yaml takes it through
# PROMETHEUS_IMAGE).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null && \
    rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/bin/prometheus"]
