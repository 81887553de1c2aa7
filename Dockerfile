# syntax=docker/dockerfile:1
# ctrain image: ctrain-controller and ctrain-worker, non-root, no compilers.
#
#   docker build -t ctrain:latest .                                  # CPU
#   docker build -t ctrain:cuda --build-arg VARIANT=cuda .           # CUDA + NCCL
#
# The example data set (Debian's dataset-fashion-mnist) is installed so that
# examples/fashion-mnist.yaml runs as is. Without Docker (CI, the local
# cluster): `bash tools/image/build.sh ctrain` builds this file with buildah.
ARG VARIANT=cpu
ARG CUDA_VERSION=13.0.1

# ---- build stages -----------------------------------------------------------
FROM debian:bookworm-slim AS build-cpu
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libcurl4-openssl-dev libcjson-dev libssl-dev libyaml-dev libopenblas-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CTRAIN_CUDA=OFF

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config libnccl-dev \
      libcurl4-openssl-dev libcjson-dev libssl-dev libyaml-dev libopenblas-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CTRAIN_CUDA=ON

# hadolint ignore=DL3006
FROM build-${VARIANT} AS build
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTRAIN_CUDA="${CTRAIN_CUDA}" \
      -DCTRAIN_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES="80;90" \
    && ninja -C /build ctrain-controller ctrain-worker

# ---- runtime stages ---------------------------------------------------------
FROM debian:bookworm-slim AS run-cpu
RUN apt-get update && apt-get install -y --no-install-recommends \
      libcurl4 libcjson1 libssl3 libyaml-0-2 libopenblas0-pthread zlib1g ca-certificates \
      dataset-fashion-mnist \
    && rm -rf /var/lib/apt/lists/*

FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04 AS run-cuda
RUN apt-get update && apt-get install -y --no-install-recommends \
      libnccl2 libcurl4t64 libcjson1 libssl3t64 libyaml-0-2 libopenblas0-pthread zlib1g \
      ca-certificates dataset-fashion-mnist \
    && rm -rf /var/lib/apt/lists/*

# hadolint ignore=DL3006
FROM run-${VARIANT}
RUN useradd --system --uid 65532 --no-create-home ctrain
COPY --from=build /build/controller/ctrain-controller /build/worker/ctrain-worker /usr/local/bin/
COPY examples/fashion-mnist-model.json /etc/ctrain/model.json
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ctrain-controller"]
