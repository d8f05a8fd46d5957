# syntax=docker/dockerfile:1
#
# shaper: one static binary on a distroless, non-root base.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t shaper .
#   docker run -v $PWD/shaper.yaml:/etc/shaper/shaper.yaml:ro -p 9090:9090 shaper
#
# The config must set admin.listen to 0.0.0.0:9090 (or :9090) to be reachable
# from outside the container; HEALTHCHECK calls 127.0.0.1:9090/healthz.

ARG GO_VERSION=1.26

# The builder runs on the build machine's platform and cross-compiles, so a
# multi-platform build (docker buildx --platform linux/amd64,linux/arm64) needs
# no emulation. The official golang image sets GOTOOLCHAIN=local: the tag must
# be at least the go line of go.mod.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Left empty, the binary says what Go recorded of the build (shaper version).
ARG VERSION=
ARG TARGETOS=linux
ARG TARGETARCH
# -tags nodemo leaves `shaper demo` out, and with it the embedded nats-server
# and kfake: a 15.9 MB binary instead of 28.1 MB, and no message broker in the
# image for scanners to report. The NATS and Kafka clients stay.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -tags nodemo -ldflags "-s -w -X main.version=${VERSION}" -o /out/shaper ./cmd/shaper

# static-debian12 has CA certificates (for https sinks and TLS to Kafka or
# Redis) and tzdata, and no shell. The :nonroot tag runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="shaper" \
      org.opencontainers.image.description="Shapes bursts from Kafka or NATS into a steady rate of requests" \
      org.opencontainers.image.source="https://github.com/shaper-dev/shaper" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/shaper /shaper
USER nonroot
# The admin server: /metrics, /healthz, /readyz, /v1/pipelines.
EXPOSE 9090
# `shaper healthcheck` GETs http://127.0.0.1:9090/healthz: no curl needed.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/shaper", "healthcheck"]
# SIGTERM starts the graceful drain (up to shutdown.drain_timeout); give the
# container a stop timeout above it (docker stop -t, compose stop_grace_period,
# Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/shaper"]
CMD ["run", "--config", "/etc/shaper/shaper.yaml"]
