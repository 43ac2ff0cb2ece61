# syntax=docker/dockerfile:1

# agentq production image: the agentq CLI (migrations, operations) and the five
# consumers, statically linked, in one small non-root runtime image.
#
#   docker build -t agentq:latest .
#   docker compose up -d            # builds it too (see docker-compose.yml)
#
# Binaries land in /usr/local/bin: agentq, indexer, scorer, rater, degrader,
# lab. The image has no default command; docker-compose.yml names one per
# service. Production uses a real Postgres with pgvector, so nothing of the
# development database (PGlite, node, npm) is in this image.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src

# Dependencies first, so source edits do not invalidate the module download.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=bind,source=go.mod,target=go.mod \
    --mount=type=bind,source=go.sum,target=go.sum \
    go mod download

COPY . .

# Cross-compiles on the build platform for the target platform; CGO off gives
# static binaries that run on distroless/static.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/ \
        ./cmd/agentq \
        ./cmd/indexer \
        ./cmd/scorer \
        ./cmd/rater \
        ./cmd/degrader \
        ./cmd/lab

FROM gcr.io/distroless/static-debian12:nonroot AS runtime

LABEL org.opencontainers.image.title="agentq" \
      org.opencontainers.image.description="agentq: quality loop for AI agents on NATS JetStream and Postgres/pgvector" \
      org.opencontainers.image.source="https://github.com/agentq/agentq"

COPY --from=build /out/ /usr/local/bin/

# Production defaults; every AGENTQ_* variable can be overridden at run time.
ENV AGENTQ_LOG_FORMAT=json \
    AGENTQ_METRICS_ADDR=:9090

# Prometheus /metrics and /healthz.
EXPOSE 9090

USER nonroot:nonroot
