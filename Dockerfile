# syntax=docker/dockerfile:1
#
# bext-scheduler image: a static binary on Alpine, run by tini as a non-root
# user, config at /etc/bext/bext.config.toml (mount it read-only).
#
#   docker build -t bext-scheduler \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) .
#   docker run --rm -v $PWD/bext.config.toml:/etc/bext/bext.config.toml:ro \
#     -e REDIS_URL=redis://redis:6379/0 -e BEXT_API_READ_TOKEN=$(openssl rand -hex 16) \
#     -p 9464:9464 bext-scheduler
#
# The node listens on every interface here (CMD below), so its config should
# hold read_token = "${BEXT_API_READ_TOKEN}" as examples/cluster.config.toml
# does: without it the API and status page are open to anyone reaching the
# port, and the node warns at start.
#
# .dockerignore keeps .git out of the context, so version and commit come in
# as build arguments (the Makefile computes the same values for `make build`).

ARG GO_VERSION=1.26
# Where the binary comes from: "build" (the default) compiles it in the
# golang stage below; "prebuilt" takes the one goreleaser built for the
# target platform (dockers_v2 in .goreleaser.yaml), so the multi-arch image
# carries the same binaries as the archives and packages. BuildKit builds
# only the stage chosen.
ARG BINARY=build

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# CGO_ENABLED=0: a static binary that runs on any libc (or none).
# -tags timetzdata builds the IANA zone database into the binary, so every
# node computes a zoned schedule's ticks from the same data whatever the
# image or host ships. The ldflags match the Makefile's.
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/bext-scheduler ./cmd/bext-scheduler \
 && /out/bext-scheduler version

# goreleaser's build context holds linux/amd64/bext-scheduler,
# linux/arm64/bext-scheduler, ...
FROM scratch AS prebuilt
ARG TARGETPLATFORM
COPY ${TARGETPLATFORM}/bext-scheduler /out/bext-scheduler

FROM ${BINARY} AS binary

# Alpine rather than distroless/static, for three reasons:
#  - command jobs are often `["/bin/sh", "-c", "..."]`: distroless has no shell,
#    so such a job would fail on every tick;
#  - HEALTHCHECK needs an HTTP client in the image (busybox wget here);
#    distroless has none, and a health subcommand does not exist;
#  - tini is one apk away.
# The cost is about 8 MB and a shell in the image; jobs that need more tools
# (pg_dump, aws) get them in an image built FROM this one.
FROM alpine:3.22
# tini is PID 1. The job runner puts each command job in its own process
# group and kills the whole group on timeout, lost lock or shutdown; the
# grandchildren it kills are re-parented to PID 1, and only an init reaps
# them. Without one they stay zombies for the container's life. tini also
# forwards SIGTERM/SIGHUP to bext-scheduler. Being in the image, this holds
# for `docker run` without --init and for Kubernetes (which has no --init);
# compose therefore does not set `init: true` (that would add a second init).
RUN apk add --no-cache tini ca-certificates \
 && addgroup -S -g 10001 bext \
 && adduser -S -D -H -u 10001 -G bext -h /var/lib/bext -s /sbin/nologin bext \
 && mkdir -p /etc/bext /var/lib/bext \
 && chown bext:bext /var/lib/bext
COPY --from=binary /out/bext-scheduler /usr/local/bin/bext-scheduler

# The config is mounted here (read-only); include = ["jobs/*.toml"] in it
# reads /etc/bext/jobs/. Secrets come in as environment variables (${VAR}).
ENV BEXT_CONFIG=/etc/bext/bext.config.toml
# Command jobs start here unless their schedule sets dir.
WORKDIR /var/lib/bext
USER 10001:10001

# /metrics, /healthz, /readyz. The CMD below makes the node listen on all
# interfaces whatever [http] listen says, so the port matches EXPOSE.
EXPOSE 9464
# Liveness only: /healthz is 200 while the process runs. /readyz (lock backend
# answered recently) is deliberately not the health check: a Redis outage
# must not get every node restarted (they recover by themselves). Point a
# load balancer or a Kubernetes readinessProbe at /readyz instead.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD wget -q -O /dev/null http://127.0.0.1:9464/healthz || exit 1

ENTRYPOINT ["/sbin/tini", "--", "/usr/local/bin/bext-scheduler"]
CMD ["run", "--listen", "0.0.0.0:9464"]
