# syntax=docker/dockerfile:1
# ctrain image: ctrain-controller and ctrain-worker. Multi-stage: compilers stay
# in the build stage. The deployment issue adds the CUDA variant (build arg) and
# verifies the image on kind/minikube; this machine has no Docker engine, so the
# file is not built in CI yet.
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libcurl4-openssl-dev libcjson-dev libssl-dev libyaml-dev libopenblas-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTRAIN_CUDA=OFF -DCTRAIN_BUILD_TESTS=OFF \
    && ninja -C /build ctrain-controller ctrain-worker

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libcurl4 libcjson1 libssl3 libyaml-0-2 libopenblas0-pthread zlib1g ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 65532 --no-create-home ctrain
COPY --from=build /build/controller/ctrain-controller /build/worker/ctrain-worker /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ctrain-controller"]
